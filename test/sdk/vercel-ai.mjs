// Drives Orrery's OpenAI-compatible API with the Vercel AI SDK (ai, with
// @ai-sdk/openai-compatible), given only the base URL: streamed text,
// generated text, and a tool call the model must make (toolChoice naming
// it; random weights, so the grammar makes it); prints what it saw as JSON.
// Usage: node vercel-ai.mjs BASE MODEL (BASE: http://host:port)
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, streamText, tool, jsonSchema } from 'ai';

const [base, model] = process.argv.slice(2);
if (!base || !model) {
  console.error('usage: node vercel-ai.mjs BASE MODEL');
  process.exit(2);
}
const provider = createOpenAICompatible({ name: 'orrery', baseURL: `${base}/v1`, includeUsage: true });
const out = {};
const s = streamText({ model: provider(model), prompt: 'hello from the AI SDK', maxOutputTokens: 8, temperature: 0 });
let text = '';
let parts = 0;
for await (const delta of s.textStream) {
  text += delta;
  parts++;
}
out.stream = { text, parts, finish: await s.finishReason, usage: await s.usage };
const g = await generateText({ model: provider(model), prompt: 'hello from the AI SDK', maxOutputTokens: 8, temperature: 0 });
out.generate = { text: g.text, finish: g.finishReason, outputTokens: g.usage?.outputTokens ?? null };
const t = await generateText({
  model: provider(model),
  prompt: 'what is the weather in Oslo?',
  maxOutputTokens: 200,
  temperature: 1,
  seed: 4,
  tools: {
    get_weather: tool({
      description: 'Weather in a city',
      inputSchema: jsonSchema({
        type: 'object',
        properties: { city: { type: 'string', maxLength: 10 }, unit: { type: 'string', enum: ['c', 'f'] } },
        required: ['city', 'unit'],
        additionalProperties: false,
      }),
    }),
  },
  toolChoice: { type: 'tool', toolName: 'get_weather' },
});
out.toolCalls = t.toolCalls.map((c) => ({ name: c.toolName, input: c.input }));
out.toolFinish = t.finishReason;
console.log(JSON.stringify(out));
