// Number formatting shared by the pages.
import type { GPUDevice } from './types';

export function gib(bytes: number | null | undefined): string {
  if (bytes == null) return '–';
  return (bytes / 2 ** 30).toFixed(1) + ' GiB';
}

export function humanBytes(n: number | null | undefined): string {
  if (n == null) return '–';
  if (n >= 2 ** 30) return (n / 2 ** 30).toFixed(1) + ' GiB';
  if (n >= 2 ** 20) return (n / 2 ** 20).toFixed(1) + ' MiB';
  if (n >= 2 ** 10) return (n / 2 ** 10).toFixed(1) + ' KiB';
  return n + ' B';
}

export function pct(x: number | null | undefined): string {
  return x == null ? '–' : Math.round(x * 100) + ' %';
}

export function ms(us: number): string {
  const m = us / 1000;
  return m >= 100 ? m.toFixed(0) + ' ms' : m >= 1 ? m.toFixed(1) + ' ms' : m.toFixed(3) + ' ms';
}

export function num(x: number | null | undefined, digits = 1, unit = ''): string {
  return x == null ? '–' : x.toFixed(digits) + unit;
}

export function short(id: string): string {
  return id.slice(0, 8);
}

// counterValue formats a trace counter's value in its unit: bytes (and
// "bytes sent" and the like) as B/KiB/MiB/GiB, rates with theirs, a
// unitless count compactly.
export function counterValue(v: number, unit?: string): string {
  if (unit === 'bytes' || unit?.startsWith('bytes ')) return humanBytes(Math.round(v)) + unit.slice(5);
  const n = Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 10 ? v.toFixed(1) : v.toFixed(2);
  return unit ? `${n} ${unit}` : n;
}

// gpuLines describes a GPU in two short lines: what it is (the library
// that computes on it, and the driver's description, else ggml's name),
// then its memory (free of total, as listed when the node measured its
// speed) and whether that is the system's RAM (unified) or the device
// computes on the CPU (software: Mesa's lavapipe).
export function gpuLines(d: GPUDevice): [string, string] {
  const what = `${d.library} · ${d.description || d.name}`;
  const notes = [d.unified ? 'unified' : '', d.software ? 'software' : ''].filter(Boolean);
  const mem = `free ${(d.freeBytes / 2 ** 30).toFixed(1)} of ${gib(d.totalBytes)}`;
  return [what, [mem, ...notes].join(' · ')];
}

// gpuCard is what a node's card shows of its GPUs: the first one's two
// lines (with how many more there are), and a tooltip listing each; no
// lines for a node that lists none.
export function gpuCard(gpus: GPUDevice[]): { lines: string[]; title: string } {
  if (!gpus.length) return { lines: [], title: '' };
  const [what, mem] = gpuLines(gpus[0]);
  const more = gpus.length > 1 ? ` (+${gpus.length - 1} more)` : '';
  return {
    lines: ['GPU ' + what + more, mem],
    title: gpus.map((d) => `${d.name}: ${gpuLines(d).join(', ')}`).join('\n'),
  };
}

// RankDevices is what a placement rank says of its node's GPU
// (placement.Rank): the device, its blocks there and on the CPU, and the
// device memory they take.
export interface RankDevices {
  gpu?: GPUDevice; gpuBlocks?: number; cpuBlocks?: number; gpuHead?: boolean; gpuNeedBytes?: number;
}

// rankDevices reads "3 blocks and the head on CUDA0 (2.1 GiB), 5 on the
// CPU"; "" for a rank whose node has no GPU.
export function rankDevices(r: RankDevices): string {
  if (!r.gpu) return '';
  const on = r.gpuBlocks ?? 0, off = r.cpuBlocks ?? 0;
  const gpu = `${on} block${on === 1 ? '' : 's'}${r.gpuHead ? ' and the head' : ''} on ${r.gpu.name} (${gib(r.gpuNeedBytes ?? 0)})`;
  return off ? `${gpu}, ${off} on the CPU` : gpu;
}
