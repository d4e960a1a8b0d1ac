// One coding agent, installed from npm (tests/agents/package.json, exact
// versions), run headless against `sluice serve` for a session with a tool
// round trip: its first request gets a shell tool call that writes agent.txt,
// the agent runs it and sends the result, the second request gets the answer,
// and the CLI must end without an error, print the answer and leave the file.
// Then the session is continued with a second prompt (its history, tool call
// and result included, goes back to the server, which answers it). The model is
// tests/agents/scripted_model.mjs's; each agent gets its own home directory and
// talks only to the local server.
//   node run_agent.mjs AGENT SLUICE_BINARY MAKE_TEST_MODEL
// AGENT: claude_code, codex, opencode or qwen_code. SLUICE_AGENT_RECORD=DIR keeps
// every request body the agent sent (a transcript for replays); with it, the
// session has SLUICE_AGENT_TURNS (7) prompts, each answered by a tool call, its
// result and an answer; SLUICE_AGENT_NEW_SESSION=1 then starts a second session
// (same system prompt and tools, another first prompt) with one more prompt.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { startServer } from '../server/harness.mjs';
import { makeAgentModel } from './scripted_model.mjs';

const [agent, binary, makeModel] = process.argv.slice(2);
const bin = (name) => new URL(`./node_modules/.bin/${name}`, import.meta.url).pathname;
const MODEL = 'sluice-test';
const KEY = 'sluice-key';
const ANSWER = 'The file agent.txt now says sluice.';
const COMMAND = 'echo sluice > agent.txt';

// Per agent: its shell tool's name and arguments, and how to run it.
const agents = {
  claude_code: {
    tool: 'Bash',
    args: { command: COMMAND, description: 'Write a file' },
    async run(ctx, prompt, resume) {
      const r = await ctx.exec(bin('claude'), ['-p', prompt, '--model', MODEL, '--output-format', 'json',
        '--allowedTools', 'Bash', ...(resume ? ['--continue'] : [])], {
        ANTHROPIC_BASE_URL: ctx.url, ANTHROPIC_API_KEY: KEY,
        ANTHROPIC_SMALL_FAST_MODEL: MODEL, ANTHROPIC_DEFAULT_HAIKU_MODEL: MODEL,
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1', DISABLE_AUTOUPDATER: '1', DISABLE_TELEMETRY: '1',
        API_TIMEOUT_MS: '600000',
      });
      const out = JSON.parse(r.stdout.trim().split('\n').at(-1));
      assert.equal(out.is_error, false, r.stdout);
      return out.result;
    },
  },
  codex: {
    tool: 'exec_command',
    args: { cmd: COMMAND },
    async run(ctx, prompt, resume) {
      const codexHome = path.join(ctx.home, '.codex');
      fs.mkdirSync(codexHome, { recursive: true });
      fs.writeFileSync(path.join(codexHome, 'config.toml'), [
        `model = "${MODEL}"`, 'model_provider = "sluice"', '[model_providers.sluice]', 'name = "sluice"',
        `base_url = "${ctx.url}/v1"`, 'env_key = "SLUICE_API_KEY"', 'wire_api = "responses"',
        'request_max_retries = 0', 'stream_max_retries = 0', 'stream_idle_timeout_ms = 600000', ''].join('\n'));
      const last = path.join(ctx.home, 'last.txt');
      const args = resume ? ['exec', 'resume', '--last'] : ['exec'];
      args.push('--skip-git-repo-check', '--dangerously-bypass-approvals-and-sandbox', '--output-last-message', last, prompt);
      await ctx.exec(bin('codex'), args, { CODEX_HOME: codexHome, SLUICE_API_KEY: KEY });
      return fs.readFileSync(last, 'utf8');
    },
  },
  opencode: {
    tool: 'bash',
    args: { command: COMMAND, description: 'Write a file' },
    async run(ctx, prompt, resume) {
      const config = path.join(ctx.home, '.config', 'opencode');
      fs.mkdirSync(config, { recursive: true });
      fs.writeFileSync(path.join(config, 'opencode.json'), JSON.stringify({
        $schema: 'https://opencode.ai/config.json',
        provider: { sluice: { npm: '@ai-sdk/openai-compatible', name: 'sluice',
          options: { baseURL: `${ctx.url}/v1`, apiKey: KEY, timeout: 600000 }, models: { [MODEL]: { name: MODEL } } } },
        model: `sluice/${MODEL}`, small_model: `sluice/${MODEL}`, autoupdate: false, share: 'disabled',
        permission: { bash: 'allow', edit: 'allow' },
      }));
      const r = await ctx.exec(bin('opencode'), ['run', ...(resume ? ['--continue'] : []), prompt], {
        XDG_CONFIG_HOME: path.join(ctx.home, '.config'), XDG_DATA_HOME: path.join(ctx.home, '.local', 'share'),
        XDG_CACHE_HOME: path.join(ctx.home, '.cache'), XDG_STATE_HOME: path.join(ctx.home, '.local', 'state'),
        OPENCODE_DISABLE_MODELS_FETCH: '1', OPENCODE_DISABLE_DEFAULT_PLUGINS: '1', OPENCODE_DISABLE_AUTOUPDATE: '1',
        OPENCODE_DISABLE_LSP_DOWNLOAD: '1', OPENCODE_DISABLE_SHARE: '1',
      });
      return r.stdout;
    },
  },
  qwen_code: {
    tool: 'run_shell_command',
    args: { command: COMMAND, description: 'Write a file' },
    async run(ctx, prompt, resume) {
      fs.mkdirSync(path.join(ctx.home, '.qwen'), { recursive: true });
      // Managed auto-memory would send a background extraction request after each session.
      fs.writeFileSync(path.join(ctx.home, '.qwen', 'settings.json'), JSON.stringify({
        security: { auth: { selectedType: 'openai' } }, privacy: { usageStatisticsEnabled: false },
        memory: { enableManagedAutoMemory: false },
      }));
      const r = await ctx.exec(bin('qwen'), ['-p', prompt, '--approval-mode', 'yolo', ...(resume ? ['--continue'] : [])], {
        OPENAI_BASE_URL: `${ctx.url}/v1`, OPENAI_API_KEY: KEY, OPENAI_MODEL: MODEL, QWEN_CODE_SUPPRESS_YOLO_WARNING: '1',
      });
      return r.stdout;
    },
  },
};

