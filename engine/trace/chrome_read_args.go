package trace

// Event args: the keys Orrery writes (rank, bytes, peer, token, flows, lane,
// node id, name) and the numeric series of counter events.

func (l *loader) args() error {
	d := l.d
	a := &l.ev.args
	if err := d.enter('{'); err != nil {
		return err
	}
	for first := true; ; first = false {
		more, err := d.more('}', first)
		if err != nil || !more {
			return err
		}
		if err := d.readKey(); err != nil {
			return err
		}
		// Series are only needed by counters; ph usually precedes args, and
		// when it does not, collect them anyway.
		needSeries := l.ev.ph == "" || l.ev.ph == "C"
		code := argCode(d.key)
		var key string
		if needSeries {
			key = l.intern(d.key) // d.key is overwritten by the next read
		}
		v, err := d.readScalar()
		if err != nil {
			return err
		}
		switch code {
		case argLane, argNodeID, argName:
			if v.kind != 's' {
				break
			}
			i := l.internIdx(v.text)
			switch code {
			case argLane:
				a.lane = i
			case argNodeID:
				a.nodeID, a.hasNodeID = l.names[i], true
			default:
				a.name, a.hasName = l.names[i], true
			}
		case argRank:
			a.rank, a.hasRank = v.fixedInt(0)
		case argBytes:
			if n, ok := v.fixedInt(0); ok {
				a.a.Bytes, a.a.Has = n, a.a.Has|ArgBytes
			}
		case argPeer:
			if n, ok := v.fixedInt(0); ok {
				a.a.Peer, a.a.Has = clamp32(n), a.a.Has|ArgPeer
			}
		case argToken:
			if n, ok := v.fixedInt(0); ok {
				a.a.Token, a.a.Has = clamp32(n), a.a.Has|ArgToken
			}
		case argFlowOut:
			if n, ok := v.fixedInt(0); ok {
				a.a = a.a.WithFlowOut(uint64(max(n, 0)))
			}
		case argFlowIn:
			if n, ok := v.fixedInt(0); ok {
				a.a = a.a.WithFlowIn(uint64(max(n, 0)))
			}
		}
		if needSeries && v.kind == 'n' && len(a.series) < maxSeries {
			if f, ok := v.float(); ok {
				a.series = append(a.series, series{key, f})
			}
		}
	}
}

const (
	argOther = iota
	argRank
	argBytes
	argPeer
	argToken
	argFlowOut
	argFlowIn
	argLane
	argNodeID
	argName
)

func argCode(key []byte) int {
	switch string(key) {
	case "rank":
		return argRank
	case "bytes":
		return argBytes
	case "peer":
		return argPeer
	case "token":
		return argToken
	case "flowOut":
		return argFlowOut
	case "flowIn":
		return argFlowIn
	case "lane":
		return argLane
	case "nodeId":
		return argNodeID
	case "name":
		return argName
	}
	return argOther
}

func clamp32(n int64) int32 {
	return int32(min(max(n, -1<<31), 1<<31-1))
}

func clampInt(n int64) int {
	return int(min(max(n, int64(minInt)), int64(maxInt)))
}

const (
	maxInt = int(^uint(0) >> 1)
	minInt = -maxInt - 1
)
