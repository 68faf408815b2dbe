// synthTrace writes a Chrome trace like the ones a pipelined generation
// leaves (one process per node, one lane per rank, nested compute / send /
// recv spans, send→recv flows, memory and link counters), with about
// `spans` spans: the timeline's benchmark input.
export function synthTrace(spans, ranks = 3) {
  const ev = [];
  for (let r = 0; r < ranks; r++) {
    ev.push({ name: 'process_name', ph: 'M', pid: r, args: { name: `synthetic node ${r}`, nodeId: `node-${r}` } });
    ev.push({ name: 'thread_name', ph: 'M', pid: r, tid: r, args: { name: `rank ${r}` } });
  }
  const perToken = ranks * 4; // token, compute, send, recv per rank
  const tokens = Math.ceil(spans / perToken);
  let t = 1_000_000;
  let flow = 1;
  for (let k = 0; k < tokens; k++) {
    let start = t;
    for (let r = 0; r < ranks; r++) {
      const comp = 800 + ((k * 7 + r * 13) % 400);
      ev.push({ name: `token ${k}`, cat: 'decode', ph: 'X', ts: start, dur: comp + 300, pid: r, tid: r, args: { rank: r, token: k } });
      ev.push({ name: 'recv', cat: 'decode/recv', ph: 'X', ts: start, dur: 40, pid: r, tid: r, args: { rank: r, token: k, flowIn: flow - 1 } });
      ev.push({ name: 'compute', cat: 'decode/compute', ph: 'X', ts: start + 40, dur: comp, pid: r, tid: r, args: { rank: r, token: k } });
      ev.push({ name: `send → rank ${(r + 1) % ranks}`, cat: 'decode/send', ph: 'X', ts: start + 40 + comp, dur: 60, pid: r, tid: r, args: { rank: r, bytes: 8223, token: k, flowOut: flow } });
      ev.push({ name: 'flow', cat: 'flow', ph: 's', id: flow, ts: start + 40 + comp, pid: r, tid: r });
      ev.push({ name: 'flow', cat: 'flow', ph: 'f', bp: 'e', id: flow, ts: start + comp + 140, pid: (r + 1) % ranks, tid: (r + 1) % ranks });
      flow++;
      start += comp + 140;
    }
    if (k % 50 === 0)
      for (let r = 0; r < ranks; r++) {
        ev.push({ name: 'memory', ph: 'C', ts: t, pid: r, args: { bytes: 4e9 + ((k * 1e6) % 5e8) } });
        ev.push({ name: `link → synthetic node ${(r + 1) % ranks}`, ph: 'C', ts: t, pid: r, args: { 'MB/s': (k % 500) / 10 } });
      }
    t = start + 20;
  }
  return { traceEvents: ev, otherData: { generator: 'orrery e2e synthetic', spans } };
}
