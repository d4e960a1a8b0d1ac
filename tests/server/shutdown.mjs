// SIGTERM and SIGINT stop `sluice serve` within seconds: during a long prefill,
// and during a generation with another request waiting. The running reply ends
// with a server_shutdown error (or the connection closes), the waiting request
// gets 503, the process exits with status 0 (under ASan: without leaks).
//   node shutdown.mjs SLUICE_BINARY MODEL_DIR
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, runner, printableBias, metric, sleep } from './harness.mjs';

const [binary, modelDir] = process.argv.slice(2);
const MODEL = path.basename(modelDir);
const EXIT_LIMIT_MS = 5000;
const t = runner();

// Streams a completion; resolves with everything received when the connection ends.
function streamCompletion(url, body) {
  const ctl = new AbortController();
  const done = (async () => {
    let text = '', status = 0, error = null;
    try {
      const r = await fetch(`${url}/v1/completions`, {
        method: 'POST', headers: { 'content-type': 'application/json' }, signal: ctl.signal,
        body: JSON.stringify({ model: MODEL, stream: true, ...body }),
      });
      status = r.status;
      const dec = new TextDecoder();
      for await (const chunk of r.body) text += dec.decode(chunk, { stream: true });
    } catch (e) {
      error = e;
    }
    return { status, text, error };
  })();
  return { done, abort: () => ctl.abort() };
}

async function waitFor(cond, ms, what) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await cond()) return;
    await sleep(20);
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function signalAndTime(server, sig) {
  const t0 = Date.now();
  server.child.kill(sig);
  const r = await Promise.race([server.exited, sleep(60000).then(() => null)]);
  const ms = Date.now() - t0;
  if (r === null) server.child.kill('SIGKILL');
  return { ms, exit: r };
}

await t.test('SIGTERM during a long prefill: the prefill stops at a chunk and the server exits', async () => {
  // 64-token chunks: the plan's chunk on this small model is thousands of tokens, one pass each.
  const server = await startServer(binary, modelDir, ['--prefill-chunk', '64']);
  // ~60,000 prompt tokens (byte codec): far longer to prefill than the exit limit on any machine.
  const req = streamCompletion(server.url, { prompt: 'And it came to pass. '.repeat(2900), max_tokens: 4 });
  await waitFor(async () => (await metric(server.url, 'sluice_queue_running')) === 1, 30000, 'the request to start');
  await sleep(300);
  assert.equal(await metric(server.url, 'sluice_prompt_tokens_total'), 0, 'the prefill ended before the signal');
  const { ms, exit } = await signalAndTime(server, 'SIGTERM');
  const got = await req.done;
  console.log(`  exited ${ms} ms after SIGTERM (status ${JSON.stringify(exit)})`);
  assert.ok(exit, 'the server did not exit within 60 s');
  assert.equal(exit.code, 0);
  assert.ok(ms < EXIT_LIMIT_MS, `exit took ${ms} ms`);
  assert.doesNotMatch(got.text, /\[DONE\]/, 'the request finished: the prefill was not long enough to test');
  assert.match(got.text, /server_shutdown/);
});

await t.test('SIGINT during a generation, another request waiting: both end, the server exits', async () => {
  const server = await startServer(binary, modelDir);
  const running = streamCompletion(server.url, { prompt: 'Tell', max_tokens: 60000, logit_bias: printableBias() });
  await waitFor(async () => (await metric(server.url, 'sluice_generation_tokens_total')) > 20, 30000, 'tokens');
  const waiting = fetch(`${server.url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt: 'Wait', max_tokens: 4 }),
  }).then(async (r) => ({ status: r.status, body: await r.json() }));
  await waitFor(async () => (await metric(server.url, 'sluice_queue_waiting')) === 1, 30000, 'the second request to queue');
  const { ms, exit } = await signalAndTime(server, 'SIGINT');
  console.log(`  exited ${ms} ms after SIGINT (status ${JSON.stringify(exit)})`);
  assert.ok(exit && exit.code === 0, JSON.stringify(exit));
  assert.ok(ms < EXIT_LIMIT_MS, `exit took ${ms} ms`);
  const got = await running.done;
  assert.match(got.text, /server_shutdown/);
  assert.doesNotMatch(got.text, /\[DONE\]/);
  const w = await waiting;
  assert.equal(w.status, 503);
  assert.equal(w.body.error.code, 'server_shutdown');
});

t.finish();
