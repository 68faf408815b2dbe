import { describe, expect, it } from 'vitest';
import { badge, displayNames, edgeLabel, edgeTooltip, topologyFromState } from '../topology';
import { phasesFromStats } from '../phases';
import { Viewport, layoutTimeline, visibleRange, type TraceEvent } from '../timeline';
import type { State, TraceStats } from '../types';

const b = (n: number) => ({ inBytes: n });

function state(): State {
  const ids = ['n-b', 'n-a', 'n-c'];
  const st: State = {
    lastEventAppliedIdx: 10,
    nodeIdentities: {}, nodeMemory: {}, nodeSystem: {}, nodeNetwork: {}, nodeLinkTelemetry: {}, nodeModels: {},
    instances: {}, runners: {},
    topology: { nodes: ids.map((nodeId) => ({ nodeId })), connections: [] },
  };
  for (const id of ids) {
    st.nodeIdentities[id] = { nodeId: id, friendlyName: 'mac-' + id, modelId: '', chipId: 'Apple M2', osName: 'macOS', cpuCount: 8, ramTotal: b(16 * 2 ** 30) };
    st.nodeMemory[id] = { ramTotal: b(16 * 2 ** 30), ramAvailable: b(6 * 2 ** 30), swapTotal: b(2 * 2 ** 30), swapAvailable: b(1 * 2 ** 30), sampledAt: '' };
    // Unknown values are absent, as the agent sends them (exo's shape).
    st.nodeSystem[id] = id === 'n-a' ? { cpuUsage: 0.25, gpuUsage: 0.5, sysPower: 12.5, sampledAt: '' } : { cpuUsage: 0.25, sysPower: 12.5, sampledAt: '' };
  }
  st.topology.connections = [
    { source: 'n-a', sourceInterface: 'en0', sink: 'n-b', sinkAddress: '10.0.0.2:52400', connectionType: 'thunderbolt', rttMs: 0.21, lossPct: 0, capacityMbps: 40000, sendMBps: 512.3 },
    { source: 'n-b', sourceInterface: 'en1', sink: 'n-c', sinkAddress: '10.0.0.3:52400', connectionType: 'wifi', rttMs: 7.5, lossPct: 2 },
  ];
  st.nodeLinkTelemetry['n-a'] = { sampledAt: '', links: [{ peer: 'n-b', sourceInterface: 'en0', connectionType: 'thunderbolt', rttMs: 0.2, rttEwmaMs: 0.21, rttMinMs: 0.18, jitterMs: 0.01, lossPct: 0, probes: 30, clockOffsetMs: -1.25, clockOffsetUncertaintyMs: 0.1, capacityMbps: 40000, capacitySource: 'os', interfaceSendMBps: 512.3, peerSendMBps: 500, peerRecvMBps: 1 }] };
  return st;
}

describe('topologyFromState', () => {
  it('gives every node its telemetry and marks the master', () => {
    const { nodes } = topologyFromState(state(), 'n-b');
    expect(nodes.map((n) => n.id)).toEqual(['n-a', 'n-b', 'n-c']);
    const a = nodes[0];
    expect(a.memUsed).toBe(10 * 2 ** 30);
    expect(a.memTotal).toBe(16 * 2 ** 30);
    expect(a.swapUsed).toBe(1 * 2 ** 30);
    expect(a.gpu).toBe(0.5);
    expect(nodes[1].gpu).toBeNull(); // unknown stays unknown
    expect(nodes.filter((n) => n.master).map((n) => n.id)).toEqual(['n-b']);
    const xs = new Set(nodes.map((n) => `${Math.round(n.x)},${Math.round(n.y)}`));
    expect(xs.size).toBe(3); // laid out apart
  });
  it('labels edges and flags the bad ones', () => {
    const { edges } = topologyFromState(state(), 'n-b');
    const [tb, wifi] = edges;
    expect(tb.type).toBe('Thunderbolt');
    // The badge is Orrery's own traffic to the peer; the interface's is in the tooltip.
    expect(edgeLabel(tb)).toBe('500 MB/s · 0.21 ms');
    expect(tb.ifaceMBps).toBe(512.3);
    expect(edgeTooltip(tb, (id) => id)).toContain('interface 512.300 MB/s');
    expect(tb.bad).toEqual([]);
    expect(tb.clockOffsetMs).toBe(-1.25);
    expect(tb.capacitySource).toBe('os');
    expect(edgeTooltip(tb, (id) => id)).toContain('clock offset -1.250 ± 0.100 ms');
    expect(wifi.type).toBe('Wi-Fi');
    expect(wifi.bad).toEqual(['loss 2.0 %', 'RTT 7.5 ms', 'slow path']);
    expect(edgeLabel(wifi)).toBe('– MB/s · 7.50 ms');
    expect(badge('ethernet/wifi')).toBe('Ethernet / Wi-Fi');
  });
});

