//go:build !linux

package ggml

type span struct{ start, end uint64 }

// largeAnon and adviseHugePages: transparent huge pages are Linux's; macOS
// picks page sizes itself.
func largeAnon() map[span]bool             { return nil }
func adviseHugePages(map[span]bool) uint64 { return 0 }
