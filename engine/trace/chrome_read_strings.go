package trace

// Interning: the names, categories, lanes and node ids of a trace repeat
// from event to event; each is kept once, and spans refer to it by index.

// maxInternedStrings bounds the distinct names ReadChrome looks up; past it
// each new name is its own entry.
const maxInternedStrings = 1 << 16

func (l *loader) initStrings() {
	l.names = []string{""}
	l.strs = map[string]uint32{"": 0}
}

// internIdx returns the index of b in names, adding it. A small
// direct-mapped cache in front of the map catches the names and categories
// that repeat from one event to the next without hashing them.
func (l *loader) internIdx(b []byte) uint32 {
	slot := &l.recent[recentSlot(b)]
	if slot.set && l.names[slot.i] == string(b) {
		return slot.i
	}
	i, ok := l.strs[string(b)]
	if !ok {
		i = uint32(len(l.names))
		l.names = append(l.names, string(b))
		if len(l.strs) < maxInternedStrings {
			l.strs[l.names[i]] = i
		}
	}
	*slot = recentString{i: i, set: true}
	return i
}

// intern returns b as a string shared between events.
func (l *loader) intern(b []byte) string { return l.names[l.internIdx(b)] }

func recentSlot(b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return (len(b)*31 + int(b[0])*7 + int(b[len(b)-1])) & (len(recentStrings{}) - 1)
}

type recentString struct {
	i   uint32
	set bool
}

type recentStrings [64]recentString
