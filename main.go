//go:build desktop

// Command orrery-desktop is Orrery's desktop app: the menu-bar item and the
// window, with this node's agent in process. Build it with
// scripts/desktop-build.sh: `go build -tags desktop,production .`, plus
// webkit2_40 on Linux (see there); see package app.
package main

import (
	_ "embed"
	"os"
	"runtime"

	"github.com/orrery-cluster/orrery/app"
)

// version is set at link time (-ldflags "-X main.version=…").
var version = "dev"

// The icons live in build/ beside the packaging files; go:embed cannot
// reach there from app/.
var (
	//go:embed build/appicon.png
	appIcon []byte
	//go:embed build/tray-template@2x.png
	trayTemplate []byte
	//go:embed build/tray.png
	trayIcon []byte
)

// Cocoa and GTK want the main OS thread: keep the main goroutine on it.
func init() { runtime.LockOSThread() }

func main() {
	os.Exit(app.Main(os.Args[1:], app.Icons{App: appIcon, TrayTemplate: trayTemplate, Tray: trayIcon}, version))
}
