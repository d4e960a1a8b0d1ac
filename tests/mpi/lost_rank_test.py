#!/usr/bin/env python3
"""A rank lost mid-run ends the whole job with an error naming it, instead of
leaving the other ranks waiting in the exchange: rank 1 of 3 is killed
(SIGKILL, SLUICE_CLUSTER_KILL_AT) before its 5th exchange of expert outputs.

Usage: lost_rank_test.py SLUICE MPIRUN MODEL_DIR [NETNS_SCRIPT]

With NETNS_SCRIPT (scripts/netns-ranks.sh) each rank runs in its own network
namespace and the ranks talk over TCP on veth links, as between hosts.
"""
import os
import subprocess
import sys


def main():
    sluice, mpirun, model = sys.argv[1:4]
    netns = sys.argv[4] if len(sys.argv) > 4 else None
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_mpi_yield_when_idle="1",
               SLUICE_CLUSTER_KILL_AT="1:5")
    if netns:  # the script puts TCP on the links; shared memory must not join
        launch = [netns, "-n", "3", "--mpirun", mpirun, "--"]
    else:
        env["OMPI_MCA_btl"] = "self,vader"
        launch = [mpirun, "--oversubscribe", "-np", "3"]
    cmd = launch + [sluice, "generate", "--model", model, "--tokens", "5,17,9", "--max-new", "32", "--ignore-eos"]
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=120)
    except subprocess.TimeoutExpired:
        sys.exit("FAIL: the job hung after rank 1 was killed")
    out = r.stdout
    if r.returncode == 0:
        sys.exit(f"FAIL: the job succeeded although rank 1 was killed:\n{out}")
    if "rank 1" not in out or "signal 9" not in out:
        sys.exit(f"FAIL: exit {r.returncode}, but the output does not name rank 1 and its signal:\n{out}")
    print(f"exit {r.returncode}; " + next(l for l in out.splitlines() if "rank 1" in l).strip())
    print("PASS")


if __name__ == "__main__":
    main()
