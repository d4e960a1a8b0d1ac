#include "server/peer_socket.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <cstdlib>
#include <cstring>

namespace sluice::server {

namespace {

bool same_endpoint(const sockaddr_storage& ss, const std::string& addr, int port) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (ntohs(a->sin_port) != port) return false;
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (ntohs(a->sin6_port) != port) return false;
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
  } else {
    return false;
  }
  return addr == buf;
}

}  // namespace

int find_peer_socket(const std::string& remote_addr, int remote_port, const std::string& local_addr, int local_port) {
  if (remote_port <= 0 || local_port <= 0) return -1;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return -1;
  int found = -1;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == dirfd(d)) continue;
    struct stat st;
    if (fstat(int(fd), &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage peer{}, self{};
    socklen_t pl = sizeof peer, sl = sizeof self;
    if (getpeername(int(fd), reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;
    if (getsockname(int(fd), reinterpret_cast<sockaddr*>(&self), &sl) != 0) continue;
    if (same_endpoint(peer, remote_addr, remote_port) && same_endpoint(self, local_addr, local_port)) {
      found = int(fd);
      break;
    }
  }
  closedir(d);
  return found;
}

bool peer_closed(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace sluice::server
