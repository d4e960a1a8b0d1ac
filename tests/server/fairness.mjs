// Issue 38, finding 4: one long prompt does not hold the server.
//  - Without --context-length the served context is the largest whose state
//    fits in what the weights leave, printed on the first lines.
//  - Under --parallel a long prefill is fed in slices between the other
//    requests' steps: a 1-token request sent while a long prompt is being
//    prefilled finishes long before that prefill ends; /health answers within
//    1 s throughout.
//   node fairness.mjs SLUICE_BINARY TEST_MODEL_DIR
import assert from 'node:assert/strict';
import path from 'node:path';
import { startServer, runner, metric, sleep } from './harness.mjs';

const [binary, modelDir] = process.argv.slice(2);
const MODEL = path.basename(modelDir);
const t = runner();

async function complete(url, prompt, max_tokens) {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens, temperature: 0 }),
  });
  return { status: r.status, body: await r.json() };
}

await t.test('the default context is what the memory holds, printed before the server listens', async () => {
  // A 20 MiB budget holds state for fewer positions than the model's 65,536 in each of 2 sequences.
  const server = await startServer(binary, modelDir, ['--ram', '0.02', '--parallel', '2']);
  try {
    const log = server.log();
    const head = log.slice(0, log.indexOf('on http://'));
    const m = head.match(/^sluice: context (\d+) positions per conversation \(default: the largest whose state, .* per position in each of 2 sequences, fits in the memory the weights leave, at most the model's 65536; --context-length N sets another\)$/m);
    assert.ok(m, `no context line before the server listened:\n${head}`);
    const ctx = Number(m[1]);
    assert.ok(ctx >= 4096 && ctx < 65536 && ctx % 1024 === 0, `context ${ctx}`);
    // The server answers with that context.
    const over = await complete(server.url, 'x', ctx);
    assert.equal(over.status, 400);
    assert.match(over.body.error.message, new RegExp(`maximum context length is ${ctx} tokens`));
  } finally {
    assert.equal((await server.stop()).code, 0);
  }
  // A given --context-length wins, and says so.
  const given = await startServer(binary, modelDir, ['--ram', '0.02', '--context-length', '5000']);
  try {
    assert.match(given.log(), /^sluice: context 5000 positions per conversation \(--context-length\)$/m);
  } finally {
    assert.equal((await given.stop()).code, 0);
  }
});

await t.test('--parallel 2: a 1-token request does not wait for a long prefill', async () => {
  const server = await startServer(binary, modelDir, ['--parallel', '2', '--prefill-slice', '0.2']);
  let worstHealth = 0, watching = true;
  const healthLoop = (async () => {
    while (watching) {
      const t0 = Date.now();
      const r = await fetch(`${server.url}/health`).catch(() => null);
      assert.ok(r && r.status === 200, '/health did not answer 200');
      worstHealth = Math.max(worstHealth, Date.now() - t0);
      await sleep(100);
    }
  })();
  try {
    const LONG = 'And it came to pass. '.repeat(600);
    const t0 = Date.now();
    const long = complete(server.url, LONG, 1).then((r) => ({ ...r, ms: Date.now() - t0 }));
    const end = Date.now() + 60000;
    while ((await metric(server.url, 'sluice_prefill_progress_tokens')) <= 0) {
      assert.ok(Date.now() < end, 'the long prefill did not start');
      await sleep(20);
    }
    const startedAt = Date.now() - t0;
    const t1 = Date.now();
    const short = await complete(server.url, 'hi', 1);
    const shortMs = Date.now() - t1;
    assert.equal(short.status, 200);
    const l = await long;
    assert.equal(l.status, 200);
    const prefillMs = l.ms - startedAt;  // the long prefill from its first chunk on
    console.log(`  long prompt: ${l.body.usage.prompt_tokens} tokens, ${l.ms} ms (prefill ~${prefillMs} ms); ` +
                `1-token request sent during it: ${shortMs} ms`);
    assert.ok(prefillMs > 3000, `the long prefill took only ${prefillMs} ms: too short to tell`);
    assert.ok(shortMs < prefillMs / 4, `the 1-token request took ${shortMs} ms of a ${prefillMs} ms prefill`);
  } finally {
    watching = false;
    await healthLoop;
    console.log(`  slowest /health: ${worstHealth} ms`);
    assert.ok(worstHealth < 1000, `/health took ${worstHealth} ms`);
    assert.equal((await server.stop()).code, 0);
  }
});

t.finish();
