// The parts of the agent's JSON this UI reads (see the README's API table).
// A value the OS does not report is absent (as in exo's shapes): the
// optional number fields below are unknown when undefined (or null, as older
// agents sent).

export interface Bytes { inBytes: number }

export interface NodeIdentity {
  nodeId: string; friendlyName: string; modelId: string; chipId: string; osName: string;
  cpuCount: number; ramTotal?: Bytes | null;
  gpus?: GPUDevice[]; // absent: none, or the node's speed not measured yet
}
// A GPU as ggml lists it (runnerapi.Device): its memory when the node
// measured its speed (Metal: the working-set limit).
export interface GPUDevice {
  id: string; library: string; name: string; description: string; totalBytes: number; freeBytes: number;
  unified?: boolean; software?: boolean;
}
export interface NodeMemory {
  ramTotal?: Bytes | null; ramAvailable?: Bytes | null; swapTotal?: Bytes | null; swapAvailable?: Bytes | null; sampledAt: string;
}
export interface NodeSystem {
  cpuUsage?: number | null; gpuUsage?: number | null; temp?: number | null; sysPower?: number | null; sampledAt: string;
}
export interface NetworkInterface {
  name: string; kind: string; addresses: string[]; mtu: number; up: boolean; speedMbps?: number | null;
  sendMBps?: number | null; recvMBps?: number | null;
}
export interface LinkTelemetry {
  peer: string; sourceInterface: string; connectionType: string; rttMs: number; rttEwmaMs: number; rttMinMs: number;
  jitterMs: number; lossPct: number; probes: number; clockOffsetMs: number; clockOffsetUncertaintyMs: number;
  capacityMbps?: number | null; capacitySource: string; interfaceSendMBps?: number | null; peerSendMBps?: number | null;
  peerRecvMBps?: number | null;
}
export interface Connection {
  source: string; sourceInterface: string; sink: string; sinkAddress: string; connectionType: string;
  rttMs: number; lossPct: number; capacityMbps?: number | null; sendMBps?: number | null; interfaceSendMBps?: number | null;
}
export interface ShardRange {
  rank: number; nodeId: string; firstLayer: number; lastLayer: number;
  // Memory placement expected the rank to use; a tensor-parallel rank's slice of each block.
  needBytes?: number; slice?: string;
}
export interface Instance {
  instanceId: string; modelId: string; nodeId: string; ranks: ShardRange[]; createdAt: string; status: string; error?: string;
  // Keep-alive: pinned ones stay until deleted; the others unload at expiresAt (absent while requests run).
  pinned?: boolean; keepAliveMs?: number; expiresAt?: string; active?: number;
  // Placed from the hub: the ranks pull their own tensors from this file.
  source?: ModelSource;
  // > 1: the ranks are tensor-parallel groups of this many (each a slice of its stage's blocks), one per pipeline stage.
  tensor?: number;
  // The cost model's prediction for the plan it was placed on.
  prediction?: Prediction;
  // Blocks of each rank on its node's GPU as placed: "auto", or at most this many (absent: each node's default).
  gpuLayers?: 'auto' | number;
}
export interface Prediction {
  plan: string; pipeline: number; tensor: number; nodes: string[];
  decodeMsPerToken: number; commMsPerToken: number; decodeTokPerSec: number;
  prefillMs: number; prefillTokens: number; prefillTokPerSec: number;
  fits: boolean; error?: string; assumed?: string[]; measured?: string[];
}
export interface ModelSource { ref: string; file: string; size: number; sha256: string; model: string }
export interface Transfer { from: string; bytes: Bytes; total: Bytes; mbps?: number | null; etaSeconds?: number | null }
export interface Runner {
  runnerId: string; instanceId: string; nodeId: string; rank: number; status: string;
  layersLoaded: number; totalLayers: number; error?: string; pid?: number; transfer?: Transfer; since: string;
  // Rank 0's decode in its last request, and a tensor-parallel leader's mean all-reduce in it.
  decodeTokPerSec?: number; reduceMicros?: number;
  // Where its blocks went once loaded: how many on which GPU, the rest on the CPU.
  offload?: Offload;
}
// A GPU as ggml lists it (engine/runnerapi.Device).
export interface GPUDevice {
  id: string; library: string; name: string; description: string; totalBytes: number; freeBytes: number;
  unified?: boolean; software?: boolean;
}
// Where a loaded rank's blocks went (engine/runnerapi.Offload): no device, every block on the CPU.
export interface Offload {
  device?: GPUDevice; reason?: string; blocks: number; total: number; head?: boolean; gpuBytes?: number; cpuBytes?: number;
}
export interface ModelInfo {
  id: string; source: string; size?: Bytes | null; arch?: string; layers?: number; quantization?: string; error?: string;
  // An Ollama model's params layer: what requests that do not set them get.
  defaults?: { temperature?: number; topP?: number; topK?: number; numPredict?: number; stop?: string[] };
}

export interface State {
  lastEventAppliedIdx: number;
  nodeIdentities: Record<string, NodeIdentity>;
  nodeMemory: Record<string, NodeMemory>;
  nodeSystem: Record<string, NodeSystem>;
  nodeNetwork: Record<string, { interfaces: NetworkInterface[]; sampledAt: string }>;
  nodeLinkTelemetry: Record<string, { links: LinkTelemetry[]; sampledAt: string }>;
  nodeModels: Record<string, { models: ModelInfo[] }>;
  instances: Record<string, Instance>;
  runners: Record<string, Runner>;
  topology: { nodes: { nodeId: string }[]; connections: Connection[] };
  downloads?: Record<string, Download>;
}

export interface Download {
  id: string; nodeId: string; ref: string; model?: string; status: string; error?: string;
  files: { name: string; bytes: number; size: number }[]; bytes: number; size: number;
  mbps?: number; etaSeconds?: number; resumed?: number; retries?: number; stalls?: number; startedAt: string; updatedAt: string;
}

export interface ClusterStatus { nodeId: string; masterId: string; isMaster: boolean; members: { nodeId: string }[] }

export interface DiscoveryProblem { code: string; message: string; hint: string }
export interface DiscoveryReport {
  mode: { mdns: boolean; loopback: boolean; static: boolean }; peersFound: number; multicastInterfaces: string[]; problems: DiscoveryProblem[] | null;
}

export interface TraceMeta {
  taskId: string; createdAt: string; fileSize: number; kind?: string; partial?: boolean; missingRanks?: number[];
  spans?: number; nodes?: number; error?: string;
}

export interface CategoryStats { totalUs: number; count: number; minUs: number; maxUs: number; avgUs: number }
export interface ShareStats { computeUs: number; commsUs: number; computeShare: number; commsShare: number }
export interface TraceStats {
  taskId: string; totalWallTimeUs: number;
  byCategory: Record<string, CategoryStats>;
  byRank: Record<string, { byCategory: Record<string, CategoryStats> }>;
  // wallUs: the wall time a phase's spans cover (overlaps once); totalUs sums them over ranks.
  phases?: Record<string, CategoryStats & { wallUs?: number; share?: number }>;
  byRankShare?: Record<string, ShareStats>;
}
