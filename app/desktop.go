//go:build desktop

package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"

	"fyne.io/systray"
	"github.com/wailsapp/wails/v2"
	wlogger "github.com/wailsapp/wails/v2/pkg/logger"
	"github.com/wailsapp/wails/v2/pkg/options"
	"github.com/wailsapp/wails/v2/pkg/options/assetserver"
	"github.com/wailsapp/wails/v2/pkg/options/linux"
	"github.com/wailsapp/wails/v2/pkg/options/mac"
	wruntime "github.com/wailsapp/wails/v2/pkg/runtime"

	"github.com/orrery-cluster/orrery/agent"
)

// Icons are the images the app shows; main embeds them from build/.
type Icons struct {
	// App is the window's icon (1024×1024 PNG).
	App []byte
	// TrayTemplate is the macOS menu-bar template image (black on
	// transparent, 22 pt); Tray the coloured one other desktops show.
	TrayTemplate, Tray []byte
}

// agentStopTimeout bounds the wait for the in-process agent to stop after
// the window has quit (runners are stopped first, then the API).
const agentStopTimeout = 15 * time.Second

// Main runs the desktop app until Quit, SIGINT or SIGTERM, and returns the
// process's exit code. It must run on the main goroutine, which main's
// init has locked to the main OS thread (Cocoa and GTK want that).
func Main(args []string, icons Icons, version string) int {
	o, code, ok := ParseArgs(args, os.Stderr)
	if !ok {
		return code
	}
	log, closeLog, err := newLogger(o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "orrery-desktop: %v\n", err)
		return 1
	}
	defer closeLog()

	sigCtx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	exe, err := os.Executable()
	if err == nil {
		exe, _ = filepath.EvalSymlinks(exe)
	}

	// One app per data dir: a second launch shows this one's window.
	win := newWailsWindow(log.With("component", "window"))
	inst, err := AcquireInstance(o.Agent.DataDir, win.Show)
	switch {
	case errors.Is(err, ErrRunning):
		log.Info("Orrery is already running: asked it to show its window", "dataDir", o.Agent.DataDir, "detail", err)
		return 0
	case err != nil:
		log.Warn("no single-instance lock; running anyway", "err", err)
	default:
		defer inst.Close()
	}

	api := o.API
	if !o.NoAgent {
		var stopAgent func()
		api, stopAgent, err = startAgent(sigCtx, o, exe, version, log)
		if err != nil {
			log.Error("cannot start agent", "err", err)
			return 1
		}
		defer stopAgent()
	}
	log.Info("desktop app", "api", api, "inProcessAgent", !o.NoAgent)

	proxy, err := NewProxy(api, log.With("component", "proxy"))
	if err != nil {
		log.Error("window proxy", "err", err)
		return 1
	}
	home, _ := os.UserHomeDir()
	shell := &Shell{
		Client: &Client{BaseURL: api},
		APIURL: api,
		Window: win,
		Login: &LoginItem{Home: home, Exe: exe, GOOS: runtime.GOOS,
			ConfigHome: os.Getenv("XDG_CONFIG_HOME")},
		Logger: log.With("component", "menu"),
	}
	shellCtx, cancelShell := context.WithCancel(context.Background())
	defer cancelShell()
	tray := newSystrayTray(icons, func(it Item) { shell.Click(shellCtx, it) }, log.With("component", "tray"))
	shell.Tray = tray

	// fyne.io/systray's recipe beside another toolkit's loop: register,
	// start before wails.Run, end from Wails' OnShutdown.
	start, end := systray.RunWithExternalLoop(tray.onReady, tray.onExit)
	start()

	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		shell.Run(shellCtx)
	}()
	go func() {
		defer wg.Done()
		select {
		case <-sigCtx.Done():
			log.Info("signal: quitting")
			win.Quit()
		case <-shellCtx.Done():
		}
	}()

	err = runWails(appOptions(proxy, win, icons, version, func(context.Context) { endTray(end, log) }, log))
	cancelShell()
	wg.Wait()
	if err != nil {
		log.Error("window", "err", err)
		return 1
	}
	return 0
}

