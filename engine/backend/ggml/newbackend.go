package ggml

import (
	"fmt"

	"github.com/ollama/ollama/ml"
)

// newBackend creates the ggml backend with gpus' layers on their device,
// turning its panics (on some malformed files, and ml.ErrNoMem when a
// buffer cannot be allocated) into errors.
func newBackend(path string, threads int, fa ml.FlashAttentionType, gpus ml.GPULayersList) (b ml.Backend, err error) {
	defer func() { err = recovered(recover(), err) }()
	return ml.NewBackend(path, ml.BackendParams{AllocMemory: true, NumThreads: threads, FlashAttention: fa, GPULayers: gpus})
}

// recovered turns a panic's value into an error (keeping an error's type:
// ml.ErrNoMem), or returns err when there was none.
func recovered(p any, err error) error {
	switch p := p.(type) {
	case nil:
		return err
	case error:
		return p
	}
	return fmt.Errorf("%v", p)
}
