// The server's connection handling and limits, on a server with short deadlines
// and a small context: trickling clients (more of them than worker threads) get
// 408 at the header deadline while others are served; a client over the
// per-client connection cap gets 429; /metrics stays valid with bounded labels
// whatever paths are requested; prompts longer than the context are refused
// before any work; a request without max_tokens stops at the context.
// Every exchange here uses its own connection (raw sockets, Connection: close),
// so the number of open connections is known.
//   node connections.mjs SLUICE_BINARY MODEL_DIR
import assert from 'node:assert/strict';
import net from 'node:net';
import path from 'node:path';
import { startServer, runner, printableBias, sleep, expositionProblems, rawExchange, replyJson } from './harness.mjs';

const [binary, modelDir] = process.argv.slice(2);
const MODEL = path.basename(modelDir);
const CONTEXT = 128, CAP = 24, HEAD_TIMEOUT_S = 2, MAX_QUEUE = 2;
const WORKERS = MAX_QUEUE + 1 + 8;  // what the server sizes its pool to (http_server.cpp)
const server = await startServer(binary, modelDir, [
  '--context-length', String(CONTEXT), '--max-connections-per-client', String(CAP),
  '--header-timeout', String(HEAD_TIMEOUT_S), '--max-queue', String(MAX_QUEUE)]);
const { port } = server;
const t = runner();

const get = (p, timeoutMs) => rawExchange(port, `GET ${p} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`, { timeoutMs });
const post = (p, body, timeoutMs) => {
  const buf = Buffer.from(body);
  return rawExchange(port, Buffer.concat([Buffer.from(
    `POST ${p} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: ${buf.length}\r\n\r\n`), buf]), { timeoutMs });
};
async function metrics() {
  const r = await get('/metrics', 10000);
  assert.equal(r.status, 200, JSON.stringify(r).slice(0, 300));
  return r.body;
}
const value = (text, name) => {
  const m = text.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
};

// A connection that sends a request head one byte at a time and never finishes it.
function trickler(everyMs) {
  const head = 'POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Pad: ' + 'a'.repeat(10000);
  const s = net.connect(port, '127.0.0.1');
  const chunks = [];
  let i = 0, timer = null;
  s.on('error', () => {});
  s.on('data', (d) => chunks.push(d));
  s.on('connect', () => { timer = setInterval(() => { if (i < head.length) s.write(head[i++]); }, everyMs); });
  const closed = new Promise((resolve) => s.on('close', () => {
    clearInterval(timer);
    resolve({ at: Date.now(), sent: i, text: Buffer.concat(chunks).toString('latin1') });
  }));
  return { sock: s, closed };
}

await t.test(`trickling clients (more than the ${WORKERS} workers) get 408 at the header deadline; others are served meanwhile`, async () => {
  const N = WORKERS + 6;
  assert.ok(N < CAP);
  const started = Date.now();
  const slow = Array.from({ length: N }, () => trickler(200));
  await sleep(300);
  // Health checks all through the deadline, each on a new connection.
  const latencies = [];
  while (Date.now() - started < HEAD_TIMEOUT_S * 1000 + 500) {
    const t0 = Date.now();
    const r = await get('/health', 3000);
    assert.equal(r.status, 200, `/health while ${N} clients trickle: ${JSON.stringify(r).slice(0, 200)}`);
    latencies.push(Date.now() - t0);
    await sleep(150);
  }
  console.log(`  /health latencies while trickling (ms): ${latencies.join(' ')}`);
  assert.ok(Math.max(...latencies) < 1000, `slow /health: ${latencies}`);
  const ends = await Promise.race([Promise.all(slow.map((s) => s.closed)), sleep(HEAD_TIMEOUT_S * 1000 + 8000).then(() => null)]);
  for (const s of slow) s.sock.destroy();
  assert.ok(ends, 'the server did not close the trickling connections');
  for (const e of ends) {
    assert.match(e.text, /^HTTP\/1\.1 408 /, `a trickling client got: ${e.text.slice(0, 100)}`);
    assert.match(e.text, /"code":"request_timeout"/);
    assert.ok(e.at - started < HEAD_TIMEOUT_S * 1000 + 3000, `closed ${e.at - started} ms after it opened`);
    assert.ok(e.sent > 3, `only ${e.sent} bytes were sent`);
  }
  const m = await metrics();
  assert.ok(value(m, 'sluice_requests_total\\{endpoint="connection",code="408"\\}') >= N, m);
});

