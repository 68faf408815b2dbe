// Perfetto hand-off. ui.perfetto.dev takes a trace by URL only over HTTPS,
// so the page opens it and posts the trace: PING until it answers PONG,
// then {perfetto: {buffer, title}}. In the desktop window there is no
// popup to post to: the agent opens its own hand-off page (/perfetto/<id>)
// in the system browser instead.
import { inDesktop, sendJSON } from './api';

export const PERFETTO_ORIGIN = 'https://ui.perfetto.dev';

export async function viewInPerfetto(id: string, onStatus: (s: string) => void, timeoutMs = 30000): Promise<void> {
  if (inDesktop()) {
    await sendJSON('POST', `/v1/traces/${encodeURIComponent(id)}/open`, {});
    onStatus('Opened in your browser.');
    return;
  }
  // Open first, while the click still counts as a user gesture.
  const win = window.open(PERFETTO_ORIGIN);
  if (!win) throw new Error('the browser blocked the Perfetto window; allow popups for this page');
  onStatus('Loading the trace…');
  const r = await fetch(`/v1/traces/${encodeURIComponent(id)}/raw`);
  if (!r.ok) throw new Error(`GET /raw: ${r.status} ${r.statusText}`);
  const buffer = await r.arrayBuffer();
  onStatus('Waiting for Perfetto…');
  await new Promise<void>((resolve, reject) => {
    const ping = setInterval(() => {
      try {
        win.postMessage('PING', PERFETTO_ORIGIN);
      } catch {
        /* not loaded yet */
      }
    }, 50);
    const timer = setTimeout(() => {
      cleanup();
      reject(new Error(`Perfetto did not answer within ${timeoutMs / 1000} s`));
    }, timeoutMs);
    function cleanup() {
      clearInterval(ping);
      clearTimeout(timer);
      window.removeEventListener('message', onMessage);
    }
    function onMessage(ev: MessageEvent) {
      if (ev.origin !== PERFETTO_ORIGIN || ev.source !== win || ev.data !== 'PONG') return;
      cleanup();
      win!.postMessage({ perfetto: { buffer, title: `Orrery ${id}` } }, PERFETTO_ORIGIN);
      resolve();
    }
    window.addEventListener('message', onMessage);
  });
  onStatus(`Sent to Perfetto (${buffer.byteLength} bytes).`);
}
