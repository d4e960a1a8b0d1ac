# Sourced by the bench scripts that set a read rate against the drive's own:
#   fio_read_gbps FILES KB DEPTH SECONDS
# prints fio's O_DIRECT io_uring random-read rate in GB/s (1e9 bytes) over FILES
# (colon-separated, as fio's --filename takes them) with KB KiB reads kept DEPTH
# deep, the way sluice's expert reader reads (--read-kb, --queue-depth).
# Needs fio.
fio_read_gbps() {
  local files=$1 kb=$2 qd=$3 secs=$4
  command -v fio >/dev/null || { echo "fio is not installed (apt-get install fio)" >&2; return 1; }
  fio --name=r --filename="$files" --rw=randread --bs="${kb}k" --iodepth="$qd" --direct=1 --ioengine=io_uring \
    --runtime="$secs" --time_based --readonly --output-format=json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"][0]["read"]["bw_bytes"]/1e9)'
}
