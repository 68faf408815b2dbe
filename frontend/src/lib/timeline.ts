// Timeline layout for a Chrome-trace JSON file (what /v1/traces/{id}/raw
// serves): one lane per process and thread (node and rank), span
// rectangles with their nesting depth, counter tracks, and flow arrows
// from each send to its receive. Drawing culls by time, so that a
// 100 k-span trace pans and zooms at frame rate on a canvas.

export interface TraceEvent {
  ph: string;
  name?: string;
  cat?: string;
  ts?: number;
  dur?: number;
  pid?: number;
  tid?: number;
  id?: number | string;
  args?: Record<string, unknown>;
}

export interface Lane {
  key: string; // "pid:tid"
  pid: number;
  tid: number;
  process: string;
  thread: string;
  depths: number; // nesting levels
  y: number; // top, in rows (see rowsOf)
}

export interface Rect {
  lane: number;
  depth: number;
  t0: number; // µs
  t1: number;
  name: string;
  cat: string;
  args?: Record<string, unknown>;
}

export interface Counter {
  key: string;
  pid: number;
  name: string;
  process: string;
  points: [number, number][]; // (µs, value), by time
  min: number;
  max: number;
}

export interface Arrow {
  id: string;
  from: { lane: number; t: number; depth: number };
  to: { lane: number; t: number; depth: number };
}

export interface Layout {
  lanes: Lane[];
  // rects[lane] sorted by t0; maxDur[lane] bounds the culling search.
  rects: Rect[][];
  maxDur: number[];
  counters: Counter[];
  arrows: Arrow[]; // by start time
  maxFlow: number; // the longest arrow, in µs: bounds the culling search
  t0: number;
  t1: number;
  spanCount: number;
}

export function layoutTimeline(events: TraceEvent[]): Layout {
  const procName = new Map<number, string>();
  const threadName = new Map<string, string>();
  for (const e of events) {
    if (e.ph !== 'M') continue;
    const n = String((e.args as { name?: unknown } | undefined)?.name ?? '');
    if (e.name === 'process_name' && e.pid != null) procName.set(e.pid, n);
    if (e.name === 'thread_name' && e.pid != null && e.tid != null) threadName.set(`${e.pid}:${e.tid}`, n);
  }
  const laneIdx = new Map<string, number>();
  const lanes: Lane[] = [];
  const rects: Rect[][] = [];
  const lane = (pid: number, tid: number): number => {
    const key = `${pid}:${tid}`;
    let i = laneIdx.get(key);
    if (i === undefined) {
      i = lanes.length;
      laneIdx.set(key, i);
      lanes.push({ key, pid, tid, process: procName.get(pid) ?? `process ${pid}`, thread: threadName.get(key) ?? `thread ${tid}`, depths: 1, y: 0 });
      rects.push([]);
    }
    return i;
  };
  let t0 = Infinity, t1 = -Infinity, spanCount = 0;
  const counters = new Map<string, Counter>();
  const flowStarts = new Map<string, { lane: number; t: number }>();
  const flowEnds = new Map<string, { lane: number; t: number }>();
  for (const e of events) {
    if (e.ph === 'X' && e.ts != null && e.pid != null && e.tid != null) {
      const l = lane(e.pid, e.tid);
      const end = e.ts + (e.dur ?? 0);
      rects[l].push({ lane: l, depth: 0, t0: e.ts, t1: end, name: e.name ?? '', cat: e.cat ?? '', args: e.args });
      t0 = Math.min(t0, e.ts);
      t1 = Math.max(t1, end);
      spanCount++;
    } else if (e.ph === 'C' && e.ts != null && e.pid != null) {
      // A track per numeric arg, named "name arg" as Perfetto does (a link
      // has "MB/s" and "bytes sent" series under one name).
      for (const [arg, raw] of Object.entries(e.args ?? {})) {
        const v = Number(raw);
        if (!Number.isFinite(v)) continue;
        const key = `${e.pid}:${e.name}:${arg}`;
        let c = counters.get(key);
        if (!c) {
          const name = arg === 'value' ? e.name ?? '' : `${e.name ?? ''} ${arg}`;
          c = { key, pid: e.pid, name, process: procName.get(e.pid) ?? `process ${e.pid}`, points: [], min: Infinity, max: -Infinity };
          counters.set(key, c);
        }
        c.points.push([e.ts, v]);
        c.min = Math.min(c.min, v);
        c.max = Math.max(c.max, v);
      }
    } else if ((e.ph === 's' || e.ph === 'f') && e.ts != null && e.pid != null && e.tid != null && e.id != null) {
      (e.ph === 's' ? flowStarts : flowEnds).set(String(e.id), { lane: lane(e.pid, e.tid), t: e.ts });
    }
  }
  // Depths: within a lane, a span starting before the previous open one
  // ends nests one level deeper (the writer's spans nest properly).
  const maxDur: number[] = [];
  rects.forEach((rs, l) => {
    rs.sort((a, b) => a.t0 - b.t0 || b.t1 - a.t1);
    const open: number[] = [];
    let md = 0;
    for (const r of rs) {
      while (open.length && open[open.length - 1] <= r.t0) open.pop();
      r.depth = open.length;
      open.push(r.t1);
      lanes[l].depths = Math.max(lanes[l].depths, open.length);
      md = Math.max(md, r.t1 - r.t0);
    }
    maxDur.push(md);
  });
  // Lanes ordered by thread (a rank's tid is its rank, so the pipeline
  // reads top to bottom), then process; rows stacked.
  const order = lanes.map((_, i) => i).sort((a, b) => lanes[a].tid - lanes[b].tid || lanes[a].pid - lanes[b].pid);
  const remap = new Map(order.map((old, i) => [old, i]));
  const sortedLanes = order.map((i) => lanes[i]);
  const sortedRects = order.map((i) => rects[i]);
  const sortedMax = order.map((i) => maxDur[i]);
  sortedRects.forEach((rs, i) => rs.forEach((r) => (r.lane = i)));
  let y = 0;
  for (const l of sortedLanes) {
    l.y = y;
    y += l.depths;
  }
  const depthAt = (laneI: number, t: number): number => {
    const rs = sortedRects[laneI];
    let best = 0;
    for (const i of visibleRange(rs, sortedMax[laneI], t, t)) best = Math.max(best, rs[i].depth);
    return best;
  };
  const arrows: Arrow[] = [];
  for (const [id, s] of flowStarts) {
    const f = flowEnds.get(id);
    if (!f) continue;
    const fl = remap.get(f.lane)!, sl = remap.get(s.lane)!;
    arrows.push({ id, from: { lane: sl, t: s.t, depth: depthAt(sl, s.t) }, to: { lane: fl, t: f.t, depth: depthAt(fl, f.t) } });
  }
  arrows.sort((a, b) => a.from.t - b.from.t);
  const maxFlow = arrows.reduce((m, a) => Math.max(m, Math.abs(a.to.t - a.from.t)), 0);
  const cs = [...counters.values()].sort((a, b) => a.pid - b.pid || a.name.localeCompare(b.name));
  cs.forEach((c) => c.points.sort((a, b) => a[0] - b[0]));
  if (!isFinite(t0)) {
    t0 = 0;
    t1 = 1;
  }
  return { lanes: sortedLanes, rects: sortedRects, maxDur: sortedMax, counters: cs, arrows, maxFlow, t0, t1, spanCount };
}

