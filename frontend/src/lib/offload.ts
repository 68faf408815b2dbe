// Where a rank's blocks went, as the Instances page shows it.
import { humanBytes } from './format';
import type { Offload } from './types';

// offloadText reads "12/16 blocks on Vulkan0 (llvmpipe)", or "CPU" for a
// rank with none on a GPU, or "–" before it has loaded. The device's name
// is ggml's; the driver's description is cut before its parenthesis
// ("llvmpipe (LLVM 15.0.6, 256 bits)" → "llvmpipe").
export function offloadText(o: Offload | undefined): string {
  if (!o) return '–';
  if (!o.device || (o.blocks === 0 && !o.head)) return 'CPU';
  const desc = o.device.description.split(' (')[0].trim();
  return `${o.blocks}/${o.total} blocks${o.head ? ' and the head' : ''} on ${o.device.name}${desc ? ` (${desc})` : ''}`;
}

// offloadDetail is the rest, for a tooltip: the memory on each side and
// why not every block is on the GPU.
export function offloadDetail(o: Offload | undefined): string {
  if (!o) return '';
  const parts: string[] = [];
  if (o.gpuBytes) parts.push(`${humanBytes(o.gpuBytes)} on the GPU`);
  if (o.cpuBytes) parts.push(`${humanBytes(o.cpuBytes)} on the CPU`);
  if (o.reason) parts.push(o.reason);
  return parts.join(' · ');
}