describe('displayNames', () => {
  it('adds the short id only where friendly names repeat', () => {
    const st = state();
    st.nodeIdentities['n-c'].friendlyName = 'mac-n-a';
    const names = displayNames(st);
    expect(names.get('n-b')).toBe('mac-n-b');
    expect(names.get('n-a')).toBe('mac-n-a (n-a)');
    expect(names.get('n-c')).toBe('mac-n-a (n-c)');
  });
});

describe('phasesFromStats', () => {
  const stats: TraceStats = {
    taskId: 't', totalWallTimeUs: 1000,
    byCategory: {
      decode: { totalUs: 600, count: 10, minUs: 50, maxUs: 70, avgUs: 60 },
      'decode/compute': { totalUs: 500, count: 10, minUs: 40, maxUs: 60, avgUs: 50 },
      prefill: { totalUs: 300, count: 1, minUs: 300, maxUs: 300, avgUs: 300 },
    },
    byRank: { '0': { byCategory: {} }, '1': { byCategory: {} }, '10': { byCategory: {} } },
    byRankShare: {
      '0': { computeUs: 400, commsUs: 100, computeShare: 0.8, commsShare: 0.2 },
      '1': { computeUs: 700, commsUs: 50, computeShare: 0.93, commsShare: 0.07 },
      '10': { computeUs: 100, commsUs: 10, computeShare: 0.9, commsShare: 0.1 },
    },
  };
  it('lists the top-level phases by time with their share of the wall', () => {
    const { phases } = phasesFromStats(stats);
    expect(phases.map((p) => [p.name, p.share])).toEqual([['decode', 0.6], ['prefill', 0.3]]);
  });
  it('orders ranks numerically and calls out the slowest', () => {
    const { ranks, slowest } = phasesFromStats(stats);
    expect(ranks.map((r) => r.rank)).toEqual(['0', '1', '10']);
    expect(slowest).toBe('1');
    expect(ranks[1].slowest).toBe(true);
    expect(ranks[0].busyUs).toBe(500);
  });
  it('shows each phase by its wall time, beside the sum over ranks', () => {
    // decode ran on 3 ranks at once: 1400 µs summed, 500 µs of wall time.
    const withWall: TraceStats = {
      ...stats,
      byCategory: { ...stats.byCategory, decode: { totalUs: 1400, count: 30, minUs: 40, maxUs: 60, avgUs: 46 } },
      phases: { decode: { totalUs: 1400, count: 30, minUs: 40, maxUs: 60, avgUs: 46, wallUs: 500 }, prefill: { totalUs: 300, count: 1, minUs: 300, maxUs: 300, avgUs: 300, wallUs: 300 } },
    };
    const { phases } = phasesFromStats(withWall);
    expect(phases.map((p) => [p.name, p.wallUs, p.totalUs, p.share])).toEqual([['decode', 500, 1400, 0.5], ['prefill', 300, 300, 0.3]]);
  });
  it('names no slowest rank for one rank', () => {
    expect(phasesFromStats({ ...stats, byRank: { '0': { byCategory: {} } } }).slowest).toBeNull();
  });
});

