import { describe, expect, it } from 'vitest';
import { offloadDetail, offloadText } from '../offload';
import type { GPUDevice } from '../types';

const lavapipe: GPUDevice = {
  id: '6d657361', library: 'Vulkan', name: 'Vulkan0', description: 'llvmpipe (LLVM 15.0.6, 256 bits)',
  totalBytes: 2 ** 31, freeBytes: 2 ** 31, software: true,
};

describe('offloadText', () => {
  it('names the blocks on the GPU, the device and its driver', () => {
    expect(offloadText({ device: lavapipe, blocks: 12, total: 16 })).toBe('12/16 blocks on Vulkan0 (llvmpipe)');
    expect(offloadText({ device: lavapipe, blocks: 16, total: 16, head: true })).toBe('16/16 blocks and the head on Vulkan0 (llvmpipe)');
    expect(offloadText({ device: { ...lavapipe, name: 'CUDA0', description: 'NVIDIA GeForce RTX 4090' }, blocks: 3, total: 8 }))
      .toBe('3/8 blocks on CUDA0 (NVIDIA GeForce RTX 4090)');
  });
  it('says CPU for a rank with no block on a GPU, and nothing before it loaded', () => {
    expect(offloadText({ blocks: 0, total: 8, reason: '--gpu-layers 0' })).toBe('CPU');
    expect(offloadText({ device: lavapipe, blocks: 0, total: 8 })).toBe('CPU');
    expect(offloadText(undefined)).toBe('–');
  });
});

describe('offloadDetail', () => {
  it('gives the memory on each side and the reason', () => {
    expect(offloadDetail({ device: lavapipe, blocks: 6, total: 8, gpuBytes: 3 * 2 ** 20, cpuBytes: 2 ** 20, reason: '6 of 9 fit Vulkan0\'s 2.00 GiB free' }))
      .toBe('3.0 MiB on the GPU · 1.0 MiB on the CPU · 6 of 9 fit Vulkan0\'s 2.00 GiB free');
    expect(offloadDetail(undefined)).toBe('');
  });
});
