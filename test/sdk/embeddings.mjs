// Drives Orrery's embedding routes with real clients, given only the base
// URL: the openai SDK (its default base64 encoding), LangChain JS's
// OpenAIEmbeddings and OllamaEmbeddings, and the ollama client's embed;
// prints each one's vectors as JSON. Usage: node embeddings.mjs BASE MODEL
import OpenAI from 'openai';
import { OpenAIEmbeddings } from '@langchain/openai';
import { OllamaEmbeddings } from '@langchain/ollama';
import { Ollama } from 'ollama';

const [base, model] = process.argv.slice(2);
if (!base || !model) {
  console.error('usage: node embeddings.mjs BASE MODEL');
  process.exit(2);
}
const texts = ['the first text', 'a second text'];
const out = {};
const client = new OpenAI({ apiKey: 'unused', baseURL: `${base}/v1` });
const r = await client.embeddings.create({ model, input: texts });
out.openai = r.data.map((d) => d.embedding);
out.openaiUsage = r.usage.prompt_tokens;
const lcOpenAI = new OpenAIEmbeddings({ model, apiKey: 'unused', configuration: { baseURL: `${base}/v1` } });
out.langchainOpenAI = await lcOpenAI.embedDocuments(texts);
out.langchainOpenAIQuery = await lcOpenAI.embedQuery(texts[0]);
const lcOllama = new OllamaEmbeddings({ model, baseUrl: base });
out.langchainOllama = await lcOllama.embedDocuments(texts);
const ollama = new Ollama({ host: base });
out.ollama = (await ollama.embed({ model, input: texts })).embeddings;
console.log(JSON.stringify(out));