// appOptions are the window's Wails options: hidden at start and on
// close (the tray shows it), its assets from the proxy to the agent.
func appOptions(proxy http.Handler, win *wailsWindow, icons Icons, version string, onShutdown func(context.Context), log *slog.Logger) *options.App {
	return &options.App{
		Title:             "Orrery",
		Width:             1280,
		Height:            820,
		MinWidth:          720,
		MinHeight:         480,
		StartHidden:       true,
		HideWindowOnClose: true,
		AssetServer:       &assetserver.Options{Handler: proxy},
		BackgroundColour:  &options.RGBA{R: 18, G: 24, B: 38, A: 255},
		Logger:            wailsLogger{log.With("component", "wails")},
		LogLevel:          wlogger.INFO,
		// Wails logs every asset request at INFO and below.
		LogLevelProduction: wlogger.WARNING,
		OnStartup:          win.startup,
		OnDomReady:         win.domLoaded,
		OnShutdown:         onShutdown,
		Mac: &mac.Options{
			About: &mac.AboutInfo{Title: "Orrery", Message: "Run LLMs across your Macs. " + version, Icon: icons.App},
		},
		Linux: &linux.Options{Icon: icons.App, ProgramName: "orrery"},
	}
}

// runWails runs Wails, turning its panic when no display can be opened
// ("failed to init GTK") into an error.
func runWails(o *options.App) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("wails: %v (is a display available?)", r)
		}
	}()
	return wails.Run(o)
}

// endTray ends the tray. fyne.io/systray's end dereferences its DBus
// connection, which is nil where no session bus was found (it logged
// that already); the app must still quit cleanly then.
func endTray(end func(), log *slog.Logger) {
	defer func() {
		if r := recover(); r != nil {
			log.Warn("tray end", "err", r)
		}
	}()
	end()
}

// startAgent starts the in-process agent and returns its API URL and a
// function that stops it. If the API address is taken by an agent that
// answers, it attaches to that one instead.
func startAgent(ctx context.Context, o Options, exe, version string, log *slog.Logger) (api string, stop func(), err error) {
	cfg := o.Agent
	cfg.Version = version
	cfg.Logger = log.With("component", "agent")
	cfg.RunnerExe = o.RunnerExe
	if cfg.RunnerExe == "" {
		if cfg.RunnerExe, err = FindRunnerExe(exe, nil); err != nil {
			// The agent still runs; only placing a model on this node fails.
			log.Warn("model runners cannot start here", "err", err)
			cfg.RunnerExe = filepath.Join(filepath.Dir(exe), "orrery")
		}
	}
	a, err := agent.New(cfg)
	if err != nil {
		if running := "http://" + cfg.APIAddr; answers(ctx, running) {
			log.Info("an agent already serves this address: attaching to it", "api", running)
			return running, func() {}, nil
		}
		return "", nil, err
	}
	if _, made, path := a.APIToken(); made {
		// The log is a file others may read: it names where the token is
		// kept (0600), not the token.
		log.Warn("the API answers other machines only with the token kept in this file", "api", a.Addr().String(), "kept", path)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(runCtx) }()
	stop = func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				log.Error("agent stopped with an error", "err", err)
			}
		case <-time.After(agentStopTimeout):
			log.Error("agent did not stop in time", "timeout", agentStopTimeout)
		}
	}
	return "http://" + a.Addr().String(), stop, nil
}

// answers reports whether an agent answers GET /healthz at api.
func answers(ctx context.Context, api string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, api+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func newLogger(o Options) (*slog.Logger, func(), error) {
	var w io.Writer = os.Stderr
	closeFn := func() {}
	if o.LogFile != "" {
		f, err := os.OpenFile(o.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, fmt.Errorf("log file: %w", err)
		}
		// One made 0644 by an older version is closed to others too (it
		// may hold an API token that version logged).
		if err := f.Chmod(0o600); err != nil {
			f.Close()
			return nil, nil, fmt.Errorf("log file: %w", err)
		}
		w, closeFn = f, func() { f.Close() }
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: o.LogLevel})), closeFn, nil
}

