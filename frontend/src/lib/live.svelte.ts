// The live view of the cluster every page reads: the state, the cluster
// status and discovery's report. The event stream (/events/stream) says
// when something changed; the state is then fetched again, at most every
// REFRESH_MS, so that a busy cluster costs the page a few requests a
// second, not one per event. A slow poll backs the stream up, in case a
// proxy buffers it.
import { getJSON } from './api';
import type { ClusterStatus, DiscoveryReport, State } from './types';

export const REFRESH_MS = 500;
const POLL_MS = 5000;

class Live {
  state = $state<State | null>(null);
  cluster = $state<ClusterStatus | null>(null);
  discovery = $state<DiscoveryReport | null>(null);
  error = $state<string | null>(null);
  streaming = $state(false);
  events = $state(0); // events seen on the stream
  updatedAt = $state<Date | null>(null);

  private timer: ReturnType<typeof setTimeout> | null = null;
  private inflight = false;
  private again = false;
  private es: EventSource | null = null;

  start(): void {
    if (this.es) return;
    this.refresh();
    this.es = new EventSource('/events/stream');
    this.es.onopen = () => (this.streaming = true);
    this.es.onerror = () => (this.streaming = false); // EventSource reconnects by itself
    this.es.onmessage = () => {
      this.events++;
      this.schedule();
    };
    setInterval(() => this.refresh(), POLL_MS);
  }

  schedule(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = null;
      this.refresh();
    }, REFRESH_MS);
  }

  async refresh(): Promise<void> {
    if (this.inflight) {
      this.again = true;
      return;
    }
    this.inflight = true;
    try {
      const [st, cl, disc] = await Promise.all([
        getJSON<State>('/state'),
        getJSON<ClusterStatus>('/cluster'),
        getJSON<DiscoveryReport>('/state/discovery').catch(() => null),
      ]);
      this.state = st;
      this.cluster = cl;
      this.discovery = disc;
      this.error = null;
      this.updatedAt = new Date();
    } catch (e) {
      this.error = `cannot reach the agent: ${(e as Error).message}`;
    } finally {
      this.inflight = false;
      if (this.again) {
        this.again = false;
        this.schedule();
      }
    }
  }
}

export const live = new Live();
