package trace

import _ "unsafe" // for go:linkname

// nanotime is the runtime's monotonic clock in nanoseconds: time.Since without
// the wrapper, which matters at two reads per span. runtime.nanotime is
// linknamed by many packages and kept stable for them.
//
//go:linkname nanotime runtime.nanotime
func nanotime() int64