// wailsWindow is the Window over Wails' runtime. Wails' runtime calls need
// the context Wails passes to OnStartup, so it is kept here (the one
// exception to not keeping a context in a struct).
type wailsWindow struct {
	log      *slog.Logger
	ready    chan struct{} // closed once ctx is set
	once     sync.Once
	ctx      context.Context // Wails' own; written once before ready closes
	domReady chan struct{}   // closed when a page first loaded
	domOnce  sync.Once
}

var _ Window = (*wailsWindow)(nil)

// windowWait bounds how long a menu action waits for the window to exist.
const windowWait = 10 * time.Second

func newWailsWindow(log *slog.Logger) *wailsWindow {
	return &wailsWindow{log: log, ready: make(chan struct{}), domReady: make(chan struct{})}
}

// domLoaded is Wails' OnDomReady. It comes through the GTK main loop, so
// after it runtime.Quit works: on Linux Wails' Quit is a bare
// gtk_main_quit, lost when it comes before gtk_main has started.
func (w *wailsWindow) domLoaded(context.Context) {
	w.domOnce.Do(func() { close(w.domReady) })
}

func (w *wailsWindow) startup(ctx context.Context) {
	w.once.Do(func() {
		w.ctx = ctx
		close(w.ready)
	})
}

func (w *wailsWindow) wailsCtx() (context.Context, bool) {
	select {
	case <-w.ready:
		return w.ctx, true
	case <-time.After(windowWait):
		w.log.Warn("window not up yet: menu action dropped", "waited", windowWait)
		return nil, false
	}
}

func (w *wailsWindow) Show() {
	if ctx, ok := w.wailsCtx(); ok {
		// Not before the first page loaded: the window starts hidden, and
		// a show that comes before Wails has run the GTK main loop (a
		// second launch right after the first) was lost to that hide.
		w.pageLoaded("show")
		wruntime.WindowShow(ctx)
		wruntime.WindowUnminimise(ctx)
		wruntime.Show(ctx) // macOS: bring the (LSUIElement) app forward
	}
}

func (w *wailsWindow) Navigate(path string) {
	if ctx, ok := w.wailsCtx(); ok {
		wruntime.WindowExecJS(ctx, "location.href = "+jsString(path)+";")
	}
}

func (w *wailsWindow) SetClipboard(text string) error {
	ctx, ok := w.wailsCtx()
	if !ok {
		return errors.New("window not up yet")
	}
	if err := wruntime.ClipboardSetText(ctx, text); err != nil {
		return fmt.Errorf("clipboard: %w", err)
	}
	return nil
}

func (w *wailsWindow) OpenURL(url string) {
	if ctx, ok := w.wailsCtx(); ok {
		wruntime.BrowserOpenURL(ctx, url)
	}
}

func (w *wailsWindow) Quit() {
	ctx, ok := w.wailsCtx()
	if !ok {
		return
	}
	w.pageLoaded("quit")
	wruntime.Quit(ctx)
}

// pageLoaded waits, at most windowWait, for the first page to load (an
// error page loads without Wails' runtime: then what acts goes on anyway).
func (w *wailsWindow) pageLoaded(what string) {
	select {
	case <-w.domReady:
	case <-time.After(windowWait):
		w.log.Warn("no page loaded yet: going on", "action", what, "waited", windowWait)
	}
}

// wailsLogger sends Wails' log lines to slog.
type wailsLogger struct{ log *slog.Logger }

func (l wailsLogger) Print(m string)   { l.log.Info(m) }
func (l wailsLogger) Trace(m string)   { l.log.Debug(m) }
func (l wailsLogger) Debug(m string)   { l.log.Debug(m) }
func (l wailsLogger) Info(m string)    { l.log.Info(m) }
func (l wailsLogger) Warning(m string) { l.log.Warn(m) }
func (l wailsLogger) Error(m string)   { l.log.Error(m) }
func (l wailsLogger) Fatal(m string)   { l.log.Error(m); os.Exit(1) }

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s) // a string always marshals
	return string(b)
}
