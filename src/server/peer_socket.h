// Noticing that an HTTP client went away while its request waits or runs:
// the server finds the connection's socket by its address pair and polls it
// for the peer's close once per token (httplib does not expose the socket).
#pragma once
#include <string>

namespace sluice::server {

// The socket of this process connected from remote:rport to local:lport, or -1.
int find_peer_socket(const std::string& remote_addr, int remote_port, const std::string& local_addr, int local_port);

// True once the peer has closed or reset the connection (never blocks).
bool peer_closed(int fd);

}  // namespace sluice::server
