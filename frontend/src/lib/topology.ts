// topologyFromState turns the replicated state into what the topology
// graph draws: nodes with their telemetry, and directed edges with their
// badges, tooltip figures and whether they are in a bad state.
import type { GPUDevice, State, LinkTelemetry } from './types';

export interface TopoNode {
  id: string;
  name: string;
  chip: string;
  master: boolean;
  memUsed: number | null;
  memTotal: number | null;
  swapUsed: number | null;
  swapTotal: number | null;
  cpu: number | null;
  gpu: number | null;
  temp: number | null;
  power: number | null;
  gpus: GPUDevice[]; // as the node publishes them in its identity
  x: number;
  y: number;
}

export interface TopoEdge {
  id: string;
  source: string;
  sink: string;
  type: string; // the badge text: Thunderbolt, Ethernet, Wi-Fi, …
  mbps: number | null; // Orrery's own traffic to the peer, else the interface's send rate
  ifaceMBps: number | null; // the source interface's send rate (all traffic)
  rttMs: number;
  jitterMs: number | null;
  lossPct: number;
  capacityMbps: number | null;
  capacitySource: string;
  clockOffsetMs: number | null;
  clockUncertaintyMs: number | null;
  bad: string[]; // why the edge stands out; empty when healthy
}

const typeNames: Record<string, string> = {
  thunderbolt: 'Thunderbolt', ethernet: 'Ethernet', wifi: 'Wi-Fi', loopback: 'Loopback', vpn: 'VPN',
  virtual: 'Virtual', bridge: 'Bridge', unknown: 'Unknown',
};

export function badge(connectionType: string): string {
  return connectionType
    .split('/')
    .map((t) => typeNames[t] ?? (t ? t[0].toUpperCase() + t.slice(1) : 'Unknown'))
    .join(' / ');
}

// Thresholds of a bad edge.
export const LOSS_BAD_PCT = 1;
export const RTT_BAD_MS = 5;
export const JITTER_BAD_MS = 2;
const slowTypes = new Set(['wifi', 'vpn']);

export function badReasons(type: string, rttMs: number, lossPct: number, jitterMs: number | null): string[] {
  const out: string[] = [];
  if (lossPct >= LOSS_BAD_PCT) out.push(`loss ${lossPct.toFixed(1)} %`);
  if (rttMs > RTT_BAD_MS) out.push(`RTT ${rttMs.toFixed(1)} ms`);
  if (jitterMs != null && jitterMs > JITTER_BAD_MS) out.push(`jitter ${jitterMs.toFixed(1)} ms`);
  if (type.split('/').some((t) => slowTypes.has(t))) out.push('slow path');
  return out;
}

// layoutCircle places n nodes on an ellipse in a width × height box,
// keeping a margin for the node boxes (boxW × boxH) around it.
export function layoutCircle(n: number, width: number, height: number, boxW = 230, boxH = 120): { x: number; y: number }[] {
  const cx = width / 2, cy = height / 2;
  if (n === 1) return [{ x: cx, y: cy }];
  const rx = Math.max(width / 2 - boxW / 2 - 10, 40), ry = Math.max(height / 2 - boxH / 2 - 10, 40);
  return Array.from({ length: n }, (_, i) => {
    const a = -Math.PI / 2 + (2 * Math.PI * i) / n;
    return { x: cx + rx * Math.cos(a), y: cy + ry * Math.sin(a) };
  });
}

// displayNames labels nodes by friendly name, adding the short id where
// names repeat (several agents on one machine, or two Macs both called
// "MacBook Pro").
export function displayNames(st: State): Map<string, string> {
  const ids = Object.keys(st.nodeIdentities).concat(st.topology.nodes.map((n) => n.nodeId));
  const base = new Map(ids.map((id) => [id, st.nodeIdentities[id]?.friendlyName || id.slice(0, 8)]));
  const count = new Map<string, number>();
  for (const n of base.values()) count.set(n, (count.get(n) ?? 0) + 1);
  return new Map([...base].map(([id, n]) => [id, (count.get(n) ?? 0) > 1 && n !== id.slice(0, 8) ? `${n} (${id.slice(0, 8)})` : n]));
}

// GPU_CARD_H is what a node's card grows by for its GPUs' two lines.
export const GPU_CARD_H = 36;

