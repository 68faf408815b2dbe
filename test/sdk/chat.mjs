// Streams one chat completion from an Orrery agent with the official
// openai SDK, then makes a non-streaming one, lists the models, and makes
// legacy completions (with logprobs), streamed and not; prints what it saw
// as JSON. Usage: node chat.mjs BASE_URL MODEL
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import { z } from 'zod';

const [baseURL, model] = process.argv.slice(2);
if (!baseURL || !model) {
  console.error('usage: node chat.mjs BASE_URL MODEL');
  process.exit(2);
}
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });

const { data: stream, response } = await client.chat.completions
  .create({
    model,
    messages: [{ role: 'user', content: 'hello from the openai sdk' }],
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: 16,
    temperature: 0,
  })
  .withResponse();
let text = '';
let chunks = 0;
let finishReason = null;
let usage = null;
for await (const chunk of stream) {
  chunks++;
  const choice = chunk.choices[0];
  if (choice?.delta?.content) text += choice.delta.content;
  if (choice?.finish_reason) finishReason = choice.finish_reason;
  if (chunk.usage) usage = chunk.usage;
}

const once = await client.chat.completions.create({
  model,
  messages: [{ role: 'user', content: 'hello from the openai sdk' }],
  max_tokens: 16,
  temperature: 0,
});
const models = [];
for await (const m of client.models.list()) models.push(m.id);

const legacy = await client.completions.create({
  model, prompt: 'hello from the openai sdk', max_tokens: 8, temperature: 0, logprobs: 2,
});
let legacyStreamText = '';
let legacyStreamLogprobs = 0;
const legacyStream = await client.completions.create({
  model, prompt: 'hello from the openai sdk', max_tokens: 8, temperature: 0, logprobs: 2, stream: true,
});
for await (const chunk of legacyStream) {
  legacyStreamText += chunk.choices[0]?.text ?? '';
  legacyStreamLogprobs += chunk.choices[0]?.logprobs?.token_logprobs?.length ?? 0;
}

// Structured output: the SDK's parse() with a zod schema. The model has
// random weights, so only the grammar makes its answer parse. Every value
// is bounded (an enum, short strings, an integer) so that it ends.
const Weather = z.object({
  city: z.string().max(12),
  unit: z.enum(['celsius', 'fahrenheit']),
  days: z.number().int(),
  tags: z.array(z.string().max(4)).max(2),
  note: z.string().max(6).nullable(),
});
const structured = [];
for (const seed of [1, 2, 3]) {
  const parsed = await client.chat.completions.parse({
    model,
    messages: [{ role: 'user', content: 'the weather in Oslo, as JSON' }],
    response_format: zodResponseFormat(Weather, 'weather'),
    max_tokens: 300, temperature: 1, seed,
  });
  const msg = parsed.choices[0].message;
  structured.push({ content: msg.content, parsed: msg.parsed, finishReason: parsed.choices[0].finish_reason });
}
// Tools: a forced call (tool_choice "required"), its result sent back,
// a streamed call, and a named one. Random weights again: the grammar
// makes the calls, the chat template renders them back.
const tools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city',
    parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, unit: { type: 'string', enum: ['c', 'f'] } },
      required: ['city', 'unit'], additionalProperties: false } } },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: {} } } },
];
const ask = [{ role: 'user', content: 'what is the weather in Oslo?' }];
const forced = await client.chat.completions.create({
  model, messages: ask, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200, temperature: 1, seed: 4,
});
const call = forced.choices[0].message.tool_calls?.[0];
const roundTrip = await client.chat.completions.create({
  model, tools, max_tokens: 6, temperature: 0,
  messages: [...ask, forced.choices[0].message, { role: 'tool', tool_call_id: call?.id ?? 'x', content: '{"temp": 3}' }],
});
const streamCalls = {};
let streamFinish = null;
const callStream = await client.chat.completions.create({
  model, messages: ask, tools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 200, temperature: 1, seed: 5, stream: true,
});
for await (const chunk of callStream) {
  const ch = chunk.choices[0];
  for (const tc of ch?.delta?.tool_calls ?? []) {
    const acc = (streamCalls[tc.index] ??= { id: '', name: '', arguments: '' });
    if (tc.id) acc.id = tc.id;
    if (tc.function?.name) acc.name += tc.function.name;
    if (tc.function?.arguments) acc.arguments += tc.function.arguments;
  }
  if (ch?.finish_reason) streamFinish = ch.finish_reason;
}
const named = await client.chat.completions.create({
  model, messages: ask, tools, tool_choice: { type: 'function', function: { name: 'get_time' } }, max_tokens: 100, temperature: 1, seed: 6,
});
const toolResults = {
  forced: { message: forced.choices[0].message, finishReason: forced.choices[0].finish_reason },
  roundTrip: { finishReason: roundTrip.choices[0].finish_reason, promptTokens: roundTrip.usage.prompt_tokens, forcedPromptTokens: forced.usage.prompt_tokens },
  stream: { calls: Object.values(streamCalls), finishReason: streamFinish },
  named: named.choices[0].message.tool_calls?.map((c) => c.function.name) ?? [],
};

let badSchema = null;
try {
  await client.chat.completions.create({
    model, messages: [{ role: 'user', content: 'x' }], max_tokens: 4,
    response_format: { type: 'json_schema', json_schema: { name: 'p', schema: { type: 'object', properties: { a: { type: 'string', pattern: '^a' } } } } },
  });
} catch (e) {
  badSchema = { status: e.status, message: e.error?.message ?? String(e) };
}

console.log(JSON.stringify({
  structured, badSchema, tools: toolResults,
  traceId: response.headers.get('x-orrery-trace-id'),
  contentType: response.headers.get('content-type'),
  chunks, text, finishReason, usage,
  nonStreaming: { text: once.choices[0].message.content, usage: once.usage, finishReason: once.choices[0].finish_reason },
  models,
  legacy: {
    text: legacy.choices[0].text, usage: legacy.usage, logprobs: legacy.choices[0].logprobs,
    streamText: legacyStreamText, streamLogprobs: legacyStreamLogprobs,
  },
}));
