// Drives Orrery's Ollama API with the official ollama npm client: a
// streamed chat, the same chat unstreamed, a generate, a chat whose
// format is a JSON Schema, the model lists, show and version, and a
// missing model; prints what it saw as JSON. Usage: node ollama.mjs HOST MODEL
import { Ollama } from 'ollama';

const [host, model] = process.argv.slice(2);
if (!host || !model) {
  console.error('usage: node ollama.mjs HOST MODEL');
  process.exit(2);
}
const ollama = new Ollama({ host });
const messages = [{ role: 'user', content: 'hello from the ollama client' }];
const options = { num_predict: 12, temperature: 0 };

const stream = await ollama.chat({ model, messages, stream: true, options });
let text = '';
let parts = 0;
let last = null;
for await (const part of stream) {
  parts++;
  text += part.message.content;
  last = part;
}
const once = await ollama.chat({ model, messages, options });
const gen = await ollama.generate({ model, prompt: 'hello from the ollama client', options: { num_predict: 8, temperature: 0 } });
const format = {
  type: 'object',
  properties: { ok: { type: 'boolean' }, n: { type: 'integer', minimum: 0, maximum: 99 }, word: { type: 'string', maxLength: 5 } },
  required: ['ok', 'n', 'word'],
};
const structured = await ollama.chat({ model, messages, format, options: { temperature: 1, seed: 3, num_predict: 120 } });
const load = await ollama.generate({ model, prompt: '' });
const tags = await ollama.list();
const ps = await ollama.ps();
const show = await ollama.show({ model });
const version = await ollama.version();
let notFound = null;
try {
  await ollama.chat({ model: 'no-such-model', messages });
} catch (e) {
  notFound = { status: e.status_code, error: e.error };
}
let badFormat = null;
try {
  await ollama.chat({ model, messages, format: { type: 'string', pattern: 'x' } });
} catch (e) {
  badFormat = { status: e.status_code, error: e.error };
}

console.log(JSON.stringify({
  stream: { text, parts, last },
  once: { text: once.message.content, done: once.done, doneReason: once.done_reason, evalCount: once.eval_count, promptEvalCount: once.prompt_eval_count },
  generate: { text: gen.response, done: gen.done, evalCount: gen.eval_count },
  structured: structured.message.content,
  load: { done: load.done, doneReason: load.done_reason },
  tags: tags.models.map((m) => ({ name: m.name, family: m.details.family, format: m.details.format })),
  ps: ps.models.map((m) => ({ name: m.name, expiresAt: m.expires_at })),
  show: { family: show.details?.family, arch: show.model_info?.['general.architecture'] },
  version: version.version,
  notFound, badFormat,
}));
