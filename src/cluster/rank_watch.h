// Notices a lost rank while serve or chat runs under mpirun. MPI cannot: with
// mpirun --enable-recovery (which keeps the other ranks running when one
// dies) OpenMPI's collectives then never complete and never fail, over shared
// memory and over TCP alike (without it mpirun kills every rank, the server
// too). So each rank but 0 holds a TCP connection to rank 0 beside MPI: the
// kernel closes it when the process ends, however it ends (keep-alives notice
// a lost host within about half a minute). Rank 0 then knows which rank was
// lost and gives up on the job (closing the others' connections, which ends
// them); a rank whose connection to rank 0 closes ends itself.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace sluice {

class RankWatch {
 public:
  // Rank 0: listens on every address; address() is what the others connect to.
  static std::unique_ptr<RankWatch> listen(std::vector<std::string> hosts);
  std::string address() const;
  // Rank 0: takes the others' connections (each says its rank), waiting at most
  // `seconds`; those that did not come are said on stderr (their loss will go
  // unnoticed). Then watches.
  void accept_ranks(double seconds);
  // The other ranks: connects to rank 0 at `address` and watches that connection
  // (false, said on stderr: none of rank 0's addresses answered).
  // `on_lost` is called (on the watching thread) when that connection closes.
  static std::unique_ptr<RankWatch> connect(const std::string& address, int rank,
                                            std::function<void(const std::string&)> on_lost);
  ~RankWatch();

  // Why the job cannot go on (empty while every watched rank is there).
  std::string lost() const;
  bool is_lost() const { return lost_flag_.load(std::memory_order_acquire); }
  // Stops watching, the connections left open until destruction (the job is
  // ending normally: once every rank has stopped, connections closing are no loss).
  void stop();

 private:
  RankWatch() = default;
  void watch();
  void give_up(const std::string& why);

  int listen_fd_ = -1;
  int port_ = 0;
  uint64_t nonce_ = 0;  // rank 0: what a rank's connection must say
  std::function<void(const std::string&)> on_lost_;  // the other ranks
  std::vector<std::string> hosts_;  // rank 0: every rank's host
  std::vector<std::pair<int, int>> peers_;  // (fd, rank)
  int wake_[2] = {-1, -1};  // a pipe that ends watch()
  std::thread thread_;
  mutable std::mutex mutex_;
  std::string lost_;
  std::atomic<bool> lost_flag_{false};
};

}  // namespace sluice
