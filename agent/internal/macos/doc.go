// Package macos holds minimal, cgo-free bindings to the Apple frameworks the
// agent reads hardware facts from: CoreFoundation, IOKit (registry, SMC and
// the HID event system), SystemConfiguration and the private libIOReport.
//
// Every framework is opened lazily on first use through purego. A framework
// or symbol that fails to load is reported as an error, never a panic, so the
// agent keeps running with the affected values left empty.
package macos
