// The agent's HTTP API, as the pages use it. Paths are relative to the
// page's origin: the agent serves the UI, in a browser and in the desktop
// window alike.

export class APIError extends Error {
  constructor(public status: number, message: string) {
    super(message);
  }
}

async function check(r: Response, what: string): Promise<Response> {
  if (r.ok) return r;
  if (r.status === 401 && r.headers.get('WWW-Authenticate')?.startsWith('Bearer')) {
    // An agent reached from another machine wants its token (its login
    // cookie expired or was never set): its login form sets it.
    location.assign('/auth/login');
  }
  let msg = `${r.status} ${r.statusText}`;
  try {
    const body = await r.json();
    const e = body?.error;
    msg = typeof e === 'string' ? e : e?.message ?? msg;
  } catch {
    /* not JSON: keep the status line */
  }
  throw new APIError(r.status, `${what}: ${msg}`);
}

export async function getJSON<T>(path: string, signal?: AbortSignal): Promise<T> {
  const r = await fetch(path, { signal, headers: { Accept: 'application/json' } });
  return (await check(r, `GET ${path}`)).json() as Promise<T>;
}

export async function sendJSON<T>(method: string, path: string, body?: unknown): Promise<T> {
  const r = await fetch(path, {
    method,
    headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  return (await check(r, `${method} ${path}`)).json() as Promise<T>;
}

// inDesktop is true in the Wails window, where window.open cannot reach
// the system browser: links to the outside go through the agent.
export function inDesktop(): boolean {
  const w = window as unknown as { runtime?: { BrowserOpenURL?: unknown }; wails?: unknown };
  return typeof w.runtime?.BrowserOpenURL === 'function' || w.wails !== undefined || location.hostname === 'wails.localhost' || location.protocol === 'wails:';
}

export function openExternal(url: string): void {
  const w = window as unknown as { runtime?: { BrowserOpenURL?: (u: string) => void } };
  if (typeof w.runtime?.BrowserOpenURL === 'function') w.runtime.BrowserOpenURL(url);
  else window.open(url, '_blank', 'noopener');
}

// sseLines reads a text/event-stream body and calls onData with each
// event's data.
export async function sseLines(body: ReadableStream<Uint8Array>, onData: (data: string) => void): Promise<void> {
  const reader = body.pipeThrough(new TextDecoderStream() as unknown as ReadableWritablePair<string, Uint8Array>).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value;
    let i: number;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      const data = block
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, ''))
        .join('\n');
      if (data) onData(data);
    }
  }
}