export function topologyFromState(st: State, masterId: string, width = 800, height = 520): { nodes: TopoNode[]; edges: TopoEdge[] } {
  const ids = st.topology.nodes.map((n) => n.nodeId).sort();
  const gpus = ids.some((id) => st.nodeIdentities[id]?.gpus?.length);
  const pos = layoutCircle(ids.length, width, height, 230, 120 + (gpus ? GPU_CARD_H : 0));
  const names = displayNames(st);
  const nodes = ids.map((id, i): TopoNode => {
    const ident = st.nodeIdentities[id];
    const mem = st.nodeMemory[id];
    const sys = st.nodeSystem[id];
    const total = mem?.ramTotal?.inBytes ?? null;
    const avail = mem?.ramAvailable?.inBytes ?? null;
    const swapTotal = mem?.swapTotal?.inBytes ?? null;
    const swapAvail = mem?.swapAvailable?.inBytes ?? null;
    return {
      id,
      name: names.get(id) ?? id.slice(0, 8),
      chip: ident?.chipId || '',
      master: id === masterId,
      memUsed: total != null && avail != null ? total - avail : null,
      memTotal: total,
      swapUsed: swapTotal != null && swapAvail != null ? swapTotal - swapAvail : null,
      swapTotal,
      cpu: sys?.cpuUsage ?? null,
      gpu: sys?.gpuUsage ?? null,
      temp: sys?.temp ?? null,
      power: sys?.sysPower ?? null,
      gpus: ident?.gpus ?? [],
      ...pos[i],
    };
  });
  const edges = st.topology.connections.map((c): TopoEdge => {
    const l: LinkTelemetry | undefined = st.nodeLinkTelemetry[c.source]?.links.find((x) => x.peer === c.sink);
    const jitter = l?.jitterMs ?? null;
    return {
      id: `${c.source}→${c.sink}`,
      source: c.source,
      sink: c.sink,
      type: badge(c.connectionType),
      mbps: l?.peerSendMBps ?? c.sendMBps ?? null,
      ifaceMBps: c.interfaceSendMBps ?? l?.interfaceSendMBps ?? null,
      rttMs: c.rttMs,
      jitterMs: jitter,
      lossPct: c.lossPct,
      capacityMbps: c.capacityMbps ?? null,
      capacitySource: l?.capacitySource ?? '',
      clockOffsetMs: l?.clockOffsetMs ?? null,
      clockUncertaintyMs: l?.clockOffsetUncertaintyMs ?? null,
      bad: badReasons(c.connectionType, c.rttMs, c.lossPct, jitter),
    };
  });
  return { nodes, edges };
}

// edgeLabel is the live badge: MB/s · ms.
export function edgeLabel(e: TopoEdge): string {
  const mbps = e.mbps == null ? '–' : e.mbps >= 10 ? e.mbps.toFixed(0) : e.mbps.toFixed(2);
  return `${mbps} MB/s · ${e.rttMs.toFixed(2)} ms`;
}

// edgeTooltip lists everything measured about an edge.
export function edgeTooltip(e: TopoEdge, name: (id: string) => string): string {
  const lines = [
    `${name(e.source)} → ${name(e.sink)} (${e.type})`,
    `RTT ${e.rttMs.toFixed(3)} ms, jitter ${e.jitterMs == null ? '–' : e.jitterMs.toFixed(3) + ' ms'}, loss ${e.lossPct.toFixed(1)} %`,
    `capacity ${e.capacityMbps == null ? '–' : e.capacityMbps + ' Mbit/s'}${e.capacitySource ? ` (${e.capacitySource})` : ''}`,
    `usage ${e.mbps == null ? '–' : e.mbps.toFixed(3) + ' MB/s'} (Orrery), interface ${e.ifaceMBps == null ? '–' : e.ifaceMBps.toFixed(3) + ' MB/s'}`,
    `clock offset ${e.clockOffsetMs == null ? '–' : `${e.clockOffsetMs.toFixed(3)} ± ${(e.clockUncertaintyMs ?? 0).toFixed(3)} ms`}`,
  ];
  if (e.bad.length) lines.push('⚠ ' + e.bad.join(', '));
  return lines.join('\n');
}
