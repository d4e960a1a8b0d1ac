#!/usr/bin/env python3
"""A rank lost while `serve` runs under mpirun: rank 1 of 3 is killed
(SIGKILL, SLUICE_CLUSTER_KILL_AT) in the middle of a request.

Usage: serve_lost_rank_test.py SLUICE MPIRUN MODEL_DIR

With `mpirun --enable-recovery` (mpirun then lets the other ranks run on):
the request fails with an error naming rank 1, /health answers 503 with a JSON
body saying rank 1 was lost and on which host, a later request fails at once
with the same reason (503), and SIGTERM still stops the server. Without it
mpirun ends the whole job, naming rank 1, instead of leaving it waiting.
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


def env_with(kill_at):
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_mpi_yield_when_idle="1", SLUICE_CLUSTER_KILL_AT=kill_at)
    return env


def start(cmd, env):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    log, port, started = [], [None], threading.Event()

    def read():
        for line in proc.stdout:
            log.append(line)
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            if m:
                port[0] = int(m.group(1))
                started.set()
        started.set()

    threading.Thread(target=read, daemon=True).start()
    if not started.wait(240) or port[0] is None:
        proc.kill()
        sys.exit(f"FAIL: {' '.join(cmd)} did not start:\n{''.join(log)}")
    return proc, port[0], log


def request(port, method, path, body=None, timeout=60):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request(method, path, json.dumps(body) if body is not None else None, {"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read().decode()
    c.close()
    return r.status, data


def completion():
    return {"model": MODEL, "prompt": "The quick brown fox", "max_tokens": 120, "temperature": 0}


def main():
    sluice, mpirun, model = sys.argv[1:4]
    global MODEL
    MODEL = os.path.basename(os.path.normpath(model))
    serve = [sluice, "serve", "--model", model, "--host", "127.0.0.1", "--port", "0"]
    # Rank 1 dies before its 40th exchange of expert outputs: some passes into the request.
    t0 = time.time()
    proc, port, log = start([mpirun, "--oversubscribe", "--enable-recovery", "-np", "3"] + serve, env_with("1:40"))
    try:
        try:
            status, body = request(port, "POST", "/v1/completions", completion(), timeout=60)
        except TimeoutError:
            sys.exit(f"FAIL: the request hung after rank 1 was killed:\n{''.join(log)}")
        # Its status line may have gone out already (200): the body is then the error.
        failed = json.loads(body).get("error", {}).get("message", "") if body.startswith("{") else ""
        if not re.search(r"rank 1 \(on .+\) was lost", failed):
            sys.exit(f"FAIL: the request answered {status} {body} although rank 1 was killed during it")
        t_fail = time.time() - t0
        status, health = request(port, "GET", "/health")
        reason = json.loads(health).get("reason", "") if status == 503 else ""
        if status != 503 or not re.search(r"rank 1 \(on .+\) was lost", reason):
            sys.exit(f"FAIL: /health answered {status} {health}, expected 503 naming rank 1 and its host")
        t = time.time()
        status, body = request(port, "POST", "/v1/completions", completion(), timeout=30)
        if status != 503 or "rank 1" not in body or time.time() - t > 5:
            sys.exit(f"FAIL: a request after the loss answered {status} {body} in {time.time() - t:.1f} s, expected "
                     f"an immediate 503 naming rank 1")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            sys.exit(f"FAIL: the server did not stop within 60 s of SIGTERM after the loss:\n{''.join(log)}")
    print(f"--enable-recovery: the request failed after {t_fail:.1f} s naming rank 1; /health 503: {reason}")

    # Without --enable-recovery mpirun ends the job (the server too) and names the rank.
    proc, port, log = start([mpirun, "--oversubscribe", "-np", "3"] + serve, env_with("1:40"))
    try:
        request(port, "POST", "/v1/completions", completion(), timeout=60)
    except (OSError, http.client.HTTPException):
        pass  # the server was ended with the job
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        sys.exit(f"FAIL: without --enable-recovery the job did not end after rank 1 was killed:\n{''.join(log)}")
    out = "".join(log)
    # Either mpirun names rank 1 and its signal, or (when another rank's exit reaches mpirun first:
    # the survivors end once rank 0 has failed the request) rank 0's error names rank 1 as lost.
    by_mpirun = "rank 1" in out and "signal 9" in out
    by_sluice = "rank 1 (on " in out and "was lost" in out
    if proc.returncode == 0 or not (by_mpirun or by_sluice):
        sys.exit(f"FAIL: exit {proc.returncode}, but neither mpirun nor rank 0 names rank 1 as lost:\n{out}")
    print(f"default: the job ended (exit {proc.returncode}), mpirun naming rank 1")
    print("PASS")


if __name__ == "__main__":
    main()
