//go:build unix

package app

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The desktop app runs once per data dir: a second launch (a double click
// on Orrery.app, a login item beside a manual start) shows the first one's
// window and exits, rather than adding a second tray icon and agent. The
// first holds an flock on desktop.lock for its life (the kernel drops it
// when the process dies, so nothing goes stale) and listens on
// desktop.sock; a later one that cannot take the lock says "show" there.

// ErrRunning is returned by AcquireInstance when another instance runs.
var ErrRunning = errors.New("another Orrery desktop app runs for this data dir")

// instanceWait bounds how long a second launch tries to reach the first
// (which may be starting: locked, not yet listening).
const instanceWait = 3 * time.Second

// Instance is the lock of the running desktop app.
type Instance struct {
	lock *os.File
	ln   net.Listener
	wg   sync.WaitGroup
}

// AcquireInstance takes the app's lock in dir and calls show whenever a
// later launch asks. It returns ErrRunning, after asking the running
// instance to show its window, when that instance holds the lock.
func AcquireInstance(dir string, show func()) (*Instance, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("instance lock: %w", err)
	}
	lockPath, sock := filepath.Join(dir, "desktop.lock"), filepath.Join(dir, "desktop.sock")
	f, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("instance lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("instance lock %s: %w", lockPath, err)
		}
		if err := askShow(sock); err != nil {
			return nil, fmt.Errorf("%w, but it did not answer: %v", ErrRunning, err)
		}
		return nil, ErrRunning
	}
	os.Remove(sock) // left by an instance that died: the lock is ours now
	ln, err := net.Listen("unix", sock)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("instance socket: %w", err)
	}
	in := &Instance{lock: f, ln: ln}
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		in.serve(show)
	}()
	return in, nil
}

// serve answers later launches until Close.
func (in *Instance) serve(show func()) {
	for {
		c, err := in.ln.Accept()
		if err != nil {
			return
		}
		c.SetDeadline(time.Now().Add(2 * time.Second))
		line, _ := bufio.NewReader(&limitedReader{c, 64}).ReadString('\n')
		if strings.TrimSpace(line) == "show" {
			show()
			fmt.Fprintln(c, "ok")
		}
		c.Close()
	}
}

// askShow asks the running instance, over its socket, to show its window;
// it retries while that instance is still starting.
func askShow(sock string) error {
	deadline := time.Now().Add(instanceWait)
	for {
		c, err := net.DialTimeout("unix", sock, time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(2 * time.Second))
			fmt.Fprintln(c, "show")
			ans, rerr := bufio.NewReader(&limitedReader{c, 64}).ReadString('\n')
			c.Close()
			if strings.TrimSpace(ans) == "ok" {
				return nil
			}
			err = fmt.Errorf("answer %q: %v", ans, rerr)
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Close stops answering and releases the lock.
func (in *Instance) Close() {
	in.ln.Close() // removes the socket file
	in.wg.Wait()
	in.lock.Close()
}

// limitedReader reads at most n bytes: a peer cannot make serve buffer
// more than a line.
type limitedReader struct {
	c net.Conn
	n int
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errors.New("line too long")
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.c.Read(p)
	l.n -= n
	return n, err
}
