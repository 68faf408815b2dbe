package trace

// The fast path: a span event exactly as WriteChrome writes it, read in
// place without the general reader's key dispatch:
//
//	{"name":"…","cat":"…","ph":"X","ts":T,"dur":D,"pid":P,"tid":T,"args":{"rank":R[,"lane":"…"][,"bytes":N][,"peer":N][,"token":N][,"flowOut":N][,"flowIn":N]}}
//
// with ASCII strings free of escapes and plain decimal numbers. Anything
// else, even a space, is left to the general reader, which reads every
// event this one does to the same result (a fuzz target holds them to it).

// fastEvent reads the event at the decoder's position if it has that form
// and returns true; otherwise it consumes nothing and returns false.
func (l *loader) fastEvent() bool {
	d := l.d
	if d.depth+2 > d.maxDepth {
		return false
	}
	// The whole event must be in the buffer: one cut by a refill is left to
	// the general reader.
	f := fastScan{b: d.buf[d.i:d.n], maxString: d.maxString}
	var ev event
	var name, cat, lane []byte
	var ok bool
	if !f.lit(`{"name":"`) {
		return false
	}
	if name, ok = f.str(); !ok || !f.lit(`,"cat":"`) {
		return false
	}
	if cat, ok = f.str(); !ok || !f.lit(`,"ph":"X","ts":`) {
		return false
	}
	if ev.ts, ok = f.micros(); !ok || !f.lit(`,"dur":`) {
		return false
	}
	if ev.dur, ok = f.micros(); !ok || !f.lit(`,"pid":`) {
		return false
	}
	if ev.pid, ok = f.integer(); !ok || !f.lit(`,"tid":`) {
		return false
	}
	if ev.tid, ok = f.integer(); !ok || !f.lit(`,"args":{"rank":`) {
		return false
	}
	a := &ev.args
	if a.rank, ok = f.integer(); !ok {
		return false
	}
	a.hasRank = true
	if f.lit(`,"lane":"`) {
		if lane, ok = f.str(); !ok {
			return false
		}
	}
	var n int64
	if f.lit(`,"bytes":`) {
		if n, ok = f.integer(); !ok {
			return false
		}
		a.a = a.a.WithBytes(n)
	}
	if f.lit(`,"peer":`) {
		if n, ok = f.integer(); !ok {
			return false
		}
		a.a.Peer, a.a.Has = clamp32(n), a.a.Has|ArgPeer
	}
	if f.lit(`,"token":`) {
		if n, ok = f.integer(); !ok {
			return false
		}
		a.a.Token, a.a.Has = clamp32(n), a.a.Has|ArgToken
	}
	if f.lit(`,"flowOut":`) {
		if n, ok = f.integer(); !ok {
			return false
		}
		a.a = a.a.WithFlowOut(uint64(max(n, 0)))
	}
	if f.lit(`,"flowIn":`) {
		if n, ok = f.integer(); !ok {
			return false
		}
		a.a = a.a.WithFlowIn(uint64(max(n, 0)))
	}
	if !f.lit(`}}`) {
		return false
	}
	d.i += f.p
	l.fast++
	ev.name, ev.cat, ev.ph = l.internIdx(name), l.internIdx(cat), "X"
	if lane != nil {
		a.lane = l.internIdx(lane)
	}
	series := l.ev.args.series[:0]
	l.ev = ev
	l.ev.args.series = series
	l.dispatch()
	return true
}

// fastScan matches the fast path's grammar over b from p.
type fastScan struct {
	b         []byte
	p         int
	maxString int
}

func (f *fastScan) lit(s string) bool {
	if len(f.b)-f.p >= len(s) && string(f.b[f.p:f.p+len(s)]) == s {
		f.p += len(s)
		return true
	}
	return false
}

// str reads the rest of a string whose quote was matched: printable ASCII,
// no escapes, within the length limit.
func (f *fastScan) str() ([]byte, bool) {
	start := f.p
	for ; f.p < len(f.b); f.p++ {
		c := f.b[f.p]
		if c == '"' {
			s := f.b[start:f.p]
			f.p++
			return s, len(s) <= f.maxString
		}
		if c < 0x20 || c >= 0x7f || c == '\\' {
			return nil, false
		}
	}
	return nil, false
}

// digits reads 1 to 18 decimal digits, without a leading zero before
// another digit (JSON forbids it).
func (f *fastScan) digits() (int64, int, bool) {
	start := f.p
	var n int64
	for f.p < len(f.b) && f.b[f.p] >= '0' && f.b[f.p] <= '9' {
		n = n*10 + int64(f.b[f.p]-'0')
		f.p++
	}
	k := f.p - start
	if k == 0 || k > 18 || k > 1 && f.b[start] == '0' {
		return 0, k, false
	}
	return n, k, true
}

// integer reads -?digits that no '.', 'e' or 'E' follows.
func (f *fastScan) integer() (int64, bool) {
	neg := f.p < len(f.b) && f.b[f.p] == '-'
	if neg {
		f.p++
	}
	n, _, ok := f.digits()
	if !ok || f.p < len(f.b) && (f.b[f.p] == '.' || f.b[f.p] == 'e' || f.b[f.p] == 'E') {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}

// micros reads µs as -?digits[.1-3 digits] and returns ns.
func (f *fastScan) micros() (int64, bool) {
	neg := f.p < len(f.b) && f.b[f.p] == '-'
	if neg {
		f.p++
	}
	n, _, ok := f.digits()
	if !ok || n > (1<<63-1)/1000-1 { // room for ×1000 and the fraction
		return 0, false
	}
	n *= 1000
	if f.p < len(f.b) && f.b[f.p] == '.' {
		f.p++
		scale := int64(100)
		start := f.p
		for f.p < len(f.b) && f.b[f.p] >= '0' && f.b[f.p] <= '9' && f.p-start < 3 {
			n += int64(f.b[f.p]-'0') * scale
			scale /= 10
			f.p++
		}
		if f.p == start {
			return 0, false
		}
	}
	if f.p < len(f.b) && (f.b[f.p] >= '0' && f.b[f.p] <= '9' || f.b[f.p] == 'e' || f.b[f.p] == 'E') {
		return 0, false
	}
	if neg {
		n = -n
	}
	return n, true
}
