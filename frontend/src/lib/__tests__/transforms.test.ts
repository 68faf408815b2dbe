import { describe, expect, it } from 'vitest';
import { badge, displayNames, edgeLabel, edgeTooltip, GPU_CARD_H, topologyFromState } from '../topology';
import { phasesFromStats } from '../phases';
import { planGrid } from '../plan';
import { counterValue, gpuCard, gpuLines, rankDevices } from '../format';
import { MAX_WINDOW_PX, Viewport, covers, spanAt, windowFor, type TraceWindow, type WindowLane } from '../timeline';
import type { GPUDevice, State, TraceStats } from '../types';

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

describe('timeline windows', () => {
  const win = (from: number, to: number, px: number): TraceWindow => ({
    t0: 0, t1: 10_000, from, to, px, spanCount: 0, drawn: 0, names: [], lanes: [], counters: [], arrows: [],
  });
  it('asks for the view and as much again on each side, at the view\'s resolution', () => {
    expect(windowFor(4000, 5000, 10_000, 800)).toEqual({ from: 3000, to: 6000, px: 2400 });
    // Clamped to the trace, and to the widest window the agent serves.
    expect(windowFor(0, 10_000, 10_000, 800)).toEqual({ from: 0, to: 10_000, px: 800 });
    expect(windowFor(100, 110, 10_000, 8000).px).toBe(MAX_WINDOW_PX);
  });
  it('needs no new window while the one held covers the view at about its resolution', () => {
    const w = win(3000, 6000, 2400);
    expect(covers(w, 4000, 5000, 800)).toBe(true);
    expect(covers(w, 4500, 5500, 800)).toBe(true); // panned within
    expect(covers(w, 5500, 6500, 800)).toBe(false); // past its end
    expect(covers(w, 4400, 4600, 800)).toBe(false); // zoomed in 5x: too coarse
    expect(covers(w, 3000, 6000, 800)).toBe(true); // zoomed out to all it holds
  });
  it('finds the span under the cursor at a depth', () => {
    const lane: WindowLane = { process: 'p', node: 'n', thread: 'rank 0', rank: 0, depths: 2, spans: [
      { s: 0, d: 100, k: 0, n: 0, c: 0 }, { s: 10, d: 20, k: 1, n: 1, c: 0 }, { s: 40, d: 5, k: 1, n: 2, c: 0, m: 30 }, { s: 200, d: 50, k: 0, n: 3, c: 0 },
    ] };
    expect(spanAt(lane, 0, 50, 0.5)).toBe(0);
    expect(spanAt(lane, 1, 15, 0.5)).toBe(1);
    expect(spanAt(lane, 1, 42, 0.5)).toBe(2);
    expect(spanAt(lane, 1, 35, 0.5)).toBe(-1); // between the two
    expect(spanAt(lane, 0, 150, 0.5)).toBe(-1);
    expect(spanAt(lane, 0, 249, 0.5)).toBe(3);
  });
  it('zooms around the cursor and clamps pans', () => {
    const v = new Viewport(0, 1000, 500);
    v.zoom(2, 250, 0, 1000); // at the middle
    expect([v.start, v.end]).toEqual([250, 750]);
    v.pan(1000, 0, 1000); // far right drag: clamps at the start
    expect([v.start, v.end]).toEqual([0, 500]);
    expect(v.x(250)).toBe(250);
  });
});

describe('planGrid', () => {
  const r = (rank: number, first: number, last: number) => ({ rank, nodeId: `n${rank}`, firstLayer: first, lastLayer: last });
  it('lays pipeline 2 × tensor 2 out as 2 stages of 2 ranks', () => {
    const g = planGrid({ tensor: 2, ranks: [r(2, 4, 8), r(0, 0, 4), r(3, 4, 8), r(1, 0, 4)] });
    expect(g.map((s) => [s.stage, s.firstLayer, s.lastLayer, s.ranks.map((x) => x.rank)])).toEqual([[0, 0, 4, [0, 1]], [1, 4, 8, [2, 3]]]);
  });
  it('lays a pipeline out as a column, one rank per stage', () => {
    const g = planGrid({ ranks: [r(0, 0, 3), r(1, 3, 6), r(2, 6, 8)] });
    expect(g.map((s) => s.ranks.length)).toEqual([1, 1, 1]);
    expect(g[2].firstLayer).toBe(6);
  });
  it('lays one tensor-parallel group out as one row', () => {
    expect(planGrid({ tensor: 3, ranks: [r(0, 0, 8), r(1, 0, 8), r(2, 0, 8)] }).map((s) => s.ranks.length)).toEqual([3]);
  });
});

