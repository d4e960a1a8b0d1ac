// Hostile and careless clients against `sluice serve` on loopback: malformed
// JSON, wrong types, huge numbers, invalid UTF-8, oversized bodies, slow-loris
// headers, abrupt disconnects (generation must stop within a few tokens, a prefill
// at its next chunk), 50 concurrent seeded requests (each 200 must equal the same
// request sent alone).
// Every request must get the right status, the server must stay up, a normal
// request must still work, and it must exit cleanly (under ASan: without leaks).
//   node robustness.mjs SLUICE_BINARY MODEL_DIR
import assert from 'node:assert/strict';
import net from 'node:net';
import path from 'node:path';
import { startServer, runner, printableBias, metric, sleep, rawExchange, replyJson } from './harness.mjs';

const [binary, modelDir] = process.argv.slice(2);
const MODEL = path.basename(modelDir);
const HEAD_TIMEOUT_S = 3;
// 64-token prefill chunks (the plan's chunk on this small model is thousands of
// tokens, one pass each): a gone client is noticed between chunks.
const server = await startServer(binary, modelDir, ['--max-request-bytes', '1048576', '--max-queue', '4', '--header-timeout', String(HEAD_TIMEOUT_S), '--prefill-chunk', '64']);
const { port, url } = server;
const t = runner();

const raw = (bytes, opts) => rawExchange(port, bytes, opts);

function post(pathname, body, extraHeaders = '') {
  const buf = Buffer.isBuffer(body) ? body : Buffer.from(body);
  const head = `POST ${pathname} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nConnection: close\r\n` +
    `Content-Length: ${buf.length}\r\n${extraHeaders}\r\n`;
  return raw(Buffer.concat([Buffer.from(head), buf]));
}

const chat = (extra = {}) => JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: 4, ...extra });

async function expectError(res, status, param) {
  assert.equal(res.status, status, JSON.stringify(res).slice(0, 400));
  const body = JSON.parse(res.body.replace(/^[0-9a-f]+\r\n/, '').replace(/\r\n0\r\n$/, ''));
  assert.equal(typeof body.error.message, 'string');
  if (param !== undefined) assert.equal(body.error.param, param, body.error.message);
}

async function normalRequestWorks() {
  const r = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: chat({ seed: 1 }) });
  assert.equal(r.status, 200);
  const j = await r.json();
  assert.equal(j.object, 'chat.completion');
}

await t.test('malformed JSON bodies get 400', async () => {
  for (const body of ['{', '{"model": }', 'null', '[1,2]', '"str"', '', '{"model":"x",}', '\u0000\u0001', '{"a":1}{"b":2}'])
    await expectError(await post('/v1/chat/completions', body), 400);
  await expectError(await post('/v1/chat/completions', '['.repeat(100000) + ']'.repeat(100000)), 400);
  await expectError(await post('/v1/completions', '{"model":' + '{"a":'.repeat(200) + '1' + '}'.repeat(201)), 400);
});

await t.test('wrong types and out-of-range values get 400 naming the field', async () => {
  const cases = [
    [{ messages: 'hello' }, 'messages'],
    [{ messages: [{ role: 'user' }] }, 'messages[0].content'],
    [{ messages: [{ role: 'wizard', content: 'x' }] }, 'messages[0].role'],
    [{ messages: [{ role: 'user', content: 42 }] }, 'messages[0].content'],
    [{ temperature: 'hot' }, 'temperature'],
    [{ temperature: -0.1 }, 'temperature'],
    [{ top_p: 1.5 }, 'top_p'],
    [{ max_tokens: -1 }, 'max_tokens'],
    [{ max_tokens: 0 }, 'max_tokens'],
    [{ max_tokens: 2.5 }, 'max_tokens'],
    [{ max_tokens: '10' }, 'max_tokens'],
    [{ stream: 'yes' }, 'stream'],
    [{ stream_options: { include_usage: true } }, 'stream_options'],
    [{ stop: 7 }, 'stop'],
    [{ seed: 'abc' }, 'seed'],
    [{ logit_bias: { 'abc': 1 } }, 'logit_bias.abc'],
    [{ logit_bias: { '5': 1000 } }, 'logit_bias.5'],
    [{ logprobs: false, top_logprobs: 3 }, 'top_logprobs'],
    [{ tools: [{ type: 'function', function: { name: 'bad name!' } }] }, 'tools[0].function.name'],
    [{ model: 42 }, 'model'],
  ];
  for (const [extra, param] of cases) await expectError(await post('/v1/chat/completions', chat(extra)), 400, param);
  await expectError(await post('/v1/completions', JSON.stringify({ model: MODEL, prompt: [1, 2, 99999] })), 400, 'prompt');
  await expectError(await post('/v1/completions', JSON.stringify({ model: MODEL, prompt: { a: 1 } })), 400, 'prompt');
});

