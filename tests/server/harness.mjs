// Shared by the server test scripts: starts `sluice serve` on a free loopback
// port, a tiny test runner that prints "N passed, N failed", and helpers.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import net from 'node:net';

export async function startServer(binary, modelDir, extraArgs = []) {
  const child = spawn(binary, ['serve', '--model', modelDir, '--host', '127.0.0.1', '--port', '0', ...extraArgs], {
    stdio: ['ignore', 'inherit', 'pipe'],
  });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    // Generous: a sanitizer build on a loaded 2-core machine loads a 129k-token
    // tokenizer slowly. On a timeout the server is killed, so the test fails
    // now instead of waiting for CTest's limit.
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`server did not start in 240 s:\n${log}`));
    }, 240000);
    child.stderr.on('data', (d) => {
      log += d.toString();
      process.stderr.write(d);
      const m = log.match(/on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before listening:\n${log}`));
    });
  });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
  return {
    port,
    url: `http://127.0.0.1:${port}`,
    child,
    exited,
    log: () => log,  // what the server wrote on stderr so far
    // SIGTERM, then the exit status (0 expected: a clean stop, and no leaks under ASan).
    async stop() {
      if (child.exitCode !== null) return { code: child.exitCode, signal: null };
      child.kill('SIGTERM');
      const timeout = new Promise((resolve) => setTimeout(() => resolve(null), 60000));
      const r = await Promise.race([exited, timeout]);
      if (r === null) {
        child.kill('SIGKILL');
        return { code: null, signal: 'timeout' };
      }
      return r;
    },
  };
}

export function runner() {
  let passed = 0, failed = 0;
  return {
    async test(name, fn) {
      const t0 = Date.now();
      try {
        await fn();
        passed++;
        console.log(`ok   ${name} (${Date.now() - t0} ms)`);
      } catch (e) {
        failed++;
        console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
      }
    },
    finish() {
      console.log(`${passed} passed, ${failed} failed`);
      process.exit(failed === 0 && passed > 0 ? 0 : 1);
    },
  };
}

// Logit biases that keep a byte-level model to printable ASCII and away from EOS.
export function printableBias(vocab = 512) {
  const bias = {};
  for (let i = 0; i < vocab; i++) if (i < 32 || i > 126) bias[String(i)] = -100;
  return bias;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Waits until `log()` (a server's stderr so far) matches `re`, then asserts it
// did: the server writes a request's line after the reply's last byte, and the
// pipe may deliver it after the client has the reply.
export async function logged(log, re, ms = 10000) {
  for (const end = Date.now() + ms; !re.test(log()) && Date.now() < end;) await sleep(20);
  assert.match(log(), re);
}

export async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}

// Problems with a Prometheus text exposition (format 0.0.4), [] when valid: metric
// and label names, label value escapes, sample values, one HELP/TYPE per family
// before its samples, families not interleaved, no series twice, a final newline.
export function expositionProblems(text) {
  const problems = [];
  if (!text.endsWith('\n')) problems.push('the text does not end with a newline');
  const name = '[a-zA-Z_:][a-zA-Z0-9_:]*';
  const sample = new RegExp(`^(${name})(\\{(.*)\\})? (\\S+)( -?\\d+)?$`);
  const label = /^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\["\\n])*)"(,|$)/;
  const types = new Map(), helps = new Set(), series = new Set(), closed = new Set();
  let current = null;
  const family = (n) => {
    for (const suffix of ['_bucket', '_sum', '_count']) {
      const base = n.endsWith(suffix) ? n.slice(0, -suffix.length) : null;
      if (base && types.get(base) === 'histogram') return base;
    }
    return n;
  };
  const enter = (f, lineNo) => {
    if (f === current) return;
    if (closed.has(f)) problems.push(`line ${lineNo}: family ${f} continues after another family`);
    if (current) closed.add(current);
    current = f;
  };
  text.split('\n').slice(0, -1).forEach((line, i) => {
    const n = i + 1;
    let m;
    if ((m = line.match(new RegExp(`^# HELP (${name}) (.*)$`)))) {
      if (helps.has(m[1])) problems.push(`line ${n}: second HELP for ${m[1]}`);
      if (/\\[^\\n]/.test(m[2].replace(/\\\\/g, ''))) problems.push(`line ${n}: bad escape in HELP`);
      helps.add(m[1]);
      enter(m[1], n);
    } else if ((m = line.match(new RegExp(`^# TYPE (${name}) (counter|gauge|histogram|summary|untyped)$`)))) {
      if (types.has(m[1])) problems.push(`line ${n}: second TYPE for ${m[1]}`);
      types.set(m[1], m[2]);
      enter(m[1], n);
    } else if (line.startsWith('#')) {
      if (/^# (HELP|TYPE)/.test(line)) problems.push(`line ${n}: malformed ${line.slice(2, 6)} line: ${line}`);
    } else if ((m = line.match(sample))) {
      const f = family(m[1]);
      if (!types.has(f)) problems.push(`line ${n}: sample of ${m[1]} before its TYPE`);
      enter(f, n);
      let rest = m[3] ?? '';
      const labels = [];
      while (rest.length) {
        const l = rest.match(label);
        if (!l) { problems.push(`line ${n}: malformed labels: {${m[3]}}`); break; }
        labels.push(`${l[1]}=${l[2]}`);
        rest = rest.slice(l[0].length);
      }
      if (new Set(labels.map((l) => l.split('=')[0])).size !== labels.length) problems.push(`line ${n}: a label twice`);
      const key = `${m[1]}{${labels.sort().join(',')}}`;
      if (series.has(key)) problems.push(`line ${n}: series ${key} twice`);
      series.add(key);
      if (!/^([+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)|[+-]Inf|NaN)$/.test(m[4]))
        problems.push(`line ${n}: bad value ${m[4]}`);
    } else if (line !== '') {
      problems.push(`line ${n}: not a sample, HELP, TYPE or comment: ${JSON.stringify(line)}`);
    }
  });
  return problems;
}

// One HTTP exchange on its own connection (Connection: close): resolves with
// { status, head, body } when the server closes, { closed: true, text } when it
// closed without an answer, { timeout: true } after timeoutMs. endAfterWrite
// half-closes the connection once the bytes are written.
export function rawExchange(port, bytes, { timeoutMs = 30000, endAfterWrite = false } = {}) {
  return new Promise((resolve) => {
    const sock = net.connect(port, '127.0.0.1');
    const chunks = [];
    const timer = setTimeout(() => { sock.destroy(); resolve({ timeout: true }); }, timeoutMs);
    sock.on('connect', () => { sock.write(bytes); if (endAfterWrite) sock.end(); });
    sock.on('data', (d) => chunks.push(d));
    sock.on('error', () => {});
    sock.on('close', () => {
      clearTimeout(timer);
      const text = Buffer.concat(chunks).toString('latin1');
      const m = text.match(/^HTTP\/1\.1 (\d{3})/);
      if (!m) return resolve({ closed: true, text });
      const [head, ...rest] = text.split('\r\n\r\n');
      resolve({ status: Number(m[1]), head, body: rest.join('\r\n\r\n') });
    });
  });
}

// The JSON body of a raw reply, chunked transfer encoding undone.
export function replyJson(r) {
  let body = r.body;
  if (/transfer-encoding: chunked/i.test(r.head)) {
    let out = '', rest = body;
    for (;;) {
      const nl = rest.indexOf('\r\n');
      const size = parseInt(rest.slice(0, nl), 16);
      if (!(size > 0)) break;
      out += rest.slice(nl + 2, nl + 2 + size);
      rest = rest.slice(nl + 2 + size + 2);
    }
    body = out;
  }
  return JSON.parse(Buffer.from(body, 'latin1').toString('utf8'));
}
