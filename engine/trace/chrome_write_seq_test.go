package trace

import (
	"bytes"
	"errors"
	"iter"
	"strings"
	"testing"
)

// WriteChromeSeq writes what WriteChrome writes for the same spans, given
// as a sequence with their threads listed.
func TestWriteChromeSeqSameAsWriteChrome(t *testing.T) {
	tr := &Trace{TaskID: "seq", Processes: map[string]string{"n1": "one"}, MissingRanks: []int{2}}
	for i := range 50 {
		lane := ""
		if i%5 == 0 {
			lane = "io"
		}
		a := Args{}.WithToken(i)
		if i%7 == 0 {
			a = a.WithBytes(100).WithPeer(1)
		}
		tr.Spans = append(tr.Spans, Span{Name: "step", Cat: "decode/compute", Node: []string{"n1", "n2"}[i%2], Lane: lane,
			Rank: i % 2, StartNs: int64(1000 * i), DurNs: 900, Args: a})
	}
	tr.Counters = []CounterSample{{Node: "n1", Name: "memory", Unit: "bytes", TsNs: 5, Value: 1}}
	var want bytes.Buffer
	if err := WriteChrome(&want, tr); err != nil {
		t.Fatal(err)
	}
	var threads []Thread
	for _, s := range tr.Spans {
		threads = append(threads, Thread{s.Node, s.Rank, s.Lane})
	}
	spans := tr.Spans
	head := *tr
	head.Spans = nil
	var got bytes.Buffer
	seq := func(yield func(*Span, error) bool) {
		for i := range spans {
			if !yield(&spans[i], nil) {
				return
			}
		}
	}
	if err := WriteChromeSeq(&got, &head, threads, seq); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("WriteChromeSeq differs from WriteChrome:\n%s\nwant:\n%s", got.Bytes(), want.Bytes())
	}
	// A span on a thread not listed, and an error from the sequence, end
	// the write with an error.
	if err := WriteChromeSeq(&got, &head, threads[:1], seq); err == nil || !strings.Contains(err.Error(), "not listed") {
		t.Errorf("unlisted thread: %v", err)
	}
	boom := errors.New("spill file gone")
	var failing iter.Seq2[*Span, error] = func(yield func(*Span, error) bool) { yield(nil, boom) }
	if err := WriteChromeSeq(&got, &head, threads, failing); !errors.Is(err, boom) {
		t.Errorf("failing sequence: %v", err)
	}
}
