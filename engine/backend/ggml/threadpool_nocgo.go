//go:build !cgo

package ggml

// Without cgo there is no CPU backend to bind; this file only lets the
// package type-check (make darwin-vet builds with CGO_ENABLED=0).

import "github.com/ollama/ollama/ml"

type threads struct{}

func newThreads(ml.Backend, int) (*threads, error) { return nil, nil }
func (*threads) bind() func()                      { return func() {} }
func (*threads) close()                            {}
