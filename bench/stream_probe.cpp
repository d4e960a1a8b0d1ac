// Memory bandwidth of this machine's cores alone and together, for bench/netns_ranks.sh: each of
// two threads (bound to cores 0 and 1) sums its own buffer of MB MiB REPS times, first each alone,
// then both at once. Ranks sharing a machine's memory contend for it where one host's rank would
// not: the spine of a small batch is read at about one core's bandwidth, and when both cores
// stream at once each gets what `both` says. Not part of the CMake build: a benchmark tool with no
// sluice code in it; the script compiles it.
//
// Usage: stream_probe [MB] [REPS]
// Prints one line: "stream alone GB0 GB1 both GB0 GB1" (GB/s of each core).
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

double stream(const float* p, size_t n, int reps, float* sink) {
  const auto t0 = std::chrono::steady_clock::now();
  float acc[16] = {};
  for (int r = 0; r < reps; ++r)
    for (size_t i = 0; i < n; i += 16)
      for (int j = 0; j < 16; ++j) acc[j] += p[i + size_t(j)];
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (const float a : acc) *sink += a;
  return double(n) * 4 * reps / s / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mb = argc > 1 ? size_t(std::atoi(argv[1])) : 512;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 4;
  const size_t n = mb << 18;  // floats
  std::vector<std::vector<float>> buf(2, std::vector<float>(n, 1.0f));
  float sink[2] = {};
  double gbs[2][2] = {};
  auto run = [&](int core, int together) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(core, &s);
    pthread_setaffinity_np(pthread_self(), sizeof(s), &s);
    gbs[together][core] = stream(buf[size_t(core)].data(), n, reps, &sink[core]);
  };
  std::thread(run, 0, 0).join();
  std::thread(run, 1, 0).join();
  std::thread a(run, 0, 1), b(run, 1, 1);
  a.join();
  b.join();
  std::printf("stream alone %.2f %.2f both %.2f %.2f\n", gbs[0][0], gbs[0][1], gbs[1][0], gbs[1][1]);
  return sink[0] + sink[1] > 0 ? 0 : 1;
}
