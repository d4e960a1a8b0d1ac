#include "cluster/rank_watch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <random>
#include <cstdio>
#include <sstream>

#include <fmt/format.h>

#include "util/error.h"

namespace sluice {

namespace {

// A lost host (no FIN from a crashed machine) is noticed after about 10 + 3 x 5 seconds.
void keep_alive(int fd) {
  const int on = 1, idle = 10, interval = 5, count = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
}

// This host's IPv4 addresses, loopback last (for ranks on this host).
std::vector<std::string> own_addresses() {
  std::vector<std::string> out;
  ifaddrs* all = nullptr;
  if (getifaddrs(&all) == 0) {
    for (ifaddrs* a = all; a; a = a->ifa_next) {
      if (!a->ifa_addr || a->ifa_addr->sa_family != AF_INET) continue;
      char s[INET_ADDRSTRLEN] = {};
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, s, sizeof(s));
      if (std::string(s).rfind("127.", 0) != 0) out.push_back(s);
    }
    freeifaddrs(all);
  }
  out.push_back("127.0.0.1");
  return out;
}

int connect_within(const std::string& addr, int port, int ms) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(uint16_t(port));
  if (inet_pton(AF_INET, addr.c_str(), &sa.sin_addr) != 1) return -1;
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  int rc = ::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa));
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int err = 0;
    socklen_t len = sizeof(err);
    rc = poll(&p, 1, ms) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0 ? 0 : -1;
  }
  if (rc != 0) {
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

}  // namespace

std::unique_ptr<RankWatch> RankWatch::listen(std::vector<std::string> hosts) {
  std::unique_ptr<RankWatch> w(new RankWatch());
  w->hosts_ = std::move(hosts);
  w->listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(sa);
  if (w->listen_fd_ < 0 || bind(w->listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 ||
      ::listen(w->listen_fd_, 64) != 0 || getsockname(w->listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len) != 0)
    fail("rank 0 could not listen for the other ranks' watch connections: {}", std::strerror(errno));
  w->port_ = ntohs(sa.sin_port);
  // Sent to the ranks through MPI with the address: a connection that cannot say it is not one of them.
  std::random_device rd;
  w->nonce_ = (uint64_t(rd()) << 32) ^ rd();
  return w;
}

std::string RankWatch::address() const {
  std::string s = fmt::format("{} {}", port_, nonce_);
  for (const std::string& a : own_addresses()) s += " " + a;
  return s;
}

void RankWatch::accept_ranks(double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  std::vector<bool> seen(hosts_.size(), false);
  while (peers_.size() + 1 < hosts_.size()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{listen_fd_, POLLIN, 0};
    if (left.count() <= 0 || poll(&p, 1, int(left.count())) != 1) break;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    struct {
      int64_t rank = -1;  // no padding: every byte sent is set
      uint64_t nonce = 0;
    } hello;
    if (recv(fd, &hello, sizeof(hello), MSG_WAITALL) != ssize_t(sizeof(hello)) || hello.nonce != nonce_ ||
        hello.rank <= 0 || size_t(hello.rank) >= hosts_.size() || seen[size_t(hello.rank)]) {
      close(fd);
      continue;
    }
    tv = {0, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    keep_alive(fd);
    seen[size_t(hello.rank)] = true;
    peers_.push_back({fd, int(hello.rank)});
  }
  close(listen_fd_);
  listen_fd_ = -1;
  for (size_t r = 1; r < hosts_.size(); ++r)
    if (!seen[r])
      std::fprintf(stderr, "sluice: warning: rank %zu (%s) did not connect to rank 0's watch: if it is lost, the server "
                   "will wait for it instead of saying so\n", r, hosts_[r].c_str());
  if (pipe2(wake_, O_CLOEXEC) != 0) fail("pipe: {}", std::strerror(errno));
  thread_ = std::thread([this] { watch(); });
}

std::unique_ptr<RankWatch> RankWatch::connect(const std::string& address, int rank,
                                              std::function<void(const std::string&)> on_lost) {
  std::istringstream in(address);
  int port = 0;
  uint64_t nonce = 0;
  in >> port >> nonce;
  std::unique_ptr<RankWatch> w(new RankWatch());
  w->on_lost_ = std::move(on_lost);
  for (std::string a; in >> a;) {
    const int fd = connect_within(a, port, 2000);
    if (fd < 0) continue;
    struct {
      int64_t rank = -1;  // no padding: every byte sent is set
      uint64_t nonce = 0;
    } hello;
    hello.rank = rank;
    hello.nonce = nonce;
    if (send(fd, &hello, sizeof(hello), MSG_NOSIGNAL) != ssize_t(sizeof(hello))) {
      close(fd);
      continue;
    }
    keep_alive(fd);
    w->peers_.push_back({fd, 0});
    break;
  }
  if (w->peers_.empty()) {
    std::fprintf(stderr, "sluice: warning: rank %d could not reach rank 0's watch at %s\n", rank, address.c_str());
    return w;
  }
  if (pipe2(w->wake_, O_CLOEXEC) != 0) fail("pipe: {}", std::strerror(errno));
  w->thread_ = std::thread([p = w.get()] { p->watch(); });
  return w;
}

RankWatch::~RankWatch() {
  stop();
  for (auto& [fd, r] : peers_) close(fd);
  for (int fd : wake_)
    if (fd >= 0) close(fd);
  if (listen_fd_ >= 0) close(listen_fd_);
}

void RankWatch::stop() {
  if (!thread_.joinable()) return;
  const char c = 0;
  if (write(wake_[1], &c, 1) == 1) thread_.join();
  else thread_.detach();
}

std::string RankWatch::lost() const {
  std::lock_guard lock(mutex_);
  return lost_;
}

void RankWatch::give_up(const std::string& why) {
  {
    std::lock_guard lock(mutex_);
    lost_ = why;
  }
  lost_flag_.store(true, std::memory_order_release);
}

// Nothing is ever sent on these connections: anything readable is their end.
void RankWatch::watch() {
  for (;;) {
    std::vector<pollfd> fds;
    for (auto& [fd, r] : peers_) fds.push_back({fd, POLLIN, 0});
    fds.push_back({wake_[0], POLLIN, 0});
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (fds.back().revents) return;  // stop()
    for (size_t i = 0; i + 1 < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      char c;
      const ssize_t n = recv(fds[i].fd, &c, 1, MSG_DONTWAIT);
      if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR))) continue;
      const int rank = peers_[i].second;
      if (on_lost_) {  // a follower: rank 0 ended or gave up
        on_lost_("rank 0 has ended or given up on the job (its watch connection closed)");
        return;
      }
      give_up(fmt::format("rank {} (on {}) was lost: its process ended or its host cannot be reached", rank,
                          hosts_[size_t(rank)]));
      // The other ranks wait in a collective that will never complete: closing theirs ends them.
      for (auto& [fd, r] : peers_) shutdown(fd, SHUT_RDWR);
      return;
    }
  }
}

}  // namespace sluice
