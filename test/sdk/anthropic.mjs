// Drives Orrery's Anthropic Messages API with the official
// @anthropic-ai/sdk: a message, a streamed message with a forced tool call
// (tool_choice any) assembled by the SDK's stream helper, the call's
// result sent back, and a request without max_tokens; prints what it saw
// as JSON. Usage: node anthropic.mjs BASE_URL MODEL
import Anthropic from '@anthropic-ai/sdk';

const [baseURL, model] = process.argv.slice(2);
if (!baseURL || !model) {
  console.error('usage: node anthropic.mjs BASE_URL MODEL');
  process.exit(2);
}
const client = new Anthropic({ baseURL, apiKey: 'unused', maxRetries: 0, timeout: 60_000 });
const ask = [{ role: 'user', content: 'what is the weather in Oslo?' }];

const plain = await client.messages.create({ model, max_tokens: 12, temperature: 0, system: 'Be brief.', messages: ask });

const tools = [{
  name: 'get_weather', description: 'Weather in a city',
  input_schema: { type: 'object', properties: { city: { type: 'string', maxLength: 10 }, unit: { type: 'string', enum: ['c', 'f'] } },
    required: ['city', 'unit'], additionalProperties: false },
}];
const stream = client.messages.stream({
  model, max_tokens: 200, temperature: 1, messages: ask, tools,
  tool_choice: { type: 'any', disable_parallel_tool_use: true },
});
const events = [];
stream.on('streamEvent', (e) => events.push(e.type));
const final = await stream.finalMessage();
const use = final.content.find((b) => b.type === 'tool_use');
const answer = await client.messages.create({
  model, max_tokens: 6, temperature: 0, tools,
  messages: [...ask, { role: 'assistant', content: final.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: use?.id ?? 'x', content: '3 degrees' }] }],
});
let missing = null;
try {
  await client.messages.create({ model, messages: ask });
} catch (e) {
  missing = { status: e.status, type: e.error?.error?.type, message: e.error?.error?.message };
}
let image = null;
try {
  await client.messages.create({ model, max_tokens: 4, messages: [{ role: 'user', content: [{ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'aGk=' } }] }] });
} catch (e) {
  image = { status: e.status, type: e.error?.error?.type, message: e.error?.error?.message };
}

console.log(JSON.stringify({
  plain: { content: plain.content, stopReason: plain.stop_reason, usage: plain.usage, id: plain.id },
  tool: { content: final.content, stopReason: final.stop_reason, events },
  answer: { stopReason: answer.stop_reason, inputTokens: answer.usage.input_tokens, toolInputTokens: final.usage?.input_tokens },
  missing, image,
}));
