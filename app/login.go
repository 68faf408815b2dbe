package app

import (
	"errors"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"strings"

	"github.com/orrery-cluster/orrery/internal/atomicfile"
)

// LaunchAgentLabel names the macOS LaunchAgent that starts Orrery at login.
const LaunchAgentLabel = "dev.orrery.agent"

// LoginItem is the Launch at Login setting: on macOS a LaunchAgent plist
// (~/Library/LaunchAgents/dev.orrery.agent.plist), elsewhere an XDG
// autostart entry (~/.config/autostart/orrery.desktop). Its presence is
// the setting. Files are written atomically (temp file, then rename).
//
// A LaunchAgent rather than SMAppService (macOS 13+) because it needs no
// cgo; macOS lists it in Login Items all the same.
type LoginItem struct {
	// Home is the user's home directory.
	Home string
	// Exe is the program started at login, with Args.
	Exe  string
	Args []string
	// GOOS picks the file's kind: "darwin", or anything else for XDG.
	GOOS string
	// ConfigHome is $XDG_CONFIG_HOME; "" means Home/.config.
	ConfigHome string
}

// Path is the file whose presence means Launch at Login is on.
func (l *LoginItem) Path() string {
	if l.GOOS == "darwin" {
		return filepath.Join(l.Home, "Library", "LaunchAgents", LaunchAgentLabel+".plist")
	}
	cfg := l.ConfigHome
	if cfg == "" {
		cfg = filepath.Join(l.Home, ".config")
	}
	return filepath.Join(cfg, "autostart", "orrery.desktop")
}

// Enabled reports whether the login item exists.
func (l *LoginItem) Enabled() bool {
	_, err := os.Stat(l.Path())
	return err == nil
}

// Enable writes the login item.
func (l *LoginItem) Enable() error {
	if l.Exe == "" || !filepath.IsAbs(l.Exe) {
		return fmt.Errorf("launch at login: program %q: want an absolute path", l.Exe)
	}
	var content string
	if l.GOOS == "darwin" {
		content = l.plist()
	} else {
		content = l.desktopEntry()
	}
	if err := writeAtomic(l.Path(), []byte(content)); err != nil {
		return fmt.Errorf("launch at login: %w", err)
	}
	return nil
}

// Disable removes the login item; it is not an error if there is none.
func (l *LoginItem) Disable() error {
	if err := os.Remove(l.Path()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("launch at login: %w", err)
	}
	return nil
}

func (l *LoginItem) plist() string {
	var b strings.Builder
	b.WriteString(`<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE plist PUBLIC "-//Apple//DTD PLIST 1.0//EN" "http://www.apple.com/DTDs/PropertyList-1.0.dtd">
<plist version="1.0">
<dict>
	<key>Label</key>
	<string>` + LaunchAgentLabel + `</string>
	<key>ProgramArguments</key>
	<array>
`)
	for _, a := range append([]string{l.Exe}, l.Args...) {
		b.WriteString("\t\t<string>" + html.EscapeString(a) + "</string>\n")
	}
	b.WriteString(`	</array>
	<key>RunAtLoad</key>
	<true/>
	<key>ProcessType</key>
	<string>Interactive</string>
	<key>LimitLoadToSessionType</key>
	<string>Aqua</string>
	<key>StandardErrorPath</key>
	<string>` + html.EscapeString(filepath.Join(l.Home, "Library", "Logs", "Orrery.log")) + `</string>
</dict>
</plist>
`)
	return b.String()
}

func (l *LoginItem) desktopEntry() string {
	args := make([]string, 0, 1+len(l.Args))
	for _, a := range append([]string{l.Exe}, l.Args...) {
		args = append(args, execQuote(a))
	}
	return "[Desktop Entry]\nType=Application\nName=Orrery\nComment=Orrery cluster agent and menu-bar item\n" +
		"Exec=" + strings.Join(args, " ") + "\nTerminal=false\nX-GNOME-Autostart-enabled=true\n"
}

// execQuote quotes one argument of a desktop entry's Exec key: in double
// quotes, with `"`, "`", "$" and "\" backslash-escaped, and "%" doubled
// (a field code otherwise). Then the value's own escaping doubles every
// backslash again, as the spec's two-level escaping wants.
func execQuote(a string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "`", "\\`", `$`, `\$`, `%`, `%%`)
	q := `"` + r.Replace(a) + `"`
	return strings.ReplaceAll(q, `\`, `\\`)
}

// writeAtomic writes data to path (creating its directory), so that a
// reader never sees half a file.
func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return atomicfile.Write(path, data, 0o644)
}
