import type { Instance, ShardRange } from './types';

// One pipeline stage of an instance's plan: its blocks and its ranks (a
// tensor-parallel group, or one rank).
export interface PlanStage {
  stage: number;
  firstLayer: number;
  lastLayer: number;
  ranks: ShardRange[];
}

// planGrid lays an instance's ranks out as its pipeline × tensor grid: a
// row per stage, a column per rank of the stage's group (rank r: stage
// r / T, column r mod T).
export function planGrid(inst: Pick<Instance, 'ranks' | 'tensor'>): PlanStage[] {
  const t = Math.max(inst.tensor ?? 1, 1);
  const out: PlanStage[] = [];
  for (const sr of [...inst.ranks].sort((a, b) => a.rank - b.rank)) {
    const s = Math.floor(sr.rank / t);
    if (!out[s]) out[s] = { stage: s, firstLayer: sr.firstLayer, lastLayer: sr.lastLayer, ranks: [] };
    out[s].ranks.push(sr);
  }
  return out.filter(Boolean);
}