const spec = agents[agent];
if (!spec) {
  console.error(`unknown agent ${agent}: ${Object.keys(agents).join(', ')}`);
  process.exit(2);
}

// Forwards the agent's requests to the server, keeping each body (SLUICE_AGENT_RECORD).
function recorder(target, dir) {
  let n = 0;
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      if (req.method === 'POST')
        fs.writeFileSync(path.join(dir, `${String(n++).padStart(3, '0')}${req.url.split('?')[0].replaceAll('/', '_')}.json`), body);
      const up = http.request(`${target}${req.url}`, { method: req.method, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode, r.headers);
        r.pipe(res);
      });
      up.on('error', () => res.destroy());
      up.end(body);
    });
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve({ url: `http://127.0.0.1:${server.address().port}`, close: () => server.close() })));
}

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), `sluice-agent-${agent}-`));
const work = path.join(tmp, 'work');
fs.mkdirSync(work);
const recording = Boolean(process.env.SLUICE_AGENT_RECORD);
const model = makeAgentModel(makeModel, path.join(tmp, 'model'),
  { name: spec.tool, args: spec.args, answer: ANSWER, perTurn: recording });
const server = await startServer(binary, model, ['--served-model-name', MODEL, '--api-key', KEY]);
const record = process.env.SLUICE_AGENT_RECORD ? await recorder(server.url, process.env.SLUICE_AGENT_RECORD) : null;
let failed = false;
const ctx = {
  url: record ? record.url : server.url,
  home: path.join(tmp, 'home'),
  // Runs the agent with only these variables beside PATH (no proxies, no keys of the machine).
  exec(file, args, env) {
    fs.mkdirSync(this.home, { recursive: true });
    return new Promise((resolve, reject) => {
      const child = spawn(file, args, {
        cwd: work, stdio: ['ignore', 'pipe', 'pipe'],
        env: { PATH: process.env.PATH, HOME: this.home, TERM: 'dumb', LANG: 'C.UTF-8', NO_COLOR: '1', CI: '1', ...env },
      });
      let stdout = '', stderr = '';
      child.stdout.on('data', (d) => (stdout += d));
      child.stderr.on('data', (d) => (stderr += d));
      const timer = setTimeout(() => child.kill('SIGKILL'), 600000);
      child.on('exit', (code, signal) => {
        clearTimeout(timer);
        process.stdout.write(`--- ${path.basename(file)} ${args.join(' ')}: exit ${code ?? signal}\n${stdout}\n${stderr}\n`);
        if (code === 0) resolve({ stdout, stderr });
        else reject(new Error(`${path.basename(file)} exited with ${code ?? signal}`));
      });
    });
  },
};
try {
  const prompts = [[1, 'Write sluice into agent.txt.', false], [2, 'What did you write?', true]];
  if (recording)
    for (let i = 3; i <= Number(process.env.SLUICE_AGENT_TURNS ?? 7); i++) prompts.push([i, `Write it again (${i}).`, true]);
  if (recording && process.env.SLUICE_AGENT_NEW_SESSION === '1') prompts.push([prompts.length + 1, 'Write sluice into agent.txt, please.', false]);
  for (const [turn, prompt, resume] of prompts) {
    const t0 = Date.now();
    const answer = await spec.run(ctx, prompt, resume);
    assert.ok(answer.includes(ANSWER), `turn ${turn}: the answer is missing from the agent's output:\n${answer}`);
    if (turn === 1 || recording) assert.equal(fs.readFileSync(path.join(work, 'agent.txt'), 'utf8').trim(), 'sluice');
    if (recording) fs.rmSync(path.join(work, 'agent.txt'));
    console.log(`ok   ${agent}: turn ${turn} (${Date.now() - t0} ms)`);
  }
} catch (e) {
  failed = true;
  console.log(`FAIL ${agent}: ${e && e.stack ? e.stack : e}`);
} finally {
  record?.close();
  const stopped = await server.stop();
  if (stopped.code !== 0) {
    failed = true;
    console.log(`FAIL the server exited with ${JSON.stringify(stopped)}`);
  }
  fs.rmSync(tmp, { recursive: true, force: true });
}
console.log(failed ? '0 passed, 1 failed' : '1 passed, 0 failed');
process.exit(failed ? 1 : 0);
