package app

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoginItem(t *testing.T) {
	for _, tc := range []struct {
		goos, path string
		want       []string
	}{
		{"darwin", "Library/LaunchAgents/dev.orrery.agent.plist", []string{
			"<string>dev.orrery.agent</string>",
			"<string>/Applications/Orrery.app/Contents/MacOS/orrery-desktop</string>",
			"<string>--log-level</string>", "<string>debug &amp; more</string>",
			"<key>RunAtLoad</key>\n\t<true/>",
		}},
		{"linux", ".config/autostart/orrery.desktop", []string{
			"[Desktop Entry]\nType=Application\n",
			`Exec="/Applications/Orrery.app/Contents/MacOS/orrery-desktop" "--log-level" "debug & more"` + "\n",
		}},
	} {
		t.Run(tc.goos, func(t *testing.T) {
			home := t.TempDir()
			l := &LoginItem{Home: home, GOOS: tc.goos,
				Exe: "/Applications/Orrery.app/Contents/MacOS/orrery-desktop", Args: []string{"--log-level", "debug & more"}}
			if l.Path() != filepath.Join(home, tc.path) {
				t.Fatalf("path = %s", l.Path())
			}
			if l.Enabled() {
				t.Fatal("enabled before Enable")
			}
			if err := l.Disable(); err != nil {
				t.Fatalf("Disable with nothing there: %v", err)
			}
			if err := l.Enable(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(l.Path())
			if err != nil || !l.Enabled() {
				t.Fatalf("after Enable: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(b), w) {
					t.Errorf("file lacks %q:\n%s", w, b)
				}
			}
			if ents, _ := os.ReadDir(filepath.Dir(l.Path())); len(ents) != 1 {
				t.Errorf("temp files left: %v", ents)
			}
			if err := l.Disable(); err != nil || l.Enabled() {
				t.Fatalf("Disable: %v", err)
			}
		})
	}
}

func TestLoginItemXDGConfigHomeAndRelativeExe(t *testing.T) {
	cfg := t.TempDir()
	l := &LoginItem{Home: "/nonexistent", ConfigHome: cfg, GOOS: "linux", Exe: "orrery-desktop"}
	if l.Path() != filepath.Join(cfg, "autostart", "orrery.desktop") {
		t.Errorf("path = %s", l.Path())
	}
	if err := l.Enable(); err == nil {
		t.Error("a relative program was taken")
	}
}

func TestExecQuote(t *testing.T) {
	for in, want := range map[string]string{
		"/usr/bin/orrery":  `"/usr/bin/orrery"`,
		`/my dir/"x"`:      `"/my dir/\\"x\\""`,
		"/a/$HOME/`b`/50%": "\"/a/\\\\$HOME/\\\\`b\\\\`/50%%\"",
		`C:\path`:          `"C:\\\\path"`,
	} {
		if got := execQuote(in); got != want {
			t.Errorf("execQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
