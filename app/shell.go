package app

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"github.com/orrery-cluster/orrery/agent/tracestore"
)

// RefreshInterval is how often the menu's status lines are read again.
const RefreshInterval = 2 * time.Second

// openTimeout bounds asking the agent to open a trace in the browser, which
// it does by running open/xdg-open (for up to 10 s).
const openTimeout = 15 * time.Second

// Item is one actionable menu item.
type Item int

// The menu's items, in menu order.
const (
	ItemOpen Item = iota
	ItemOpenTrace
	ItemPerfetto
	ItemCopyAPIURL
	ItemLaunchAtLogin // a checkbox
	ItemQuit
	numItems
)

// Items lists every item in menu order.
func Items() []Item {
	out := make([]Item, numItems)
	for i := range out {
		out[i] = Item(i)
	}
	return out
}

var itemLabels = [numItems]string{
	ItemOpen:          "Open Orrery",
	ItemOpenTrace:     "Open Latest Trace",
	ItemPerfetto:      "View Latest Trace in Perfetto",
	ItemCopyAPIURL:    "Copy API URL",
	ItemLaunchAtLogin: "Launch at Login",
	ItemQuit:          "Quit",
}

// String is the item's label.
func (i Item) String() string {
	if i < 0 || i >= numItems {
		return fmt.Sprintf("Item(%d)", int(i))
	}
	return itemLabels[i]
}

// View is everything the menu shows.
type View struct {
	Title, Tooltip string
	// Lines are the disabled status lines at the top.
	Lines [NumLines]string
	// HasTrace enables the two trace items.
	HasTrace bool
	// LaunchAtLogin is the checkbox's state.
	LaunchAtLogin bool
}

// Tray is the menu-bar item (fyne.io/systray now; a hand-written
// NSStatusItem could replace it on macOS). Update may be called from any
// goroutine, before the tray is up too (it then shows v once it is), and
// does not block for long. Clicks are reported through the callback the
// implementation was made with.
type Tray interface {
	Update(v View)
}

// Window is the native window, as the menu's actions need it. Its methods
// may be called from any goroutine; before the window exists they wait a
// bounded time, then give up (and log).
type Window interface {
	Show()
	// Navigate loads path (e.g. "/ui/#/traces/x") in the window.
	Navigate(path string)
	SetClipboard(text string) error
	// OpenURL opens url in the system browser.
	OpenURL(url string)
	Quit()
}

// Shell runs the menu: it refreshes the status lines and carries out the
// clicks. Fields must be set before Run and not changed after.
type Shell struct {
	Client *Client
	// APIURL is what Copy API URL copies.
	APIURL string
	Window Window
	Tray   Tray
	// Login is the Launch at Login item; nil hides nothing but makes the
	// checkbox do nothing.
	Login  *LoginItem
	Logger *slog.Logger
	// Interval between refreshes; 0 means RefreshInterval.
	Interval time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	mu       sync.Mutex // guards the following
	status   Status
	tokCache tokCache
}

type tokCache struct {
	id      string
	tokPerS float64
	ok      bool
}

// Run refreshes the menu every Interval until ctx ends.
func (s *Shell) Run(ctx context.Context) {
	iv := s.Interval
	if iv <= 0 {
		iv = RefreshInterval
	}
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		s.Refresh(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Refresh reads the agent once and updates the tray.
func (s *Shell) Refresh(ctx context.Context) {
	snap := s.Fetch(ctx)
	st := Summarize(snap, s.now())
	s.mu.Lock()
	s.status = st
	s.mu.Unlock()
	s.Tray.Update(s.View())
}

// View is what the menu shows now.
func (s *Shell) View() View {
	s.mu.Lock()
	st := s.status
	s.mu.Unlock()
	return View{Title: st.Title(), Tooltip: st.Tooltip(), Lines: st.Lines(), HasTrace: st.HasTrace,
		LaunchAtLogin: s.Login != nil && s.Login.Enabled()}
}

// Fetch reads /state, /v1/traces and, once per new chat trace, its stats.
func (s *Shell) Fetch(ctx context.Context) Snapshot {
	var snap Snapshot
	snap.State, snap.Err = s.Client.State(ctx)
	if snap.Err != nil {
		return snap
	}
	snap.Traces, snap.TracesErr = s.Client.Traces(ctx)
	if snap.TracesErr != nil {
		s.logger().Debug("trace list", "err", snap.TracesErr)
	}
	if t, ok := latestOfKind(snap.Traces, "chat"); ok {
		s.mu.Lock()
		c := s.tokCache
		s.mu.Unlock()
		if c.id != t.TaskID {
			c = tokCache{id: t.TaskID}
			stats, err := s.Client.TraceStats(ctx, t.TaskID)
			if err == nil {
				c.tokPerS, c.ok = stats.DecodeTokPerS()
			} else {
				s.logger().Debug("trace stats", "trace", t.TaskID, "err", err)
			}
			if ctx.Err() == nil { // a refresh cut short is retried next time
				s.mu.Lock()
				s.tokCache = c
				s.mu.Unlock()
			}
		}
		snap.TokPerS, snap.HasTokPerS = c.tokPerS, c.ok
	}
	return snap
}

func latestOfKind(ts []tracestore.Meta, kind string) (tracestore.Meta, bool) {
	var best tracestore.Meta
	found := false
	for _, t := range ts {
		if t.Kind == kind && (!found || t.CreatedAt.After(best.CreatedAt)) {
			best, found = t, true
		}
	}
	return best, found
}

// Click carries out a click on item.
func (s *Shell) Click(ctx context.Context, item Item) {
	log := s.logger().With("item", item.String())
	s.mu.Lock()
	latest, hasTrace := s.status.Latest.TaskID, s.status.HasTrace
	s.mu.Unlock()
	switch item {
	case ItemOpen:
		s.Window.Show()
	case ItemOpenTrace:
		path := "/ui/"
		if hasTrace {
			path = "/ui/#/traces/" + url.PathEscape(latest)
		}
		s.Window.Navigate(path)
		s.Window.Show()
	case ItemPerfetto:
		if !hasTrace {
			log.Info("no trace yet")
			return
		}
		// The agent waits up to 10 s for the browser opener.
		octx, cancel := context.WithTimeout(ctx, openTimeout)
		page, err := s.Client.OpenTrace(octx, latest)
		cancel()
		if err != nil {
			// The agent could not start a browser: the window can.
			if page = pageURLOf(err); page == "" {
				log.Warn("open trace in Perfetto", "trace", latest, "err", err)
				return
			}
			log.Info("agent could not open a browser; opening from the window", "url", page, "err", err)
			s.Window.OpenURL(page)
		}
	case ItemCopyAPIURL:
		if err := s.Window.SetClipboard(s.APIURL); err != nil {
			log.Warn("copy API URL", "err", err)
		}
	case ItemLaunchAtLogin:
		if s.Login == nil {
			return
		}
		var err error
		if s.Login.Enabled() {
			err = s.Login.Disable()
		} else {
			err = s.Login.Enable()
		}
		if err != nil {
			log.Warn("launch at login", "err", err)
		}
		s.Tray.Update(s.View())
	case ItemQuit:
		s.Window.Quit()
	default:
		log.Warn("unknown menu item")
	}
}

func (s *Shell) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Shell) logger() *slog.Logger {
	if s.Logger != nil {
		return s.Logger
	}
	return slog.New(slog.DiscardHandler)
}