await t.test('huge numbers get 400', async () => {
  for (const lit of ['1e400', '-1e400', '123456789012345678901234567890', '18446744073709551616', '9223372036854775808', '1e18'])
    await expectError(await post('/v1/chat/completions', `{"model":"${MODEL}","messages":[{"role":"user","content":"x"}],"max_tokens":${lit}}`), 400);
  await expectError(await post('/v1/chat/completions', chat({ temperature: 1e308 })), 400, 'temperature');
  await expectError(await post('/v1/chat/completions', chat({ top_k: 1e12 })), 400, 'top_k');
});

await t.test('invalid UTF-8 gets 400', async () => {
  const bad = Buffer.concat([Buffer.from(`{"model":"${MODEL}","messages":[{"role":"user","content":"`), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')]);
  await expectError(await post('/v1/chat/completions', bad), 400);
  const overlong = Buffer.concat([Buffer.from(`{"model":"${MODEL}","prompt":"`), Buffer.from([0xc0, 0xaf]), Buffer.from('"}')]);
  await expectError(await post('/v1/completions', overlong), 400);
});

await t.test('bodies over --max-request-bytes get 413', async () => {
  const big = Buffer.alloc(10 * 1024 * 1024, 'a');
  const r = await post('/v1/chat/completions', big);
  assert.ok(r.status === 413 || r.closed, JSON.stringify(r).slice(0, 200));
  if (r.status) await expectError(r, 413);
  // Chunked, no Content-Length.
  const chunk = Buffer.alloc(64 * 1024, 'b');
  const parts = [Buffer.from('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n')];
  for (let i = 0; i < 160; i++) parts.push(Buffer.from(chunk.length.toString(16) + '\r\n'), chunk, Buffer.from('\r\n'));
  parts.push(Buffer.from('0\r\n\r\n'));
  const rc = await raw(Buffer.concat(parts));
  assert.ok(rc.status === 413 || rc.closed, JSON.stringify(rc).slice(0, 200));
  await normalRequestWorks();
});

await t.test('unknown routes and wrong methods', async () => {
  await expectError(await raw('GET /v1/nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'), 404);
  await expectError(await raw('GET /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'), 405);
  const r = await raw('GARBAGE\r\n\r\n');
  assert.ok(r.closed || (r.status >= 400 && r.status < 500), JSON.stringify(r));
});

await t.test('slow-loris headers are cut off and do not block others', async () => {
  // Ten connections that stop halfway through their headers.
  const socks = [];
  const closed = [];
  for (let i = 0; i < 10; i++) {
    const s = net.connect(port, '127.0.0.1');
    s.on('error', () => {});
    s.resume();  // read the server's answer, so its close is seen
    closed.push(new Promise((r) => s.on('close', r)));
    s.on('connect', () => s.write('POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: '));
    socks.push(s);
  }
  await sleep(500);
  await normalRequestWorks();  // served while they hang
  // The header deadline closes them.
  let n = 0;
  for (const c of closed) c.then(() => n++);
  const done = await Promise.race([Promise.all(closed).then(() => true), sleep(40000).then(() => false)]);
  for (const s of socks) s.destroy();
  assert.ok(done, `only ${n} of 10 slow connections were closed by the server`);
});

await t.test('abrupt disconnects: mid-body, mid-queue and mid-stream', async () => {
  // Half a body, then gone.
  for (let i = 0; i < 5; i++) {
    const s = net.connect(port, '127.0.0.1');
    s.on('error', () => {});
    s.on('connect', () => { s.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"model":'); setTimeout(() => s.destroy(), 50); });
  }
  // A long generation, dropped while it runs, streamed or not: the tokens generated
  // after the drop are counted, and must be few. The rate before the drop sets how
  // long to watch after it: long enough that a generation that went on would make
  // at least 250 tokens, 5x the limit (so the test can fail on a slow sanitizer
  // build too).
  const tokens = () => metric(url, 'sluice_generation_tokens_total');
  async function dropWhileRunning(start, drop) {
    const t0 = await tokens();
    await start();
    let t1 = t0;
    for (let i = 0; i < 500 && t1 - t0 < 5; i++) { await sleep(10); t1 = await tokens(); }
    const m0 = Date.now();
    await sleep(500);
    const t2 = await tokens();
    const rate = (t2 - t1) / ((Date.now() - m0) / 1000);
    drop();
    const dropped = await tokens();
    const need = 250 / Math.max(rate, 1e-9);  // seconds in which a generation that went on makes 250 tokens
    assert.ok(need <= 30, `generation too slow (${rate.toFixed(1)} tokens/s) for this test to notice a generation that goes on`);
    const watch = Math.max(1, need);
    await sleep(watch * 1000);
    const after = (await tokens()) - dropped;
    console.log(`  ${rate.toFixed(0)} tokens/s before the drop, ${after} tokens in the ${watch.toFixed(1)} s after it`);
    assert.ok(after < 50, `a dropped request went on: ${after} tokens after the drop`);
  }
  const ctl = new AbortController();
  await dropWhileRunning(async () => {
    const r = await fetch(`${url}/v1/chat/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: ctl.signal,
      body: chat({ max_tokens: 20000, stream: true, logit_bias: printableBias() }),
    });
    r.body.getReader().read();
  }, () => ctl.abort());
  const body = chat({ max_tokens: 20000, logit_bias: printableBias() });
  const s = net.connect(port, '127.0.0.1');
  s.on('error', () => {});
  await dropWhileRunning(async () => {
    s.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${body.length}\r\n\r\n${body}`);
  }, () => s.destroy());
  await normalRequestWorks();
  const text = await (await fetch(`${url}/metrics`)).text();
  assert.match(text, /code="499"\} [1-9]/);
});

await t.test('a client gone during a long prefill: the prefill stops at a chunk and the next request is served', async () => {
  // ~60,000 prompt tokens (byte codec): over a minute to prefill if it went on; the
  // prefill checks for the client between 64-token chunks. Streamed and not.
  for (const stream of [true, false]) {
    const before = await metric(url, 'sluice_prompt_tokens_total');
    const ctl = new AbortController();
    const gone = fetch(`${url}/v1/completions`, {
      method: 'POST', headers: { 'content-type': 'application/json' }, signal: ctl.signal,
      body: JSON.stringify({ model: MODEL, prompt: 'And it came to pass. '.repeat(2900), max_tokens: 4, stream }),
    }).catch(() => null);
    const end = Date.now() + 30000;
    while (!((await metric(url, 'sluice_prefill_progress_tokens')) > 0)) {
      assert.ok(Date.now() < end, 'the long prefill did not start');
      await sleep(10);
    }
    ctl.abort();
    await gone;
    const t0 = Date.now();
    const r = await post('/v1/completions', JSON.stringify({ model: MODEL, prompt: 'hi', max_tokens: 2 }));
    const ms = Date.now() - t0;
    console.log(`  ${stream ? 'streamed' : 'not streamed'}: the next request took ${ms} ms after the client left mid-prefill`);
    assert.equal(r.status, 200, JSON.stringify(r).slice(0, 200));
    assert.ok(ms < 5000, `the next request waited ${ms} ms: the dropped prefill went on`);
    // Only the small prompt was counted: the long one never finished its prefill.
    assert.equal(await metric(url, 'sluice_prompt_tokens_total') - before, replyJson(r).usage.prompt_tokens);
  }
});

await t.test('50 concurrent seeded requests: each gets 200 or 429 with Retry-After, each 200 equals the request sent alone', async () => {
  const request = (i) => fetch(`${url}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json' },
    body: chat({ messages: [{ role: 'user', content: `request ${i % 7}` }], max_tokens: 16, seed: i, temperature: 1 }),
  }).then(async (r) => ({ status: r.status, retry: r.headers.get('retry-after'), body: await r.json() }));
  const results = await Promise.all(Array.from({ length: 50 }, (_, i) => request(i)));
  const ok = results.filter((r) => r.status === 200), busy = results.filter((r) => r.status === 429);
  assert.equal(ok.length + busy.length, 50, JSON.stringify(results.map((r) => r.status)));
  assert.ok(ok.length >= 5, `only ${ok.length} succeeded`);
  assert.ok(busy.length > 0, 'the queue limit never applied');
  for (const r of busy) {
    assert.ok(Number(r.retry) >= 1, JSON.stringify(r));
    assert.equal(r.body.error.type, 'rate_limit_error');
  }
  for (const r of ok) assert.equal(r.body.choices[0].message.role, 'assistant');
  let compared = 0;
  for (let i = 0; i < 50; i++) {
    if (results[i].status !== 200) continue;
    const alone = await request(i);
    assert.equal(alone.status, 200);
    assert.equal(alone.body.choices[0].message.content, results[i].body.choices[0].message.content, `request ${i}`);
    compared++;
  }
  assert.ok(compared >= 5);
});

await t.test('a second server on the same port fails with one error line', async () => {
  const { spawnSync } = await import('node:child_process');
  const r = spawnSync(binary, ['serve', '--model', modelDir, '--port', String(port)], { encoding: 'utf8', timeout: 60000 });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /^sluice: error: cannot listen on 127\.0\.0\.1:\d+/m);
});

await t.test('after all that, a normal request and health still work', async () => {
  await normalRequestWorks();
  assert.equal((await fetch(`${url}/health`)).status, 200);
  assert.equal(server.child.exitCode, null);
});

const st = await server.stop();
await t.test('server exits cleanly (no leaks under ASan)', async () => assert.equal(st.code, 0, JSON.stringify(st)));
t.finish();
