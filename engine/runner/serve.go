package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/orrery-cluster/orrery/engine/runnerapi"
)

// Serve runs a runner process's server: it listens on 127.0.0.1 (port 0),
// prints the ListenPrefix line to out, loads the model while already
// answering /health, and serves until ctx ends or parentGone (the agent's
// pipe on stdin) closes. A failed load is reported through /health, not by
// exiting, so that the agent reads the error.
func Serve(ctx context.Context, cfg Config, out io.Writer, parentGone io.Reader) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("runner listen: %w", err)
	}
	s := NewServer(cfg)
	defer s.Close()
	srv := &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if parentGone != nil {
		go func() {
			io.Copy(io.Discard, parentGone)
			cfg.Logger.Info("agent gone (stdin closed): runner exits")
			cancel()
		}()
	}
	if _, err := fmt.Fprintf(out, "%s%s\n", runnerapi.ListenPrefix, ln.Addr()); err != nil {
		return fmt.Errorf("runner: announce address: %w", err)
	}
	go func() {
		if err := s.Load(ctx); err != nil {
			cfg.Logger.Error("load failed", "model", cfg.ModelPath, "err", err)
		}
	}()
	fatal := make(chan error, 1)
	go func() {
		select {
		case err := <-s.Fatal():
			cfg.Logger.Error("runner stops", "err", err)
			// Let an answer in flight reach the agent first.
			time.Sleep(50 * time.Millisecond)
			fatal <- err
			srv.Close()
		case <-ctx.Done():
		}
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("runner serve: %w", err)
	}
	select {
	case err := <-fatal:
		return err
	default:
		return nil
	}
}
