//go:build !cgo

package ggml

// BuildWarning is "": without cgo there is no ggml to have built.
func BuildWarning() string { return "" }