// lowerBound is the first index of xs (sorted by key) with key >= t;
// by default the key is a rect's start.
export function lowerBound<T = Rect>(xs: T[], t: number, key: (x: T) => number = (x) => (x as Rect).t0): number {
  let lo = 0, hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (key(xs[mid]) < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

// visibleRange yields the indices of the lane's rects that overlap
// [a, b]: a binary search from a - maxDur, then forward to b.
export function* visibleRange(rs: Rect[], maxDur: number, a: number, b: number): Generator<number> {
  for (let i = lowerBound(rs, a - maxDur); i < rs.length && rs[i].t0 <= b; i++) {
    if (rs[i].t1 >= a) yield i;
  }
}

// Viewport maps trace time to pixels and back; zoom keeps the time under
// the cursor in place.
export class Viewport {
  constructor(public start: number, public end: number, public width: number) {}
  get scale(): number {
    return this.width / Math.max(this.end - this.start, 1e-9);
  }
  x(t: number): number {
    return (t - this.start) * this.scale;
  }
  t(x: number): number {
    return this.start + x / this.scale;
  }
  zoom(factor: number, atX: number, min: number, max: number): void {
    const at = this.t(atX);
    const span = Math.min(Math.max((this.end - this.start) / factor, 1), max - min);
    this.start = at - (atX / this.width) * span;
    this.end = this.start + span;
    this.clamp(min, max);
  }
  pan(dx: number, min: number, max: number): void {
    const dt = dx / this.scale;
    this.start -= dt;
    this.end -= dt;
    this.clamp(min, max);
  }
  private clamp(min: number, max: number): void {
    const span = this.end - this.start;
    if (this.start < min) {
      this.start = min;
      this.end = min + span;
    }
    if (this.end > max) {
      this.end = max;
      this.start = Math.max(min, max - span);
    }
  }
}
