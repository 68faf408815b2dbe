//go:build !desktop

// Command orrery-desktop is Orrery's desktop app. Without the desktop build
// tag it has no window and no menu-bar item, and says how to build it; the
// tag keeps webkit and cgo out of `go vet ./...` and `go test ./...`.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "orrery desktop: build with -tags desktop,production (see README)")
	os.Exit(2)
}
