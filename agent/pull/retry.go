package pull

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/orrery-cluster/orrery/internal/transfer"
)

// Retry describes a failed attempt of a transfer that is tried again.
type Retry struct {
	// Host answered (or failed to), after redirects.
	Host string
	// Stalled: the connection was given up because it stalled.
	Stalled bool
	Err     error
}

// retryable is an error worth another attempt, after wait (0: backoff);
// host is the one that failed, when known.
type retryable struct {
	err  error
	wait time.Duration
	host string
}

func (r *retryable) Error() string { return r.err.Error() }
func (r *retryable) Unwrap() error { return r.err }

// retry runs do until it succeeds, fails for good, or MaxAttempts ran,
// waiting between attempts (exponential backoff from 500 ms, or the
// server's Retry-After).
func (f *Fetcher) retry(ctx context.Context, st *Stats, do func() error) error {
	backoff := 500 * time.Millisecond
	var err error
	for attempt := 1; attempt <= f.MaxAttempts; attempt++ {
		atomic.AddInt64(&st.Attempts, 1)
		if err = do(); err == nil {
			return nil
		}
		var r *retryable
		if !errors.As(err, &r) || ctx.Err() != nil {
			return err
		}
		stalled := errors.Is(err, transfer.ErrStalled)
		atomic.AddInt64(&st.Retries, 1)
		if stalled {
			atomic.AddInt64(&st.Stalls, 1)
		}
		if f.OnRetry != nil {
			f.OnRetry(Retry{Host: r.host, Stalled: stalled, Err: err})
		}
		wait := backoff
		if r.wait > 0 {
			wait = r.wait
		}
		if err := f.Sleep(ctx, min(wait, maxBackoff)); err != nil {
			return err
		}
		backoff = min(2*backoff, maxBackoff)
	}
	return fmt.Errorf("after %d attempts: %w", f.MaxAttempts, err)
}

// retryAfter reads Retry-After: seconds or an HTTP date (0: absent), at
// most maxBackoff (a hub's huge number of seconds must not wrap).
func retryAfter(v string) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil && s >= 0 {
		return time.Duration(min(s, int(maxBackoff/time.Second))) * time.Second
	}
	if at, err := http.ParseTime(v); err == nil {
		return min(max(time.Until(at), 0), maxBackoff)
	}
	return 0
}
