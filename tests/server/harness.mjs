// Shared by the server test scripts: starts `sluice serve` on a free loopback
// port, a tiny test runner that prints "N passed, N failed", and helpers.
import { spawn } from 'node:child_process';

export async function startServer(binary, modelDir, extraArgs = []) {
  const child = spawn(binary, ['serve', '--model', modelDir, '--host', '127.0.0.1', '--port', '0', ...extraArgs], {
    stdio: ['ignore', 'inherit', 'pipe'],
  });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start in 60 s:\n${log}`)), 60000);
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

export async function metric(url, name) {
  const text = await (await fetch(`${url}/metrics`)).text();
  const m = text.match(new RegExp(`^${name} ([0-9.e+-]+)$`, 'm'));
  return m ? Number(m[1]) : NaN;
}
