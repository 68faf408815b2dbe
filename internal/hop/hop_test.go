package hop

import (
	"context"
	"io"
	"os"
	"testing"
)

// The test binary serves as its own echo child.
func TestMain(m *testing.M) {
	if os.Getenv("HOP_TEST_ECHO") == "1" {
		if err := Serve(os.Stdin, os.Stdout); err != nil {
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A round trip to a child process comes back whole, and half of it is a
// positive duration under a second; a child that never serves fails.
func TestMeasure(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOP_TEST_ECHO", "1")
	d, err := Measure(context.Background(), exe, nil, 8<<10, 50)
	if err != nil || d <= 0 || d.Seconds() > 1 {
		t.Fatalf("hop %v, %v", d, err)
	}
	if _, err := Measure(context.Background(), "/bin/true", nil, 8<<10, 5); err == nil || err == io.EOF {
		t.Fatalf("a child that exits: %v", err)
	}
}
