#!/usr/bin/env python3
"""`serve` under mpirun answers as one process does: rank 0 serves HTTP and the
other ranks follow its sessions (cluster/session_followers.h), each computing
its share of every layer's routed experts.

Usage: serve_test.py SLUICE MPIRUN MODEL_DIR [RANKS]

The same script of requests goes to `sluice serve --parallel 2` run alone and
under `mpirun -np RANKS`, and every reply must be the same, text and usage:
a greedy completion; a longer prompt that starts with the first one's prompt
and reply (its prefix comes from the prompt cache: cached_tokens > 0); a
streamed request whose client goes away after a few tokens (cancelled on rank
0, which the followers learn only from what rank 0 tells them) followed by
another that must still be the same; two requests at once (decoded together in
batched passes); and a chat completion. The followers must have done real work
(SLUICE_CLUSTER_STATS: every rank computed part of the expert rows), and the
job must stop cleanly on SIGTERM.
"""
import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

MODEL = "m"  # set from the model directory: the server serves it under its name

STATS = re.compile(r"rank (\d+) of (\d+) \(.*\): (\d+) exchanges, computed (\d+) of (\d+) expert rows")
# Printable ASCII only (the model reads ids 0-255 as bytes): replies stay text, one token per character.
BIAS = {str(i): -100 for i in range(1024) if i < 32 or i > 126}


def mpi_env():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_mpi_yield_when_idle="1", SLUICE_CLUSTER_STATS="1")
    return env


class Server:
    def __init__(self, cmd, env, mpi=False):
        self.rank0 = None
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        self.log = []
        self.port = None
        started = threading.Event()

        def read():
            for line in self.proc.stderr:
                self.log.append(line)
                m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                m = re.search(r"rank 0 of \d+ serves as pid (\d+)", line)
                if m:
                    self.rank0 = int(m.group(1))
                if self.port and (self.rank0 or not mpi):
                    started.set()
            started.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        if not started.wait(240) or self.port is None:
            self.proc.kill()
            sys.exit(f"FAIL: {' '.join(cmd)} did not start:\n{''.join(self.log)}")

    def text(self):
        return "".join(self.log)

    def post(self, path, body, timeout=120):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read().decode()
        c.close()
        if r.status != 200:
            raise AssertionError(f"{path}: HTTP {r.status}: {data}")
        return json.loads(data)

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        c.request("GET", path)
        r = c.getresponse()
        data = r.read().decode()
        c.close()
        return r.status, data

    def stop(self):
        # Under mpirun SIGTERM goes to rank 0, which drains and stops the others (mpirun's own kills them at once).
        if self.rank0:
            os.kill(self.rank0, signal.SIGTERM)
        else:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            sys.exit(f"FAIL: the server did not stop within 60 s of SIGTERM:\n{self.text()}")
        self.reader.join(10)
        return self.proc.returncode


def completion(prompt, max_tokens, **extra):
    return dict({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "logit_bias": BIAS}, **extra)


def reply(r):
    """What must be the same: the text, why it ended, and the token counts (cached ones included)."""
    c = r["choices"][0]
    text = c["text"] if "text" in c else c["message"]["content"]
    return {"text": text, "finish_reason": c["finish_reason"], "usage": r["usage"]}


