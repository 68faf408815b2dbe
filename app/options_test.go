package app

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseArgs(t *testing.T) {
	o, _, ok := ParseArgs([]string{"--api-addr", "127.0.0.1:9", "--data-dir", "/d", "--peer", "h:1", "--peer", "h:2",
		"--loopback-dir", "/l", "--mdns=false", "--log-level", "DEBUG"}, io.Discard)
	if !ok || o.NoAgent || o.Agent.APIAddr != "127.0.0.1:9" || o.Agent.DataDir != "/d" ||
		strings.Join(o.Agent.Peers, ",") != "h:1,h:2" || o.Agent.LoopbackDir != "/l" || o.Agent.MDNS || o.LogLevel.String() != "DEBUG" {
		t.Errorf("options = %+v", o)
	}
	o, _, ok = ParseArgs([]string{"--loopback"}, io.Discard)
	if !ok || !strings.Contains(o.Agent.LoopbackDir, "orrery-loopback-") {
		t.Errorf("--loopback: dir %q", o.Agent.LoopbackDir)
	}
	o, _, ok = ParseArgs([]string{"--no-agent", "--api", "http://127.0.0.1:52416/"}, io.Discard)
	if !ok || !o.NoAgent || o.API != "http://127.0.0.1:52416" {
		t.Errorf("--no-agent: %+v", o)
	}
	for _, bad := range [][]string{
		{"--no-agent"}, {"--api", "http://127.0.0.1:1"}, {"--no-agent", "--api", "127.0.0.1:1"},
		{"--no-agent", "--api", "http://h:1/state"}, {"--log-level", "loud"}, {"stray"}, {"--nope"},
	} {
		var msg strings.Builder
		if _, code, ok := ParseArgs(bad, &msg); ok || code != 2 || msg.Len() == 0 {
			t.Errorf("%q: ok=%v code=%d msg=%q", bad, ok, code, msg.String())
		}
	}
	if _, code, ok := ParseArgs([]string{"-h"}, io.Discard); ok || code != 0 {
		t.Errorf("-h: code %d", code)
	}
}

func TestFindRunnerExe(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "orrery-desktop")
	noPath := func(string) (string, error) { return "", errors.New("not found") }
	if _, err := FindRunnerExe(exe, noPath); !errors.Is(err, ErrNoRunner) {
		t.Errorf("nothing there: %v", err)
	}
	onPath := func(string) (string, error) { return "/usr/local/bin/orrery", nil }
	if got, err := FindRunnerExe(exe, onPath); err != nil || got != "/usr/local/bin/orrery" {
		t.Errorf("on PATH: %q, %v", got, err)
	}
	beside := filepath.Join(dir, "orrery")
	if err := os.WriteFile(beside, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := FindRunnerExe(exe, onPath); err != nil || got != beside {
		t.Errorf("beside: %q, %v", got, err)
	}
}
