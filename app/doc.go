// Package app is Orrery's desktop shell: a menu-bar item and a native window
// (Wails) over the same web UI the agent serves at /ui/.
//
// What talks to Wails, fyne.io/systray or cgo sits behind the `desktop`
// build tag (desktop.go, systray.go), so that `go vet ./...` and
// `go test ./...` need no webkit. The rest is pure Go and tested here: the
// agent's HTTP client and the menu's status lines (client.go, status.go),
// the menu's actions (shell.go), the window's reverse proxy to the agent
// (proxy.go), Launch at Login (login.go) and the flags (options.go).
//
// Build the binary with scripts/desktop-build.sh: `go build -tags
// desktop,production .` from the repository root, plus webkit2_40 on Linux,
// without which Wails' webview turns every request into a bodiless GET.
package app
