//go:build desktop

package app

import (
	"log/slog"
	"sync"
	"time"

	"fyne.io/systray"
)

// systrayTray is the Tray over fyne.io/systray: on Linux a
// StatusNotifierItem with a com.canonical.dbusmenu menu (pure Go, over
// DBus); on macOS an NSStatusItem.
type systrayTray struct {
	icons   Icons
	onClick func(Item)
	log     *slog.Logger
	done    chan struct{} // closed by onExit; ends the click loops
	wg      sync.WaitGroup

	mu    sync.Mutex // guards the following
	built bool
	view  View // the latest view, shown once built
	shown View // what the menu shows now
	lines [NumLines]*systray.MenuItem
	items [numItems]*systray.MenuItem
}

var _ Tray = (*systrayTray)(nil)

func newSystrayTray(icons Icons, onClick func(Item), log *slog.Logger) *systrayTray {
	return &systrayTray{icons: icons, onClick: onClick, log: log, done: make(chan struct{}),
		view: View{Title: "Orrery", Tooltip: "Orrery: starting"}}
}

// onReady builds the menu; systray calls it once, on its own goroutine.
func (t *systrayTray) onReady() {
	systray.SetTemplateIcon(t.icons.TrayTemplate, t.icons.Tray)
	t.mu.Lock()
	defer t.mu.Unlock()
	v := t.view
	for i := range t.lines {
		t.lines[i] = systray.AddMenuItem(v.Lines[i], "")
		t.lines[i].Disable()
	}
	for _, it := range Items() {
		switch it {
		case ItemOpen, ItemCopyAPIURL, ItemQuit:
			systray.AddSeparator()
		}
		var mi *systray.MenuItem
		if it == ItemLaunchAtLogin {
			mi = systray.AddMenuItemCheckbox(it.String(), "Start Orrery when you log in", v.LaunchAtLogin)
		} else {
			mi = systray.AddMenuItem(it.String(), "")
		}
		t.items[it] = mi
		t.wg.Add(1)
		go t.clicks(it, mi)
	}
	t.built = true
	t.shown = View{Lines: v.Lines, LaunchAtLogin: v.LaunchAtLogin, HasTrace: true}
	t.applyLocked(v)
}

func (t *systrayTray) clicks(it Item, mi *systray.MenuItem) {
	defer t.wg.Done()
	for {
		select {
		case <-mi.ClickedCh:
			t.log.Debug("menu click", "item", it.String())
			t.onClick(it)
		case <-t.done:
			return
		}
	}
}

// exitWait bounds onExit's wait for the click loops: it runs on the main
// thread (from Wails' OnShutdown), which a click being handled may be
// waiting on.
const exitWait = 2 * time.Second

// onExit ends the click loops; systray calls it from end().
func (t *systrayTray) onExit() {
	close(t.done)
	ended := make(chan struct{})
	go func() {
		t.wg.Wait()
		close(ended)
	}()
	select {
	case <-ended:
	case <-time.After(exitWait):
		t.log.Warn("a menu action is still running at exit", "waited", exitWait)
	}
}

// Update shows v; before onReady it is kept for then.
func (t *systrayTray) Update(v View) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.view = v
	if t.built {
		t.applyLocked(v)
	}
}

// applyLocked changes what differs from what is shown: every change is a
// DBus signal (Linux) or a main-thread dispatch (macOS).
func (t *systrayTray) applyLocked(v View) {
	old := t.shown
	if v.Title != old.Title {
		systray.SetTitle(v.Title)
	}
	if v.Tooltip != old.Tooltip {
		systray.SetTooltip(v.Tooltip)
	}
	for i, l := range v.Lines {
		if l != old.Lines[i] {
			t.lines[i].SetTitle(l)
		}
	}
	if v.HasTrace != old.HasTrace {
		for _, it := range []Item{ItemOpenTrace, ItemPerfetto} {
			if v.HasTrace {
				t.items[it].Enable()
			} else {
				t.items[it].Disable()
			}
		}
	}
	if v.LaunchAtLogin != old.LaunchAtLogin {
		if v.LaunchAtLogin {
			t.items[ItemLaunchAtLogin].Check()
		} else {
			t.items[ItemLaunchAtLogin].Uncheck()
		}
	}
	t.shown = v
}
