// Drives Orrery's APIs with LangChain JS, given only the base URL:
// @langchain/openai's ChatOpenAI (a chat, a stream, a forced tool call
// bound from a zod schema) and @langchain/ollama's ChatOllama (a chat and a
// stream); prints what it saw as JSON. Random weights: the grammar makes
// the tool call. Usage: node langchain.mjs BASE MODEL (BASE: http://host:port)
import { ChatOpenAI } from '@langchain/openai';
import { ChatOllama } from '@langchain/ollama';
import { tool } from '@langchain/core/tools';
import { z } from 'zod';

const [base, model] = process.argv.slice(2);
if (!base || !model) {
  console.error('usage: node langchain.mjs BASE MODEL');
  process.exit(2);
}
const out = {};
const openai = new ChatOpenAI({ model, apiKey: 'unused', configuration: { baseURL: `${base}/v1` }, maxTokens: 8, temperature: 0 });
const once = await openai.invoke('hello from langchain');
out.openai = { text: once.content, finish: once.response_metadata?.finish_reason ?? null, tokens: once.usage_metadata?.output_tokens ?? null };
let streamed = '';
let chunks = 0;
for await (const c of await openai.stream('hello from langchain')) {
  streamed += c.content;
  chunks++;
}
out.openaiStream = { text: streamed, chunks };
const weather = tool(async ({ city }) => `sunny in ${city}`, {
  name: 'get_weather',
  description: 'Weather in a city',
  schema: z.object({ city: z.string().max(10), unit: z.enum(['c', 'f']) }),
});
const withTools = new ChatOpenAI({ model, apiKey: 'unused', configuration: { baseURL: `${base}/v1` }, maxTokens: 200, temperature: 1 })
  .bindTools([weather], { tool_choice: 'get_weather', parallel_tool_calls: false });
const called = await withTools.invoke('what is the weather in Oslo?');
out.toolCalls = called.tool_calls?.map((c) => ({ name: c.name, args: c.args })) ?? [];

const ollama = new ChatOllama({ model, baseUrl: base, numPredict: 8, temperature: 0 });
const o = await ollama.invoke('hello from langchain');
out.ollama = { text: o.content, tokens: o.usage_metadata?.output_tokens ?? null };
let ostreamed = '';
for await (const c of await ollama.stream('hello from langchain')) {
  ostreamed += c.content;
}
out.ollamaStream = { text: ostreamed };
console.log(JSON.stringify(out));
