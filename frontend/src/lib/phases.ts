// phasesFromStats turns a trace's stats into the detail page's summary:
// the phases with their share of the wall time (for bars), and per rank
// its compute vs comms share, with the slowest rank called out.
import type { TraceStats } from './types';

export interface PhaseBar {
  name: string;
  // wallUs is the wall time the phase's spans cover (overlapping spans of
  // several ranks once); totalUs sums them over ranks.
  wallUs: number;
  totalUs: number;
  count: number;
  share: number; // wallUs of the trace's wall time, 0..1
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
    .map(([name, c]) => {
      // Traces from before wallUs, or exo's: the sum, capped at the wall.
      const wallUs = st.phases?.[name]?.wallUs ?? Math.min(c.totalUs, wall);
      return { name, wallUs, totalUs: c.totalUs, count: c.count, share: Math.min(wallUs / wall, 1) };
    })
    .sort((a, b) => b.wallUs - a.wallUs || a.name.localeCompare(b.name));
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
