package trace

// chunkList is an append-only list grown in chunks, so that a million
// elements are not copied again and again as a slice grows.
type chunkList[T any] struct {
	full  [][]T
	cur   []T
	n     int
	first int // capacity of the first chunk (a size hint), 0 for the default
}

func (c *chunkList[T]) add() *T {
	if len(c.cur) == cap(c.cur) {
		size := max(c.first, 256)
		if c.cur != nil {
			c.full = append(c.full, c.cur)
			size = min(2*cap(c.cur), 1<<15)
		}
		c.cur = make([]T, 0, size)
		hugePages(c.cur)
	}
	c.cur = c.cur[:len(c.cur)+1]
	c.n++
	return &c.cur[len(c.cur)-1]
}

// join returns the elements as one slice (nil when there are none) and
// empties c.
func (c *chunkList[T]) join() []T {
	var out []T
	switch {
	case c.n == 0:
	case len(c.full) == 0:
		out = c.cur
	default:
		out = make([]T, 0, c.n)
		for _, f := range c.full {
			out = append(out, f...)
		}
		out = append(out, c.cur...)
	}
	*c = chunkList[T]{}
	return out
}

// appendList moves o's elements after c's (no copying) and empties o.
func (c *chunkList[T]) appendList(o *chunkList[T]) {
	if o.n == 0 {
		return
	}
	if len(c.cur) > 0 {
		c.full = append(c.full, c.cur)
	}
	c.full = append(c.full, o.full...)
	c.cur = o.cur
	c.n += o.n
	*o = chunkList[T]{}
}
