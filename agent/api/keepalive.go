package api

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// DefaultKeepAlive is how long an instance placed on demand stays loaded
// after its last request, when neither the request nor the agent says
// (Ollama's default).
const DefaultKeepAlive = 5 * time.Minute

// KeepAlive is Ollama's keep_alive: how long an instance stays loaded
// after a request ends. JSON takes a duration string ("5m", "1h30m"), a
// number of seconds, or either as a string ("300", "0", "-1"); 0 unloads
// right after the request, and any negative value pins the instance until
// it is deleted.
type KeepAlive struct {
	D time.Duration
}

// Pinned reports a negative keep-alive: never unloaded while idle.
func (k KeepAlive) Pinned() bool { return k.D < 0 }

// Ms is the keep-alive in milliseconds as the state holds it: -1 when
// pinned.
func (k KeepAlive) Ms() int64 {
	if k.Pinned() {
		return -1
	}
	return k.D.Milliseconds()
}

// String is the flag's and JSON's form: "-1" when pinned.
func (k KeepAlive) String() string {
	if k.Pinned() {
		return "-1"
	}
	return k.D.String()
}

// Set parses a flag value (flag.Value).
func (k *KeepAlive) Set(s string) error {
	v, err := ParseKeepAlive(s)
	if err != nil {
		return err
	}
	*k = v
	return nil
}

// ParseKeepAlive reads a keep-alive as the flag and the JSON string form
// take it.
func ParseKeepAlive(s string) (KeepAlive, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		return keepAliveSeconds(f)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return KeepAlive{}, fmt.Errorf("keep_alive %q: want a duration such as 5m or 1h, a number of seconds, 0 (unload after the request) or -1 (keep loaded)", s)
	}
	if d < 0 {
		d = -1
	}
	return KeepAlive{D: d}, nil
}

func keepAliveSeconds(f float64) (KeepAlive, error) {
	switch {
	case math.IsNaN(f) || math.IsInf(f, 0):
		return KeepAlive{}, fmt.Errorf("keep_alive %v: want a number of seconds", f)
	case f < 0:
		return KeepAlive{D: -1}, nil
	case f > float64(math.MaxInt64/int64(time.Second)):
		return KeepAlive{}, fmt.Errorf("keep_alive %v seconds is too long (use -1 to keep it loaded)", f)
	}
	return KeepAlive{D: time.Duration(f * float64(time.Second))}, nil
}

func (k *KeepAlive) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		return k.Set(s)
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return fmt.Errorf("keep_alive %s: want a duration string or a number of seconds", b)
	}
	v, err := keepAliveSeconds(f)
	if err != nil {
		return err
	}
	*k = v
	return nil
}

func (k KeepAlive) MarshalJSON() ([]byte, error) { return json.Marshal(k.String()) }
