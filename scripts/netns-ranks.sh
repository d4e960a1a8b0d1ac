#!/usr/bin/env bash
# Runs an mpirun job whose ranks each live in their own network namespace, so
# that the ranks of one machine talk as separate hosts would: over TCP on a
# network link (veth pairs joined by a bridge), never over shared memory.
# Optionally each link is shaped by tc (a token bucket, tbf) to a rate.
# Everything it creates is removed when it exits, whatever the exit.
#
# Usage: scripts/netns-ranks.sh [-n RANKS] [--rate RATE] [--verbose-btl] [--mpirun PATH] -- COMMAND [ARGS...]
#   -n RANKS       ranks, one namespace each (3)
#   --rate RATE    shape each rank's outgoing link to RATE (tc syntax: 10gbit, 25gbit); unshaped without it
#   --verbose-btl  --mca btl_base_verbose 100: OpenMPI says which transport each pair of ranks uses
#   --mpirun PATH  the mpirun to use (mpirun on PATH)
#   extra mpirun options go in NETNS_MPIRUN_ARGS (split on spaces)
# Needs root (ip netns, ip link, tc). The job's exit status is the script's. At the end it prints on
# stderr the bytes each rank's link carried ("netns-ranks: rank K link sent N bytes ...").
#
# Why a bridge: N ranks need all-to-all links; one veth per namespace to a
# bridge in the root namespace gives that with N links, each shaped where it
# leaves the namespace (and where it leaves the bridge, so both directions are).
#
# mpirun and its PMIx server stay in the root namespace; the ranks reach it
# over PMIx's TCP listener (OpenMPI 4.1 with PMIx 4 listens on loopback only by
# default, which a namespace cannot reach), so the bridge gets an address in the
# root namespace and PMIx is told to accept connections from the subnet.
set -euo pipefail

ranks=3
rate=""
verbose=0
mpirun=mpirun
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n) ranks="$2"; shift 2 ;;
    --rate) rate="$2"; shift 2 ;;
    --verbose-btl) verbose=1; shift ;;
    --mpirun) mpirun="$2"; shift 2 ;;
    --) shift; break ;;
    *) echo "netns-ranks.sh: unknown option $1 (usage: see the header of $0)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "netns-ranks.sh: no command (usage: ... -- COMMAND [ARGS...])" >&2; exit 2; }
[[ $(id -u) -eq 0 ]] || { echo "netns-ranks.sh: needs root (ip netns, ip link, tc)" >&2; exit 2; }
((ranks >= 1 && ranks <= 200)) || { echo "netns-ranks.sh: -n must be 1..200" >&2; exit 2; }

if [[ -n $rate ]]; then
  [[ $rate =~ ^([0-9]+)(k|m|g)?bit$ ]] || { echo "netns-ranks.sh: --rate $rate: expected e.g. 10gbit, 500mbit" >&2; exit 2; }
  case "${BASH_REMATCH[2]}" in k) mult=1000 ;; m) mult=1000000 ;; g) mult=1000000000 ;; *) mult=1 ;; esac
  rate_bps=$(( BASH_REMATCH[1] * mult ))
fi

# A tag unique to this run, so that several jobs (ctest -j) do not share names;
# the subnet is per run too, as the bridge's address lives in the root namespace.
tag="s$(( $$ % 100000 ))"
octet=$(( 16 + $$ % 224 ))
while ip -4 addr show | grep -q " 10.$octet.0.254/"; do octet=$(( 16 + (octet - 15) % 224 )); done
subnet="10.$octet.0.0/24"
bridge="${tag}br"

cleanup() {
  for ((k = 0; k < ranks; k++)); do
    ip netns del "${tag}n$k" 2>/dev/null || true  # takes its veth end, and with it the pair
    ip link del "${tag}h$k" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM  # until mpirun starts (below)

ip link add "$bridge" type bridge
ip addr add "10.$octet.0.254/24" dev "$bridge"
ip link set "$bridge" up
for ((k = 0; k < ranks; k++)); do
  ns="${tag}n$k"
  ip netns add "$ns"
  ip link add "${tag}h$k" type veth peer name "${tag}r$k"
  ip link set "${tag}r$k" netns "$ns"
  ip link set "${tag}h$k" master "$bridge" up
  ip -n "$ns" addr add "10.$octet.0.$((k + 1))/24" dev "${tag}r$k"
  ip -n "$ns" link set "${tag}r$k" up
  ip -n "$ns" link set lo up
  ip -n "$ns" route add default via "10.$octet.0.254"
  if [[ -n $rate ]]; then
    # burst: rate x 1 ms, at least 200 KB (three 64 KB TSO segments), so tbf shapes TCP's bursts instead of dropping them.
    burst=$(( rate_bps / 8 / 1000 > 200000 ? rate_bps / 8 / 1000 : 200000 ))
    ip netns exec "$ns" tc qdisc add dev "${tag}r$k" root tbf rate "$rate" burst "$burst" latency 50ms
    tc qdisc add dev "${tag}h$k" root tbf rate "$rate" burst "$burst" latency 50ms
  fi
done

# MPMD: one app context per rank, each wrapped in its namespace.
app=()
for ((k = 0; k < ranks; k++)); do
  ((k == 0)) || app+=(":")
  app+=(-np 1 ip netns exec "${tag}n$k" "$@")
done
mca=(--mca btl tcp,self --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet")
((verbose == 0)) || mca+=(--mca btl_base_verbose 100)
# PMIx (rank <-> mpirun): accept the ranks' connections from the bridge's subnet.
export PMIX_MCA_ptl_tcp_remote_connections=1
export PMIX_MCA_ptl_tcp_if_include="$subnet"
# shellcheck disable=SC2206
extra=(${NETNS_MPIRUN_ARGS:-})
# In the background so that a signal to this script is handled at once (bash runs traps only
# between commands): mpirun is stopped, then the namespaces go.
"$mpirun" --allow-run-as-root --oversubscribe "${mca[@]}" "${extra[@]}" "${app[@]}" &
job=$!
trap 'kill -TERM "$job" 2>/dev/null; wait "$job"; exit 130' INT TERM
set +e
wait "$job"
status=$?
set -e
# What each rank's link carried (the root side's counters: what it received is what the rank sent),
# so a caller can check that the ranks' traffic went over the links and measure it.
for ((k = 0; k < ranks; k++)); do
  stats=/sys/class/net/${tag}h$k/statistics
  echo "netns-ranks: rank $k link sent $(<"$stats/rx_bytes") bytes in $(<"$stats/rx_packets") packets," \
    "received $(<"$stats/tx_bytes") bytes" >&2
done
exit "$status"