describe('layoutTimeline', () => {
  const ev: TraceEvent[] = [
    { ph: 'M', name: 'process_name', pid: 1, args: { name: 'studio' } },
    { ph: 'M', name: 'thread_name', pid: 1, tid: 0, args: { name: 'rank 0' } },
    { ph: 'M', name: 'process_name', pid: 2, args: { name: 'mini' } },
    { ph: 'M', name: 'thread_name', pid: 2, tid: 1, args: { name: 'rank 1' } },
    { ph: 'X', name: 'token 1', cat: 'decode', ts: 100, dur: 50, pid: 1, tid: 0 },
    { ph: 'X', name: 'compute', cat: 'decode/compute', ts: 100, dur: 30, pid: 1, tid: 0 },
    { ph: 'X', name: 'send → rank 1', cat: 'decode/send', ts: 130, dur: 5, pid: 1, tid: 0 },
    { ph: 'X', name: 'recv ← rank 0', cat: 'decode/recv', ts: 136, dur: 4, pid: 2, tid: 1 },
    { ph: 'X', name: 'token 2', cat: 'decode', ts: 200, dur: 50, pid: 1, tid: 0 },
    { ph: 's', id: 7, ts: 130, pid: 1, tid: 0 },
    { ph: 'f', id: 7, ts: 140, pid: 2, tid: 1 },
    { ph: 'C', name: 'memory', ts: 100, pid: 1, args: { bytes: 5 } },
    { ph: 'C', name: 'memory', ts: 50, pid: 1, args: { bytes: 3 } },
  ];
  it('makes a lane per process and thread, with nesting depths', () => {
    const l = layoutTimeline(ev);
    expect(l.lanes.map((x) => `${x.process}/${x.thread}`)).toEqual(['studio/rank 0', 'mini/rank 1']);
    expect(l.lanes[0].depths).toBe(2);
    expect(l.lanes[1].y).toBe(2);
    expect(l.rects[0].map((r) => [r.name, r.depth])).toEqual([['token 1', 0], ['compute', 1], ['send → rank 1', 1], ['token 2', 0]]);
    expect(l.spanCount).toBe(5);
    expect([l.t0, l.t1]).toEqual([100, 250]);
  });
  it('orders lanes by rank, whatever the process numbers', () => {
    const l = layoutTimeline([
      { ph: 'X', name: 'a', ts: 0, dur: 1, pid: 0, tid: 2 },
      { ph: 'X', name: 'b', ts: 0, dur: 1, pid: 1, tid: 0 },
      { ph: 'X', name: 'c', ts: 0, dur: 1, pid: 2, tid: 1 },
    ]);
    expect(l.lanes.map((x) => x.tid)).toEqual([0, 1, 2]);
    expect(l.rects.map((r) => r[0].name)).toEqual(['b', 'c', 'a']);
  });
  it('pairs flows into arrows and sorts counters', () => {
    const l = layoutTimeline(ev);
    expect(l.arrows).toHaveLength(1);
    expect(l.arrows[0].from).toEqual({ lane: 0, t: 130, depth: 1 });
    expect(l.arrows[0].to).toEqual({ lane: 1, t: 140, depth: 0 });
    expect(l.counters[0].points).toEqual([[50, 3], [100, 5]]);
    expect([l.counters[0].min, l.counters[0].max]).toEqual([3, 5]);
  });
  it('makes a counter track per arg: a link\'s MB/s and bytes sent apart', () => {
    const l = layoutTimeline([
      { ph: 'C', name: 'link → b', ts: 0, pid: 1, args: { 'MB/s': 2.5 } },
      { ph: 'C', name: 'link → b', ts: 5, pid: 1, args: { 'bytes sent': 4000 } },
      { ph: 'C', name: 'link → b', ts: 9, pid: 1, args: { 'MB/s': 0 } },
      { ph: 'C', name: 'load', ts: 9, pid: 1, args: { value: 1, note: 'x' } },
    ]);
    expect(l.counters.map((c) => [c.name, c.points.length, c.max])).toEqual([['link → b bytes sent', 1, 4000], ['link → b MB/s', 2, 2.5], ['load', 1, 1]]);
  });
  it('culls to the visible time range, long spans included', () => {
    const l = layoutTimeline(ev);
    const names = (a: number, b: number) => [...visibleRange(l.rects[0], l.maxDur[0], a, b)].map((i) => l.rects[0][i].name);
    expect(names(145, 160)).toEqual(['token 1']);
    expect(names(160, 190)).toEqual([]);
    expect(names(120, 210)).toEqual(['token 1', 'compute', 'send → rank 1', 'token 2']);
  });
  it('zooms around the cursor and clamps pans', () => {
    const v = new Viewport(0, 1000, 500);
    v.zoom(2, 250, 0, 1000); // at the middle
    expect([v.start, v.end]).toEqual([250, 750]);
    v.pan(1000, 0, 1000); // far right drag: clamps at the start
    expect([v.start, v.end]).toEqual([0, 500]);
    expect(v.x(250)).toBe(250);
  });
  it('lays out 100 k spans quickly enough to stay interactive', () => {
    const big: TraceEvent[] = [];
    for (let i = 0; i < 100_000; i++) big.push({ ph: 'X', name: 'compute', cat: 'decode/compute', ts: i * 10, dur: 8, pid: 1 + (i % 3), tid: i % 3 });
    const l = layoutTimeline(big);
    expect(l.spanCount).toBe(100_000);
    expect(l.lanes).toHaveLength(3);
    // A window of 1 % of the trace yields about 1 % of the spans.
    const n = [...visibleRange(l.rects[0], l.maxDur[0], 0, 10_000)].length;
    expect(n).toBeGreaterThan(300);
    expect(n).toBeLessThan(400);
  });
});