describe('counterValue', () => {
  it('gives bytes in binary units and rates in theirs', () => {
    expect(counterValue(144608, 'bytes')).toBe('141.2 KiB');
    expect(counterValue(1.5 * 2 ** 30, 'bytes')).toBe('1.5 GiB');
    expect(counterValue(512, 'bytes')).toBe('512 B');
    expect(counterValue(144608, 'bytes sent')).toBe('141.2 KiB sent');
    expect(counterValue(5.891, 'MB/s')).toBe('5.89 MB/s');
    expect(counterValue(123.4, 'MB/s')).toBe('123 MB/s');
    expect(counterValue(42.25)).toBe('42.3');
  });
});

describe('GPUs on a node card', () => {
  const cuda: GPUDevice = { id: 'GPU-1', library: 'CUDA', name: 'CUDA0', description: 'NVIDIA GeForce RTX 4090', totalBytes: 24 * 2 ** 30, freeBytes: 22.5 * 2 ** 30 };
  const metal: GPUDevice = { id: '0', library: 'Metal', name: 'Metal', description: '', totalBytes: 96 * 2 ** 30, freeBytes: 96 * 2 ** 30, unified: true };
  const lavapipe: GPUDevice = { id: 'u', library: 'Vulkan', name: 'Vulkan0', description: 'llvmpipe (LLVM 15.0.6, 256 bits)', totalBytes: 2 ** 31, freeBytes: 2 ** 31, software: true };
  it('names the device and its library, its free and total memory, and unified or software memory', () => {
    expect(gpuLines(cuda)).toEqual(['CUDA · NVIDIA GeForce RTX 4090', 'free 22.5 of 24.0 GiB']);
    expect(gpuLines(metal)).toEqual(['Metal · Metal', 'free 96.0 of 96.0 GiB · unified']);
    expect(gpuLines(lavapipe)).toEqual(['Vulkan · llvmpipe (LLVM 15.0.6, 256 bits)', 'free 2.0 of 2.0 GiB · software']);
  });
  it('shows the first GPU with a count of the others, every one in the tooltip, nothing for none', () => {
    expect(gpuCard([])).toEqual({ lines: [], title: '' });
    const c = gpuCard([cuda, lavapipe]);
    expect(c.lines).toEqual(['GPU CUDA · NVIDIA GeForce RTX 4090 (+1 more)', 'free 22.5 of 24.0 GiB']);
    expect(c.title.split('\n')).toEqual(['CUDA0: CUDA · NVIDIA GeForce RTX 4090, free 22.5 of 24.0 GiB', 'Vulkan0: Vulkan · llvmpipe (LLVM 15.0.6, 256 bits), free 2.0 of 2.0 GiB · software']);
  });
  it('reach the topology from the identity, which lays the cards out taller', () => {
    const st = state();
    st.nodeIdentities['n-a'].gpus = [metal];
    const { nodes } = topologyFromState(st, '', 960, 600);
    expect(nodes.find((n) => n.id === 'n-a')!.gpus).toEqual([metal]);
    expect(nodes.find((n) => n.id === 'n-b')!.gpus).toEqual([]);
    const top = Math.min(...nodes.map((n) => n.y));
    const plain = Math.min(...topologyFromState(state(), '', 960, 600).nodes.map((n) => n.y));
    expect(top - plain).toBeCloseTo(GPU_CARD_H / 2, 6);
  });
});

describe('a preview rank on a GPU', () => {
  const gpu: GPUDevice = { id: 'u', library: 'Vulkan', name: 'Vulkan0', description: 'llvmpipe', totalBytes: 2 ** 31, freeBytes: 2 ** 31, software: true };
  it('says its blocks on the GPU and on the CPU, the head when there, nothing without a GPU', () => {
    expect(rankDevices({ gpu, gpuBlocks: 26, cpuBlocks: 22, gpuNeedBytes: 1.97 * 2 ** 30 })).toBe('26 blocks on Vulkan0 (2.0 GiB), 22 on the CPU');
    expect(rankDevices({ gpu, gpuBlocks: 1, gpuHead: true, gpuNeedBytes: 2 ** 29 })).toBe('1 block and the head on Vulkan0 (0.5 GiB)');
    expect(rankDevices({ gpu, cpuBlocks: 4 })).toBe('0 blocks on Vulkan0 (0.0 GiB), 4 on the CPU');
    expect(rankDevices({})).toBe('');
  });
});
