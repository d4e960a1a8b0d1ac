// Issue 31 item 3: a client gone during a long prefill is noticed within 1 s on
// every API an agent uses (Chat Completions, Responses, Messages), streamed and
// not, and /health answers meanwhile. Each request carries a prompt of some
// 60,000 tokens (over a minute to prefill); the client leaves 1.5 s into its
// prefill; /metrics' prefill progress must fall to 0 within 1 s, the log must
// say "client gone", and the next request must be served.
//   node prefill_cancel.mjs SLUICE_BINARY TEST_MODEL_DIR
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, runner, metric, sleep } from './harness.mjs';

const [binary, modelDir] = process.argv.slice(2);
const MODEL = path.basename(modelDir);
const t = runner();
const LONG = 'And it came to pass. '.repeat(2900);

const bodies = {
  '/v1/chat/completions': (stream) => ({ model: MODEL, stream, max_tokens: 4, messages: [{ role: 'user', content: LONG }] }),
  '/v1/responses': (stream) => ({ model: MODEL, stream, max_output_tokens: 16, input: LONG }),
  '/v1/messages': (stream) => ({ model: MODEL, stream, max_tokens: 4, messages: [{ role: 'user', content: LONG }] }),
};

async function waitFor(cond, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await cond()) return;
    await sleep(20);
  }
  throw new Error(`timed out waiting for ${what}`);
}

const server = await startServer(binary, modelDir);
let log = '';
server.child.stderr.on('data', (d) => { log += d.toString(); });
let worstHealth = 0, watching = true;
const healthLoop = (async () => {
  while (watching) {
    const t0 = Date.now();
    const r = await fetch(`${server.url}/health`).catch(() => null);
    if (watching) {
      assert.ok(r && r.status === 200, '/health did not answer 200');
      worstHealth = Math.max(worstHealth, Date.now() - t0);
    }
    await sleep(100);
  }
})();

try {
  for (const [route, body] of Object.entries(bodies))
    for (const stream of [true, false])
      await t.test(`${route} ${stream ? 'streamed' : 'not streamed'}: the prefill stops within 1 s of the client leaving`, async () => {
        const ctl = new AbortController();
        const done = fetch(`${server.url}${route}`, {
          method: 'POST', signal: ctl.signal,
          headers: { 'content-type': 'application/json', 'x-api-key': 'x', 'anthropic-version': '2023-06-01' },
          body: JSON.stringify(body(stream)),
        }).then(async (r) => { for await (const _ of r.body); }).catch(() => {});
        const before = log.split('\n').filter((l) => /client gone/.test(l)).length;
        await waitFor(async () => (await metric(server.url, 'sluice_prefill_progress_tokens')) > 0, 60000, 'the prefill to start');
        await sleep(1500);
        const t0 = Date.now();
        ctl.abort();
        await done;
        await waitFor(async () => (await metric(server.url, 'sluice_prefill_progress_tokens')) === 0, 60000, 'the prefill to stop');
        const stopped = Date.now() - t0;
        console.log(`  ${route} ${stream ? 'streamed' : 'not streamed'}: the prefill stopped ${stopped} ms after the client left`);
        assert.ok(stopped < 1000, `the prefill went on for ${stopped} ms after the client left`);
        await waitFor(async () => log.split('\n').filter((l) => /client gone/.test(l)).length > before, 5000, 'the log line');
        const r = await fetch(`${server.url}/v1/completions`, {
          method: 'POST', headers: { 'content-type': 'application/json' },
          body: JSON.stringify({ model: MODEL, prompt: 'hi', max_tokens: 1 }),
        });
        assert.equal(r.status, 200);
        await r.json();
      });
} finally {
  watching = false;
  await healthLoop;
  console.log(`slowest /health: ${worstHealth} ms`);
  assert.ok(worstHealth < 1000, `/health took ${worstHealth} ms`);
  assert.equal((await server.stop()).code, 0);
}
t.finish();
