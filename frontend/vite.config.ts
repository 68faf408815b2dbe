import { defineConfig } from 'vite';
import { svelte } from '@sveltejs/vite-plugin-svelte';

// The agent serves the build under /ui/. `npm run dev` proxies the API to
// a local agent (ORRERY_API, default the demo's node 0).
const api = process.env.ORRERY_API ?? 'http://127.0.0.1:52416';
const proxied = ['/state', '/events', '/cluster', '/history', '/v1', '/instance', '/perfetto', '/node_id', '/healthz'];

export default defineConfig({
  base: '/ui/',
  plugins: [svelte()],
  build: { outDir: 'dist', emptyOutDir: true, chunkSizeWarningLimit: 1000 },
  server: { proxy: Object.fromEntries(proxied.map((p) => [p, { target: api, changeOrigin: true }])) },
  test: { include: ['src/**/*.test.ts'] },
});
