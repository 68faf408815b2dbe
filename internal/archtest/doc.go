// Package archtest holds the tests that guard the code's shape: which
// packages may import what (deps_test.go) and how large a file or a
// function may grow (size_test.go). It has no code of its own.
package archtest
