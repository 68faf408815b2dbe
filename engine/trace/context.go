package trace

import "context"

type ctxKey struct{}

// ctxVal is what a context carries: the recorder, and the open span that new
// spans nest under (parent is the zero Token at the top level).
type ctxVal struct {
	r      *Recorder
	parent Token
}

// WithRecorder returns a context carrying r. Spans begun from it with Begin
// are top-level spans of r.
func WithRecorder(ctx context.Context, r *Recorder) context.Context {
	return context.WithValue(ctx, ctxKey{}, &ctxVal{r: r})
}

// FromContext returns the recorder ctx carries, or nil (a valid, disabled
// recorder) when it carries none.
func FromContext(ctx context.Context) *Recorder {
	if v, _ := ctx.Value(ctxKey{}).(*ctxVal); v != nil {
		return v.r
	}
	return nil
}

// Begin opens a span on the recorder ctx carries, nested in the span ctx
// carries if any (its category becomes "parent/category"), and returns a
// context carrying the new span for deeper nesting. End the Token when the
// operation finishes:
//
//	ctx, sp := trace.Begin(ctx, "decode 7", "decode")
//	defer sp.End(trace.Args{}.WithToken(7))
//
// Without a recorder, or with a disabled one, Begin returns ctx unchanged and a
// zero Token. With one, it allocates the new context; the allocation-free path
// is Recorder.Start and Token.Child.
func Begin(ctx context.Context, name, category string) (context.Context, Token) {
	v, _ := ctx.Value(ctxKey{}).(*ctxVal)
	if v == nil || !v.r.Enabled() {
		return ctx, Token{}
	}
	var t Token
	if parent := v.parent; parent.r != nil {
		t = parent.Child(name, category)
	} else {
		t = v.r.Start(name, category)
	}
	return context.WithValue(ctx, ctxKey{}, &ctxVal{r: v.r, parent: t}), t
}
