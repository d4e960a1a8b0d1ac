#include "cluster/cluster.h"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "cluster/rank_watch.h"
#include "kernels/isa.h"
#include "util/error.h"
#include "util/thread_pool.h"

#if SLUICE_HAVE_MPI
#include <mpi.h>
#endif

namespace sluice {

namespace {

Cluster* g_cluster = nullptr;

// mpirun (OpenMPI's, or another PMI launcher) tells its ranks who they are through the environment.
bool started_by_mpirun() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (const char* s = std::getenv(v); s && *s) return true;
  return false;
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "?";
  return buf;
}

class SingleProcess : public Cluster {
 public:
  int32_t rank() const override { return 0; }
  int32_t ranks() const override { return 1; }
  std::string host() const override { return hostname(); }
  ExpertExchange* exchange() override { return nullptr; }
  std::vector<std::string> gather(const std::string& text) override { return {text}; }
  void broadcast(std::string&) override {}
  void watch_ranks() override {}
  void unwatch() override {}
  [[noreturn]] void abort(const std::string& message, int code) override {
    std::fprintf(stderr, "sluice: error: %s\n", message.c_str());
    std::exit(code);
  }
};

#if SLUICE_HAVE_MPI
std::string mpi_error(int rc) {
  char s[MPI_MAX_ERROR_STRING] = {};
  int n = 0;
  MPI_Error_string(rc, s, &n);
  return std::string(s, size_t(n));
}

class MpiCluster : public Cluster, public ExpertExchange {
 public:
  MpiCluster(int& argc, char**& argv) {
    int provided = 0;
    // MPI's own threads (OpenMPI's progress and PMIx threads) start here: with SIGINT and SIGTERM blocked
    // in them, such a signal reaches this thread (or the server's signal thread, server/stop_signals.h)
    // instead of ending the process from one of theirs.
    sigset_t stop, before;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, &before);
    // Serialized: whichever thread runs the forward pass (the server's batch thread) calls MPI, one at a time.
    MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided);
    pthread_sigmask(SIG_SETMASK, &before, nullptr);
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    // A failed collective (a lost rank) comes back as an error code, said as a sluice error.
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    host_ = hostname();
    // Ranks sharing a host share its cores: each gets its part unless --threads says otherwise.
    MPI_Comm local;
    if (MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local) == MPI_SUCCESS) {
      int local_size = 1;
      MPI_Comm_size(local, &local_size);
      MPI_Comm_free(&local);
      const int hw = int(std::thread::hardware_concurrency());
      if (local_size > 1 && hw > 0) ThreadPool::set_default_threads(std::max(1, hw / local_size));
    }
    if (rank_ > 0) {  // rank 0 speaks for the job; the others keep their stderr for their own errors
      err_fd_ = dup(2);
      const int null = open("/dev/null", O_WRONLY);
      if (null >= 0) {
        dup2(null, 1);
        dup2(null, 2);
        close(null);
      }
    }
    check_same_isa();
    // Tests: SLUICE_CLUSTER_KILL_AT=RANK:N kills rank RANK (SIGKILL) before its N-th exchange, a lost rank.
    if (const char* k = std::getenv("SLUICE_CLUSTER_KILL_AT"); k && *k) {
      int r = -1;
      long long n = 0;
      if (std::sscanf(k, "%d:%lld", &r, &n) != 2 || n < 1) fail("SLUICE_CLUSTER_KILL_AT={}: expected RANK:N", k);
      if (r == rank_) kill_at_ = uint64_t(n);
    }
  }
  ~MpiCluster() override {
    if (const char* s = std::getenv("SLUICE_CLUSTER_STATS"); s && *s && std::string(s) != "0")
      say(fmt::format("sluice: rank {} of {} ({}): {} exchanges, computed {} of {} expert rows, sent {} bytes, "
                      "received {} bytes\n",
                      rank_, size_, host_, exchanges_, rows_computed_, rows_total_, bytes_sent_, bytes_received_));
    const bool lost = watch_ && watch_->is_lost();
    watch_.reset();
    // After a lost rank the others' collectives are still pending: finalizing would wait for them forever.
    if (!lost) {
      for (auto& [w, t] : row_types_) MPI_Type_free(&t);
      MPI_Comm_free(&comm_);
      MPI_Finalize();
    }
    if (err_fd_ >= 0) close(err_fd_);
    set_expert_exchange(nullptr);
    g_cluster = nullptr;
  }

  int32_t rank() const override { return rank_; }
  int32_t ranks() const override { return size_; }
  std::string host() const override { return host_; }
  ExpertExchange* exchange() override { return size_ > 1 ? this : nullptr; }

  std::vector<std::string> gather(const std::string& text) override {
    const int n = int(text.size());
    std::vector<int> sizes(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
    int rc = MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, comm_);
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      displs[size_t(r)] = int(total);
      total += sizes[size_t(r)];
    }
    std::string all(size_t(total), '\0');
    if (rc == MPI_SUCCESS)
      rc = MPI_Allgatherv(text.data(), n, MPI_CHAR, all.data(), sizes.data(), displs.data(), MPI_CHAR, comm_);
    if (rc != MPI_SUCCESS) fail("the ranks could not exchange their reports (rank {}, {}): {}", rank_, host_, mpi_error(rc));
    std::vector<std::string> out;
    for (int r = 0; r < size_; ++r) out.push_back(all.substr(size_t(displs[size_t(r)]), size_t(sizes[size_t(r)])));
    return out;
  }

  void broadcast(std::string& bytes) override {
    check_not_lost();
    uint64_t n = bytes.size();
    wait(ibcast(&n, 1, MPI_UINT64_T), "a command");
    if (rank_ != 0) bytes.resize(size_t(n));
    // In pieces: one MPI message counts at most INT_MAX elements (a state image may be larger).
    for (uint64_t at = 0; at < n; at += kPiece)
      wait(ibcast(bytes.data() + at, int(std::min<uint64_t>(kPiece, n - at)), MPI_CHAR), "a command");
  }

  void watch_ranks() override {
    const std::vector<std::string> hosts = gather(host_);
    std::string address;
    if (rank_ == 0) {
      auto w = RankWatch::listen(hosts);
      address = w->address();
      broadcast(address);
      w->accept_ranks(20);
      watch_ = std::move(w);
    } else {
      broadcast(address);
      watch_ = RankWatch::connect(address, rank_, [this](const std::string& why) {
        say(fmt::format("sluice: {}: rank {} of {} (on {}) stops\n", why, rank_, size_, host_));
        std::_Exit(1);
      });
    }
  }
  void unwatch() override {
    if (watch_) watch_->stop();
  }
  std::string lost() const override { return watch_ ? watch_->lost() : std::string(); }

  [[noreturn]] void abort(const std::string& message, int code) override {
    say(fmt::format("sluice: {} (rank {} of {}, on {})\n", message, rank_, size_, host_));
    MPI_Abort(comm_, code);
    std::_Exit(code);
  }

  void share_rows(float* rows, int64_t width, std::span<const int64_t> begin) override {
    if (int64_t(begin.size()) != int64_t(size_) + 1) fail("internal: {} row boundaries for {} ranks", begin.size(), size_);
    if (begin.back() > INT_MAX || width > INT_MAX)
      fail("a layer's expert outputs ({} rows of {} floats) are too many for one MPI message", begin.back(), width);
    std::vector<int> counts(static_cast<size_t>(size_)), displs(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r) {
      displs[size_t(r)] = int(begin[size_t(r)]);
      counts[size_t(r)] = int(begin[size_t(r) + 1] - begin[size_t(r)]);
    }
    if (kill_at_ > 0 && exchanges_ + 1 == kill_at_) raise(SIGKILL);
    check_not_lost();
    MPI_Request req = MPI_REQUEST_NULL;
    int rc = MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, rows, counts.data(), displs.data(), row_type(width),
                             comm_, &req);
    if (rc == MPI_SUCCESS) wait(req, "the expert outputs");
    if (rc != MPI_SUCCESS)
      fail("the exchange of expert outputs between the {} ranks failed on rank {} ({}): {} (a rank has stopped? "
           "mpirun's message names it)",
           size_, rank_, host_, mpi_error(rc));
    const int64_t mine = counts[size_t(rank_)], bytes = int64_t(sizeof(float)) * width;
    ++exchanges_;
    rows_computed_ += uint64_t(mine);
    rows_total_ += uint64_t(begin.back());
    bytes_sent_ += uint64_t(mine * bytes * (size_ - 1));
    bytes_received_ += uint64_t((begin.back() - mine) * bytes);
  }

  int64_t agree_min(int64_t value) override {
    int64_t out = value;
    const int rc = MPI_Allreduce(&value, &out, 1, MPI_INT64_T, MPI_MIN, comm_);
    if (rc != MPI_SUCCESS) fail("the ranks could not agree (rank {}, {}): {}", rank_, host_, mpi_error(rc));
    return out;
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::string host_;
  int err_fd_ = -1;  // the terminal's stderr on ranks other than 0
  std::map<int64_t, MPI_Datatype> row_types_;
  uint64_t kill_at_ = 0;  // SLUICE_CLUSTER_KILL_AT
  uint64_t exchanges_ = 0, rows_computed_ = 0, rows_total_ = 0, bytes_sent_ = 0, bytes_received_ = 0;

  void say(const std::string& s) const {
    const int fd = err_fd_ >= 0 ? err_fd_ : 2;
    if (write(fd, s.data(), s.size()) < 0) return;
  }

  std::unique_ptr<RankWatch> watch_;  // serve and chat (watch_ranks)

  void check_not_lost() const {
    if (watch_ && watch_->is_lost())
      fail("{}; the ranks cannot compute together any more (restart the job)", watch_->lost());
  }

  static constexpr uint64_t kPiece = uint64_t(1) << 30;

  MPI_Request ibcast(void* data, int count, MPI_Datatype type) {
    MPI_Request req = MPI_REQUEST_NULL;
    const int rc = MPI_Ibcast(data, count, type, 0, comm_, &req);
    if (rc != MPI_SUCCESS) fail("rank {} ({}) could not take part in a broadcast: {}", rank_, host_, mpi_error(rc));
    return req;
  }

  // Polls `req` until it completes: spinning at first (the next command of a
  // busy server comes within microseconds), then sleeping a millisecond between
  // polls (an idle server's followers wait without taking a core).
  void wait(MPI_Request req, const char* what) {
    const auto start = std::chrono::steady_clock::now();
    for (uint64_t polls = 0;; ++polls) {
      int done = 0;
      const int rc = MPI_Test(&req, &done, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) fail("rank {} ({}) lost the other ranks waiting for {}: {}", rank_, host_, what, mpi_error(rc));
      if (done) return;
      if (polls % 64 == 63) check_not_lost();
      if (polls % 64 == 63 && std::chrono::steady_clock::now() - start > std::chrono::milliseconds(20))
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  // One row of expert output: `width` floats.
  MPI_Datatype row_type(int64_t width) {
    auto it = row_types_.find(width);
    if (it != row_types_.end()) return it->second;
    MPI_Datatype t;
    MPI_Type_contiguous(int(width), MPI_FLOAT, &t);
    MPI_Type_commit(&t);
    row_types_[width] = t;
    return t;
  }

  // The spine is computed on every rank and must route every token alike: the
  // same kernels (instruction set) everywhere, or ranks would disagree.
  void check_same_isa() {
    char mine[16] = {};
    const std::string_view isa = kernels::active_isa().name;
    isa.copy(mine, sizeof(mine) - 1);
    std::vector<char> all(size_t(size_) * sizeof(mine));
    MPI_Allgather(mine, int(sizeof(mine)), MPI_CHAR, all.data(), int(sizeof(mine)), MPI_CHAR, comm_);
    for (int r = 0; r < size_; ++r) {
      const std::string other(all.data() + size_t(r) * sizeof(mine));
      if (other != isa)
        abort(fmt::format("error: rank {} computes with {} but rank {} with {}: every rank must use the same kernels (set "
                          "SLUICE_ISA to one all hosts support, e.g. SLUICE_ISA=avx2)",
                          r, other, rank_, isa),
              1);
    }
  }
};
#endif

}  // namespace

std::unique_ptr<Cluster> join_cluster(int& argc, char**& argv) {
  std::unique_ptr<Cluster> c;
#if SLUICE_HAVE_MPI
  if (started_by_mpirun()) c = std::make_unique<MpiCluster>(argc, argv);
#else
  (void)argc;
  (void)argv;
  if (started_by_mpirun() && std::getenv("OMPI_COMM_WORLD_SIZE") && std::string(std::getenv("OMPI_COMM_WORLD_SIZE")) != "1")
    fail("started by mpirun, but this sluice was built without MPI (SLUICE_MPI=OFF): each rank would run the whole "
         "model alone");
#endif
  if (!c) c = std::make_unique<SingleProcess>();
  g_cluster = c.get();
  set_expert_exchange(c->exchange());
  return c;
}

Cluster* process_cluster() { return g_cluster; }
bool primary_rank() { return !g_cluster || g_cluster->rank() == 0; }

}  // namespace sluice