def cancelled_stream(srv, prompt):
    """A streamed completion whose client leaves after its first 3 chunks."""
    c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=120)
    c.request("POST", "/v1/completions", json.dumps(completion(prompt, 200, stream=True)),
              {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise AssertionError(f"stream: HTTP {r.status}: {r.read()}")
    got = 0
    while got < 3:
        line = r.fp.readline()
        if not line:
            break
        if line.startswith(b"data: {"):
            got += 1
    c.sock.close()  # gone: the server cancels the request
    c.close()
    return got


def script(srv):
    out = {}
    p1 = "The quick brown fox jumps over"
    out["first"] = reply(srv.post("/v1/completions", completion(p1, 24)))
    # Starts with the first prompt and its reply: that prefix is reused from the prompt cache.
    p2 = p1 + out["first"]["text"] + " and then"
    out["reuse"] = reply(srv.post("/v1/completions", completion(p2, 24)))
    if out["reuse"]["usage"]["prompt_tokens_details"]["cached_tokens"] <= 0:
        raise AssertionError(f"the second request reused nothing from the first: {out['reuse']}")
    out["stream_chunks"] = cancelled_stream(srv, "Once upon a time there was a")
    time.sleep(0.5)  # the server notices the closed connection at its next token
    out["after_cancel"] = reply(srv.post("/v1/completions", completion("Once upon a time there was a", 24)))
    # Two at once: decoded together (--parallel 2), each the same as alone.
    results = {}

    def one(name, prompt):
        try:
            results[name] = reply(srv.post("/v1/completions", completion(prompt, 32)))
        except Exception as e:  # noqa: BLE001 - reported below
            results[name] = f"error: {e}"

    ts = [threading.Thread(target=one, args=(n, p)) for n, p in (("a", "Hello world, this is"), ("b", "In 1492 a"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    out["together_a"], out["together_b"] = results["a"], results["b"]
    out["chat"] = reply(srv.post("/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "Say something."}], "max_tokens": 16,
        "temperature": 0, "logit_bias": BIAS}))
    return out


def main():
    sluice, mpirun, model = sys.argv[1:4]
    global MODEL
    MODEL = os.path.basename(os.path.normpath(model))
    ranks = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    # Small chunks and spans: prompts go in several pieces, spans layer by layer, each sent to the followers.
    args = ["serve", "--model", model, "--host", "127.0.0.1", "--port", "0", "--parallel", "2", "--cache-slots", "2",
            "--prefill-chunk", "8", "--prefill-span", "16"]
    t0 = time.time()
    alone = Server([sluice] + args, dict(os.environ))
    try:
        want = script(alone)
    finally:
        rc = alone.stop()
    if rc != 0:
        sys.exit(f"FAIL: the single-process server exited {rc}:\n{alone.text()}")
    t1 = time.time()
    job = Server([mpirun, "--oversubscribe", "-np", str(ranks), sluice] + args, mpi_env(), mpi=True)
    try:
        status, body = job.get("/health")
        if status != 200:
            sys.exit(f"FAIL: /health of the mpirun job: {status} {body}")
        got = script(job)
    finally:
        rc = job.stop()
    t2 = time.time()
    log = job.text()
    bad = [k for k in want if k != "stream_chunks" and want[k] != got[k]]
    if bad:
        sys.exit("FAIL: the mpirun job's replies differ from one process's:\n" +
                 "\n".join(f"{k}:\n  alone: {want[k]}\n  mpirun: {got[k]}" for k in bad))
    if rc != 0:
        sys.exit(f"FAIL: the mpirun job exited {rc} after SIGTERM to rank 0:\n{log}")
    seen = {}
    for m in STATS.finditer(log):
        r, n, ex, mine, total = (int(x) for x in m.groups())
        seen[r] = (ex, mine, total)
    shares = [seen.get(r, (0, 0, 0))[1] for r in range(ranks)]
    if sorted(seen) != list(range(ranks)) or len({v[0] for v in seen.values()}) != 1 or any(s == 0 for s in shares):
        sys.exit(f"FAIL: the ranks' own counts do not show the work split between them: {seen}\n{log}")
    cancelled = "client gone" in log or "cancelled" in log
    print(f"alone {t1 - t0:.1f} s, {ranks} ranks {t2 - t1:.1f} s; {len(want) - 1} replies the same; expert rows per "
          f"rank {shares} of {seen[0][2]} in {seen[0][0]} exchanges; stream cut after {got['stream_chunks']} chunks"
          f"{' (cancelled on the server)' if cancelled else ''}")
    print("PASS")


if __name__ == "__main__":
    main()
