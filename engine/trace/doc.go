// Package trace records what one distributed task did, rank by rank, and turns
// it into a Chrome trace (Perfetto) and into statistics.
//
// Recording. A [Recorder] belongs to one task on one rank. It is handed down
// explicitly or through a context ([WithRecorder], [FromContext], [Begin]);
// there is no global recorder. A span has a name, a category, the rank, an
// optional lane and small fixed [Args] (bytes, peer rank, token index, flow
// ids). A span started under another span gets the category
// "parent/child" (e.g. "decode/comms"); the joined string is built once per
// pair and cached. The steady-state path, [Recorder.Start] + [Token.End], makes
// no allocation and costs two clock reads and one uncontended lock; a nil or
// disabled recorder costs a nil check. Spans are kept in fixed-size chunks that
// are reused once drained ([Recorder.Drain], [Recorder.AppendDrain]), so a
// long task can ship them in bounded pieces.
//
// A flow pairs a send on one rank with its receive on another: both sides
// compute the same id with [FlowKey] and end their spans with
// [Args.WithFlowOut] and [Args.WithFlowIn]; the exporter draws the arrow.
//
// Files. A [Trace] is the unit that is exported, stored and merged: task id,
// creation time, node names, spans, counter samples, foreign flow events and
// the ranks that never reported. [WriteChrome] streams it as Chrome trace JSON
// (X spans, M process/thread names, C counters, s/f flows); [ReadChrome]
// streams Orrery's files and foreign ones (exo's among them) back, tolerating
// missing fields, within [ReadLimits]. [Trace.Shift] moves one node's
// timestamps by a clock offset before a merge.
//
// Statistics. [ComputeStats] follows exo's trace statistics exactly (integer
// microseconds; wall time = latest end − earliest start; per category and per
// rank {totalUs, count, minUs, maxUs, avgUs}) and adds phases, per-step
// averages and the compute/comms share of each rank.
//
// The package imports nothing from the rest of Orrery. A Recorder is safe for
// concurrent use; a Trace is a plain value and is not.
package trace
