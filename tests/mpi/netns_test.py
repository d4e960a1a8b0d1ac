#!/usr/bin/env python3
"""Expert parallelism is exact between hosts too: 3 ranks, each in its own
network namespace joined by veth links (scripts/netns-ranks.sh), so that they
talk over TCP as separate machines would and never over shared memory, write
the same logits bit for bit and generate the same tokens as one process.

Usage: netns_test.py SLUICE MPIRUN NETNS_SCRIPT MODEL_DIR REFERENCE [RANKS]

For the golden model: `sluice logits` over the reference's input ids decoded
from position 1 (one exchange per MoE layer per token: the most round trips),
compared as raw float bytes, and `sluice generate` greedy from the reference's
prompt, compared as printed. The links must have carried the exchanges: the
bytes the ranks' links sent (the script's counters) are at least the expert
outputs the ranks say they sent (SLUICE_CLUSTER_STATS), so the ranks did not
reach each other some other way. Needs root (namespaces).
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sharded_test import check_split, ints, read_tensor  # noqa: E402

SENT = re.compile(r"rank (\d+) of \d+ \(.*\): .* sent (\d+) bytes, received \d+ bytes")
LINK = re.compile(r"netns-ranks: rank (\d+) link sent (\d+) bytes")


def run(cmd, env=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=600)
    if r.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {r.returncode}\nstdout:\n{r.stdout}\nstderr:\n{r.stderr}")
    return r


def check_links(stderr, ranks, what):
    exchanged = {int(r): int(b) for r, b in SENT.findall(stderr)}
    link = {int(r): int(b) for r, b in LINK.findall(stderr)}
    if sorted(exchanged) != list(range(ranks)) or sorted(link) != list(range(ranks)):
        sys.exit(f"FAIL: {what}: no byte counts from every rank and link\nstderr:\n{stderr}")
    # Summed over the ranks: an allgather may relay rows (a ring forwards its neighbours'), so one
    # rank's link may carry more or less than its own rows, but all links carry at least all of them.
    if sum(link.values()) < sum(exchanged.values()):
        sys.exit(f"FAIL: {what}: the links sent {sum(link.values())} bytes, less than the {sum(exchanged.values())} "
                 "bytes of expert outputs the ranks exchanged: the exchange did not go over the links")
    print(f"  {what}: the links carried {sum(link.values())} bytes for {sum(exchanged.values())} bytes of expert outputs")


def main():
    sluice, mpirun, script, model, ref = sys.argv[1:6]
    ranks = int(sys.argv[6]) if len(sys.argv) > 6 else 3
    env = dict(os.environ)
    env.update(SLUICE_CLUSTER_STATS="1", OMPI_MCA_mpi_yield_when_idle="1")
    env.pop("OMPI_MCA_btl", None)  # the script chooses TCP on the links; nothing may add shared memory
    mpi = [script, "-n", str(ranks), "--mpirun", mpirun, "--", sluice]
    ids = ints(ref, "input_ids")
    tokens = ",".join(str(i) for i in ids)
    tmp = os.environ.get("TMPDIR", "/tmp")
    one = os.path.join(tmp, f"netns-one-{os.getpid()}.st")
    many = os.path.join(tmp, f"netns-many-{os.getpid()}.st")
    try:
        args = ["logits", "--model", model, "--tokens", tokens, "--decode-from", "1", "--ram", "map"]
        run([sluice] + args + ["--output", one])
        r = run(mpi + args + ["--output", many], env)
        what = f"logits of {len(ids)} tokens decoded one by one"
        check_split(r.stderr, ranks, what)
        check_links(r.stderr, ranks, what)
        t1, a = read_tensor(one, "logits")
        t2, b = read_tensor(many, "logits")
        if t1 is None or t2 is None or t1["shape"] != t2["shape"]:
            sys.exit(f"FAIL: {what}: logits missing or shapes differ ({t1}, {t2})")
        if a != b:
            diff = sum(1 for i in range(0, len(a), 4) if a[i:i + 4] != b[i:i + 4])
            sys.exit(f"FAIL: {what}: {diff} of {len(a) // 4} logits differ from one process")
        print(f"  {what}: {len(a) // 4} logits bit-identical")
    finally:
        for p in (one, many):
            if os.path.exists(p):
                os.remove(p)
    prompt = ints(ref, "greedy_prompt") or ids[:8]
    args = ["generate", "--model", model, "--tokens", ",".join(str(i) for i in prompt), "--max-new", "12",
            "--ignore-eos"]
    single = run([sluice] + args).stdout
    r = run(mpi + args, env)
    check_split(r.stderr, ranks, "generate")
    check_links(r.stderr, ranks, "generate")
    if r.stdout != single or not single.strip():
        sys.exit(f"FAIL: generate printed\n{r.stdout!r}\nin namespaces, but one process printed\n{single!r}")
    print(f"  generate: same output ({single.strip()[:80]})")
    print("PASS")


if __name__ == "__main__":
    main()
