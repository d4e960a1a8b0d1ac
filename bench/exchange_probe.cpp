// The per-layer exchange alone, for bench/netns_ranks.sh: times the MPI_Allgatherv
// sluice's Cluster::share_rows makes (ROWS rows of WIDTH floats split between
// the ranks in contiguous runs, every rank receiving all) with no compute, so
// the link's part of a decode step is measured apart from the model's.
// Built by the script with mpicxx (not part of the CMake build: a benchmark
// tool with no sluice code in it).
//
// Usage: mpirun ... exchange_probe WIDTH ROWS [ITERATIONS] [GAP_MS]
// Rank 0 prints one line: "exchange WIDTH ROWS BYTES mean_us MEAN min_us MIN".
// GAP_MS (0): every rank keeps its core busy that long between exchanges, as a decode
// pass does between its MoE layers' exchanges: the links then idle that long, and TCP
// may shrink its window after an idle spell (tcp_slow_start_after_idle) as in a run.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 3) {
    if (rank == 0) std::fprintf(stderr, "usage: exchange_probe WIDTH ROWS [ITERATIONS] [GAP_MS]\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int width = std::atoi(argv[1]), rows = std::atoi(argv[2]);
  const int iterations = argc > 3 ? std::atoi(argv[3]) : 200;
  const double gap_s = argc > 4 ? std::atof(argv[4]) * 1e-3 : 0;
  std::vector<int> counts(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r) {
    displs[size_t(r)] = int(int64_t(rows) * r / size);
    counts[size_t(r)] = int(int64_t(rows) * (r + 1) / size) - displs[size_t(r)];
  }
  MPI_Datatype row;
  MPI_Type_contiguous(width, MPI_FLOAT, &row);
  MPI_Type_commit(&row);
  std::vector<float> data(size_t(rows) * size_t(width), float(rank));
  double total = 0, best = 1e30;
  volatile double sink = 0;
  for (int i = -5; i < iterations; ++i) {  // five warm-up rounds open the TCP connections
    for (const double until = MPI_Wtime() + gap_s; MPI_Wtime() < until;) sink = sink + 1;  // busy, no MPI
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data(), counts.data(), displs.data(), row,
                   MPI_COMM_WORLD);
    const double t = MPI_Wtime() - t0;
    double slowest = 0;  // the exchange is done when the last rank has all rows
    MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (i >= 0) {
      total += slowest;
      best = std::min(best, slowest);
    }
  }
  if (rank == 0)
    std::printf("exchange width %d rows %d bytes %lld mean_us %.1f min_us %.1f\n", width, rows,
                (long long)rows * width * 4, total / iterations * 1e6, best * 1e6);
  MPI_Type_free(&row);
  MPI_Finalize();
  return 0;
}
