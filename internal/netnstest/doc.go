// Package netnstest helps tests that need real networking between
// processes: Linux network namespaces (ip netns), veth pairs between them,
// sockets and HTTP clients opened inside a namespace from the test process.
// The TCP proxy that delays every chunk it forwards is internal/delayproxy
// (tp-bench uses it too).
//
// The namespace helpers are Linux-only and need root; the tests that use
// them are behind the netns build tag (go test -tags netns …), so that a
// plain go test never runs them. DelayProxy is plain Go and portable.
//
// A socket belongs to the network namespace of the thread that created it,
// for its whole life. Listen and Dial therefore create their socket on a
// goroutine locked to an OS thread that has joined the namespace; that
// thread is never unlocked, so the Go runtime discards it when the
// goroutine ends and no other goroutine ever runs in the namespace by
// accident. The socket they return can then be used from any goroutine.
package netnstest
