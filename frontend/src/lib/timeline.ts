// The timeline draws windows of a trace that the agent prepares
// (GET /v1/traces/{id}/spans?from&to&px, engine/trace.Window): spans a
// pixel wide or more as they are, narrower ones merged, counters thinned,
// flows one per column. A window's size is bounded by its width, not by
// the trace, so a 1 M-span trace draws as fast as a small one; the page
// asks for a new window as the view moves and draws the last one it has
// meanwhile.

// TraceWindow is the JSON of engine/trace.Window. Times are µs since the
// trace's first span.
export interface TraceWindow {
  t0: number;
  t1: number;
  from: number;
  to: number;
  px: number;
  spanCount: number;
  drawn: number;
  names: string[];
  lanes: WindowLane[];
  counters: WindowCounter[];
  arrows: WindowArrow[];
}

export interface WindowLane {
  process: string;
  node: string;
  thread: string;
  rank: number;
  depths: number;
  spans: WindowSpan[]; // by start
}

export interface WindowSpan {
  s: number; // start, µs
  d: number; // duration, µs
  k: number; // depth
  n: number; // name, into names
  c: number; // category, into names
  m?: number; // > 1: spans merged into this one
  a?: Record<string, number>;
}

export interface WindowCounter {
  name: string;
  unit?: string; // "bytes", "MB/s", or absent
  process: string;
  node: string;
  min: number;
  max: number;
  points: [number, number][];
}

export interface WindowArrow {
  from: { lane: number; t: number; depth: number };
  to: { lane: number; t: number; depth: number };
}

// The widest window the agent serves (trace.MaxWindowPx).
export const MAX_WINDOW_PX = 16384;

// windowFor is the window to ask for to draw [start, end] plotW pixels
// wide: the view and as much again on each side (a pan shows data at
// once), at the view's resolution.
export function windowFor(start: number, end: number, t1: number, plotW: number): { from: number; to: number; px: number } {
  const span = Math.max(end - start, 1e-3);
  const from = Math.max(0, start - span), to = Math.min(Math.max(t1, 1e-3), end + span);
  const px = Math.min(MAX_WINDOW_PX, Math.max(1, Math.round((plotW * (to - from)) / span)));
  return { from, to: Math.max(to, from + 1e-3), px };
}

// covers says whether w holds [start, end] at about the view's resolution
// (plotW pixels): no new window is needed to draw it.
export function covers(w: TraceWindow, start: number, end: number, plotW: number): boolean {
  const eps = 1e-6 * Math.max(w.t1, 1);
  if (start < w.from - eps || end > w.to + eps) return false;
  const held = w.px / Math.max(w.to - w.from, 1e-9), want = plotW / Math.max(end - start, 1e-9);
  return want <= held * 1.25 && want >= held / 4;
}

// spanAt is the index of the lane's span at depth that covers t (± eps),
// or -1.
export function spanAt(l: WindowLane, depth: number, t: number, eps: number): number {
  const i0 = lowerBound(l.spans, t + eps, (x) => x.s);
  // Spans at one depth do not overlap: the last to start by t is the
  // only one that can cover it.
  for (let i = i0 - 1; i >= 0; i--) {
    const x = l.spans[i];
    if (x.k === depth) return x.s + x.d >= t - eps ? i : -1;
  }
  return -1;
}

// lowerBound is the first index of xs (sorted by key) with key >= t.
export function lowerBound<T>(xs: T[], t: number, key: (x: T) => number): number {
  let lo = 0, hi = xs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (key(xs[mid]) < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
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
