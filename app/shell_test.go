package app

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orrery-cluster/orrery/internal/testutil"
)

type fakeTray struct {
	mu    sync.Mutex
	views []View
}

func (f *fakeTray) Update(v View) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.views = append(f.views, v)
}

func (f *fakeTray) last() View {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.views[len(f.views)-1]
}

type fakeWindow struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeWindow) record(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}
func (f *fakeWindow) Show()                       { f.record("show") }
func (f *fakeWindow) Navigate(p string)           { f.record("navigate " + p) }
func (f *fakeWindow) SetClipboard(s string) error { f.record("clipboard " + s); return nil }
func (f *fakeWindow) OpenURL(u string)            { f.record("open " + u) }
func (f *fakeWindow) Quit()                       { f.record("quit") }
func (f *fakeWindow) took() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.calls, "; ")
}
func (f *fakeWindow) reset() { f.mu.Lock(); defer f.mu.Unlock(); f.calls = nil }

var _ Window = (*fakeWindow)(nil)

func newTestShell(t *testing.T, f *fakeAgent) (*Shell, *fakeTray, *fakeWindow) {
	tray, win := &fakeTray{}, &fakeWindow{}
	s := &Shell{
		Client: &Client{BaseURL: f.URL}, APIURL: f.URL, Window: win, Tray: tray,
		Login: &LoginItem{Home: t.TempDir(), Exe: "/opt/orrery/orrery-desktop", GOOS: "linux"},
		Now:   func() time.Time { return time.Date(2026, 12, 3, 11, 40, 0, 0, time.UTC) },
	}
	return s, tray, win
}

func TestShellRefreshShowsStatus(t *testing.T) {
	f := newFakeAgent(t)
	s, tray, _ := newTestShell(t, f)
	ctx := context.Background()
	s.Refresh(ctx)
	v := tray.last()
	if v.Title != "3 nodes · 247 tok/s" || v.Lines[0] != "Nodes: 3" || !v.HasTrace || v.LaunchAtLogin {
		t.Errorf("view = %+v", v)
	}
	if !strings.HasPrefix(v.Lines[3], "Latest trace: chat-1796297970082-72a30086 · 29s ago") {
		t.Errorf("trace line = %q", v.Lines[3])
	}
	s.Refresh(ctx)
	if n := f.statsCalls.Load(); n != 1 {
		t.Errorf("stats of one trace read %d times; want once", n)
	}
}

func TestShellOfflineThenOnline(t *testing.T) {
	f := newFakeAgent(t)
	s, tray, _ := newTestShell(t, f)
	s.Client = &Client{BaseURL: "http://127.0.0.1:1"} // nothing listens on port 1
	s.Refresh(context.Background())
	if v := tray.last(); v.Title != "Orrery · offline" || v.HasTrace {
		t.Errorf("offline view = %+v", v)
	}
}

func TestShellClicks(t *testing.T) {
	f := newFakeAgent(t)
	s, tray, win := newTestShell(t, f)
	ctx := context.Background()

	// Before any refresh there is no trace: the trace items only show the UI.
	s.Click(ctx, ItemOpenTrace)
	if got := win.took(); got != "navigate /ui/; show" {
		t.Errorf("open trace without one: %q", got)
	}
	s.Refresh(ctx)
	for item, want := range map[Item]string{
		ItemOpen:       "show",
		ItemOpenTrace:  "navigate /ui/#/traces/chat-1796297970082-72a30086; show",
		ItemCopyAPIURL: "clipboard " + f.URL,
		ItemQuit:       "quit",
		ItemPerfetto:   "", // the agent opened the browser itself
	} {
		win.reset()
		s.Click(ctx, item)
		if got := win.took(); got != want {
			t.Errorf("%v: window got %q, want %q", item, got, want)
		}
	}
	if got := f.opened.Load(); got != "chat-1796297970082-72a30086 {}" {
		t.Errorf("agent's open got %v", got)
	}

	// An agent that cannot start a browser hands the page to the window.
	f.openStatus = http.StatusBadGateway
	win.reset()
	s.Click(ctx, ItemPerfetto)
	if got, want := win.took(), "open "+f.URL+"/perfetto/chat-1796297970082-72a30086"; got != want {
		t.Errorf("perfetto fallback: %q, want %q", got, want)
	}

	s.Click(ctx, ItemLaunchAtLogin)
	if !s.Login.Enabled() || !tray.last().LaunchAtLogin {
		t.Error("launch at login not turned on")
	}
	s.Click(ctx, ItemLaunchAtLogin)
	if s.Login.Enabled() || tray.last().LaunchAtLogin {
		t.Error("launch at login not turned off")
	}
}

func TestItemLabels(t *testing.T) {
	var labels []string
	for _, it := range Items() {
		labels = append(labels, it.String())
	}
	want := "Open Orrery|Open Latest Trace|View Latest Trace in Perfetto|Copy API URL|Launch at Login|Quit"
	if got := strings.Join(labels, "|"); got != want {
		t.Errorf("items = %q", got)
	}
}

func TestShellRunStops(t *testing.T) {
	f := newFakeAgent(t)
	s, tray, _ := newTestShell(t, f)
	s.Interval = 10 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { s.Run(ctx); close(done) }()
	testutil.WaitFor(t, "three refreshes", func() bool {
		tray.mu.Lock()
		defer tray.mu.Unlock()
		return len(tray.views) >= 3
	})
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not stop")
	}
}
