// phasesFromStats turns a trace's stats into the detail page's summary:
// the phases with their share of the wall time (for bars), and per rank
// its compute vs comms share, with the slowest rank called out.
import type { TraceStats } from './types';

export interface PhaseBar {
  name: string;
  totalUs: number;
  count: number;
  share: number; // of the wall time, 0..1 (capped at 1)
}

export interface RankShare {
  rank: string;
  computeUs: number;
  commsUs: number;
  computeShare: number;
  commsShare: number;
  busyUs: number;
  slowest: boolean;
}

export function phasesFromStats(st: TraceStats): { phases: PhaseBar[]; ranks: RankShare[]; slowest: string | null } {
  const wall = Math.max(st.totalWallTimeUs, 1);
  // Phases are the top-level categories (no '/').
  const phases = Object.entries(st.byCategory)
    .filter(([cat]) => !cat.includes('/'))
    .map(([name, c]) => ({ name, totalUs: c.totalUs, count: c.count, share: Math.min(c.totalUs / wall, 1) }))
    .sort((a, b) => b.totalUs - a.totalUs || a.name.localeCompare(b.name));
  const shares = st.byRankShare ?? {};
  const ranks = Object.keys(st.byRank ?? {})
    .sort((a, b) => Number(a) - Number(b))
    .map((rank): RankShare => {
      const s = shares[rank] ?? { computeUs: 0, commsUs: 0, computeShare: 0, commsShare: 0 };
      return { rank, computeUs: s.computeUs, commsUs: s.commsUs, computeShare: s.computeShare, commsShare: s.commsShare, busyUs: s.computeUs + s.commsUs, slowest: false };
    });
  let slowest: string | null = null;
  if (ranks.length > 1) {
    // The slowest rank is the one with the most compute: the pipeline
    // waits for it.
    const top = ranks.reduce((a, b) => (b.computeUs > a.computeUs ? b : a));
    if (top.computeUs > 0) {
      top.slowest = true;
      slowest = top.rank;
    }
  }
  return { phases, ranks, slowest };
}