await t.test(`a client over ${CAP} open connections gets 429; under the cap it is served again`, async () => {
  // CAP kept-alive connections (idle after one request each), then 5 more.
  const socks = [], answers = [];
  for (let i = 0; i < CAP + 5; i++) {
    const s = net.connect(port, '127.0.0.1');
    let text = '';
    s.on('error', () => {});
    const first = new Promise((resolve) => s.on('data', (d) => { text += d.toString('latin1'); resolve(); }));
    answers.push({ first, closed: new Promise((resolve) => s.on('close', resolve)), text: () => text });
    await new Promise((r) => s.on('connect', r));
    if (i < CAP) s.write('GET /health HTTP/1.1\r\nHost: x\r\n\r\n');
    await first;
    socks.push(s);
  }
  for (let i = 0; i < CAP + 5; i++) {
    const text = answers[i].text();
    if (i < CAP) {
      assert.match(text, /^HTTP\/1\.1 200 /, `connection ${i}`);
    } else {
      assert.match(text, /^HTTP\/1\.1 429 /, `connection ${i}`);
      assert.match(text, /Retry-After: 1/);
      assert.match(text, /too many open connections from 127\.0\.0\.1 \(the limit is 24\)/);
      await answers[i].closed;
    }
  }
  const r = await get('/health', 3000);
  assert.equal(r.status, 429, 'a new connection at the cap');
  for (const s of socks) s.destroy();
  await sleep(300);
  assert.equal((await get('/health', 3000)).status, 200);
});

await t.test('1,000 distinct paths and a label injection leave /metrics valid and bounded', async () => {
  // 1,000 requests for distinct unknown paths, 16 at a time.
  for (let i = 0; i < 1000; i += 16) {
    const rs = await Promise.all(Array.from({ length: 16 }, (_, k) => get(`/p${i + k}/${'x'.repeat(k % 7)}?q=${i}`, 10000)));
    for (const r of rs) assert.equal(r.status, 404, JSON.stringify(r).slice(0, 200));
  }
  // Then a path that would end the label and start a metric of its own.
  const inject = '/zz%22%7D%201%0Ainjected_metric%7Bx%3D%22y%22%7D%2042%0Azz%7Ba%3D%22';
  assert.equal((await get(inject, 5000)).status, 404);
  const text = await metrics();
  assert.deepEqual(expositionProblems(text), []);
  assert.doesNotMatch(text, /injected_metric/);
  assert.doesNotMatch(text, /zz/);
  const series = text.split('\n').filter((l) => l.startsWith('sluice_requests_total{'));
  assert.ok(series.length < 20, `${series.length} request series:\n${series.join('\n')}`);
  assert.ok(value(text, 'sluice_requests_total\\{endpoint="other",code="404"\\}') >= 1008, text);
});

await t.test(`a prompt longer than the context (${CONTEXT}) is refused before any work`, async () => {
  const before = value(await metrics(), 'sluice_prompt_tokens_total');
  const long = 'x'.repeat(CONTEXT + 10);
  for (const [route, body, param] of [
    ['/v1/completions', { model: MODEL, prompt: long, max_tokens: 1 }, 'prompt'],
    ['/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: long }] }, 'messages'],
    ['/v1/completions', { model: MODEL, prompt: 'hello', max_tokens: CONTEXT }, 'max_tokens'],
  ]) {
    const r = await post(route, JSON.stringify(body), 10000);
    assert.equal(r.status, 400, JSON.stringify(r).slice(0, 300));
    const e = replyJson(r).error;
    assert.equal(e.code, 'context_length_exceeded');
    assert.equal(e.param, param);
    assert.match(e.message, new RegExp(`context length is ${CONTEXT} tokens`));
  }
  // 5 MB of prompt (under the 8 MB body limit): refused promptly, and the next request is not held up.
  const t0 = Date.now();
  const big = await post('/v1/completions', JSON.stringify({ model: MODEL, prompt: 'y'.repeat(5 << 20) }), 60000);
  const bigMs = Date.now() - t0;
  assert.equal(big.status, 400);
  assert.equal(replyJson(big).error.code, 'context_length_exceeded');
  const t1 = Date.now();
  const small = await post('/v1/completions', JSON.stringify({ model: MODEL, prompt: 'hi', max_tokens: 2 }), 60000);
  assert.equal(small.status, 200);
  console.log(`  5 MB prompt refused in ${bigMs} ms; the next request took ${Date.now() - t1} ms`);
  assert.ok(bigMs < 15000 && Date.now() - t1 < 5000);
  assert.equal(value(await metrics(), 'sluice_prompt_tokens_total') - before, replyJson(small).usage.prompt_tokens);
});

await t.test('without max_tokens a reply stops at the context length', async () => {
  const r = await post('/v1/chat/completions', JSON.stringify({
    model: MODEL, messages: [{ role: 'user', content: 'Once upon a time' }], logit_bias: printableBias() }), 60000);
  assert.equal(r.status, 200);
  const j = replyJson(r);
  assert.equal(j.choices[0].finish_reason, 'length');
  assert.equal(j.usage.prompt_tokens + j.usage.completion_tokens, CONTEXT);
});

await t.test('a request head over 64 KiB gets 431', async () => {
  const r = await rawExchange(port, `GET /health HTTP/1.1\r\nHost: x\r\nX-Big: ${'b'.repeat(70000)}\r\n\r\n`, { timeoutMs: 10000 });
  assert.equal(r.status, 431, JSON.stringify(r).slice(0, 200));
  assert.equal((await get('/health', 3000)).status, 200);
});

const st = await server.stop();
await t.test('server exits cleanly', async () => assert.equal(st.code, 0, JSON.stringify(st)));
t.finish();
