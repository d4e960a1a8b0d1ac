#!/usr/bin/env python3
"""`chat` under mpirun prints what one process prints: rank 0 reads the
terminal's lines and prints the replies, the other ranks follow its sessions
(each turn reuses the conversation so far: prefix reuse, rollbacks).

Usage: chat_test.py SLUICE MPIRUN MODEL_DIR [RANKS]

Three scripted lines, greedy and sampled with a seed, alone and under
`mpirun -np RANKS`: stdout must be the same byte for byte, so must each turn's
counts (--stats: prompt tokens, reused, reply tokens; later turns reuse the
earlier ones), and every rank must have computed part of the expert rows
(SLUICE_CLUSTER_STATS).
"""
import os
import re
import subprocess
import sys
import time

STATS = re.compile(r"rank (\d+) of (\d+) \(.*\): (\d+) exchanges, computed (\d+) of (\d+) expert rows")
TURN = re.compile(r"\[prompt \d+ tokens, \d+ reused; reply \d+ tokens, \w+\]")
LINES = b"Hello there\nWhat is two and two?\nTell me more\n/exit\n"


def run(cmd, env):
    r = subprocess.run(cmd, input=LINES, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, timeout=300)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}\nstdout:\n{r.stdout!r}\nstderr:\n{r.stderr.decode()}")
    return r


def main():
    sluice, mpirun, model = sys.argv[1:4]
    ranks = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_btl="self,vader",
               OMPI_MCA_mpi_yield_when_idle="1", SLUICE_CLUSTER_STATS="1")
    for name, extra in (("greedy", []), ("sampled", ["--temperature", "0.8", "--seed", "7"])):
        args = ["chat", "--model", model, "--max-new", "24", "--stats"] + extra
        t0 = time.time()
        alone = run([sluice] + args, env)
        t1 = time.time()
        job = run([mpirun, "--oversubscribe", "-np", str(ranks), sluice] + args, env)
        t2 = time.time()
        if alone.stdout != job.stdout:
            sys.exit(f"FAIL: {name}: mpirun printed\n{job.stdout!r}\nbut one process\n{alone.stdout!r}")
        if alone.stdout.count(b"\n") < 3:
            sys.exit(f"FAIL: {name}: expected three replies, got {alone.stdout!r}")
        # Per turn (--stats): the prompt's tokens, how many were reused from the turns before, the reply's.
        turns = [TURN.findall(r.stderr.decode()) for r in (alone, job)]
        if turns[0] != turns[1] or len(turns[0]) != 3:
            sys.exit(f"FAIL: {name}: turns alone {turns[0]}, under mpirun {turns[1]}")
        if not any(int(m) > 0 for m in re.findall(r"(\d+) reused", "".join(turns[0]))):
            sys.exit(f"FAIL: {name}: no turn reused the conversation before it: {turns[0]}")
        seen = {int(m.group(1)): int(m.group(4)) for m in STATS.finditer(job.stderr.decode())}
        if sorted(seen) != list(range(ranks)) or 0 in seen.values():
            sys.exit(f"FAIL: {name}: the ranks' counts do not show the work split: {seen}\n{job.stderr.decode()}")
        print(f"{name}: {len(alone.stdout)} bytes the same (alone {t1 - t0:.1f} s, {ranks} ranks {t2 - t1:.1f} s); "
              f"expert rows per rank {[seen[r] for r in range(ranks)]}")
    print("PASS")


if __name__ == "__main__":
    main()
