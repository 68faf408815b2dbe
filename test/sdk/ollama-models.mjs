// Drives Orrery's Ollama model routes with the official ollama npm client:
// a streamed pull, an unstreamed one, the list, a delete, the list again
// and a delete of what is gone; prints what it saw as JSON.
// Usage: node ollama-models.mjs HOST MODEL (MODEL as the registry names it)
import { Ollama } from 'ollama';

const [host, model] = process.argv.slice(2);
if (!host || !model) {
  console.error('usage: node ollama-models.mjs HOST MODEL');
  process.exit(2);
}
const ollama = new Ollama({ host });
const out = {};

const lines = [];
for await (const part of await ollama.pull({ model, stream: true })) {
  lines.push(part);
}
out.streamed = lines;
out.once = await ollama.pull({ model, stream: false });
const names = (list) => list.models.map((m) => m.name);
out.listed = names(await ollama.list());
const pulled = out.listed.find((n) => n.endsWith(model));
out.pulled = pulled ?? null;
out.deleted = pulled ? await ollama.delete({ model: pulled }) : null;
out.after = names(await ollama.list());
try {
  await ollama.delete({ model: pulled ?? model });
  out.again = null;
} catch (e) {
  out.again = { status: e.status_code ?? null, error: e.error ?? String(e) };
}
try {
  await ollama.pull({ model: 'no/such:model', stream: false });
  out.missing = null;
} catch (e) {
  out.missing = { status: e.status_code ?? null, error: e.error ?? String(e) };
}
console.log(JSON.stringify(out));
