#include "server/http_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "server/error_body.h"
#include "server/http_head.h"
#include "server/peer_socket.h"

namespace sluice::server {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

thread_local int tls_socket = -1;
// Set when the reply to the request being handled closes the connection.
thread_local bool tls_close = false;

}  // namespace

// Outside the anonymous namespace: HttpTransport::Impl holds connections, and GCC warns
// (-Wsubobject-linkage) when a class of this file's holds an anonymous-namespace type while the
// file is compiled inside a unity batch.
struct TransportConn {
  using Clock = std::chrono::steady_clock;
  int fd = -1;
  std::string client;  // the peer's address: the per-client cap's key ("" when not counted)
  std::string buf;     // received, not yet consumed by a request
  // Head: waiting for the request line and headers; Body: for the rest of a
  // small Content-Length body; Idle: kept alive between requests; Closing: an
  // error was sent, the client's remaining bytes are read and dropped until it closes.
  enum class Phase { Head, Body, Idle, Closing } phase = Phase::Head;
  Clock::time_point deadline;
  size_t need = 0;  // Body: bytes of head + body
  size_t served = 0;
};

namespace {

using Conn = TransportConn;

std::string address_text(const sockaddr_storage& ss, int* port = nullptr) {
  char buf[INET6_ADDRSTRLEN] = {0};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf);
    if (port) *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf);
    if (port) *port = ntohs(a->sin6_port);
  }
  return buf;
}

std::string peer_address(int fd, int* port = nullptr) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  return address_text(ss, port);
}

std::string local_address(int fd, int* port = nullptr) {
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return "";
  return address_text(ss, port);
}

// Waits until fd is ready for `events`, at most `wait`; false on timeout or error.
bool wait_ready(int fd, short events, milliseconds wait) {
  if (wait.count() <= 0) return false;
  pollfd p{fd, events, 0};
  for (;;) {
    const int r = poll(&p, 1, int(std::min<int64_t>(wait.count(), 1 << 30)));
    if (r < 0 && errno == EINTR) continue;
    return r > 0 && (p.revents & (events | POLLHUP | POLLERR)) != 0;
  }
}

const char* reason(int status) {
  switch (status) {
    case 408: return "Request Timeout";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    default: return "Service Unavailable";
  }
}

// A complete HTTP response with an OpenAI-style JSON error body, closing the connection.
std::string refusal(int status, const std::string& message, const std::string& code) {
  const std::string type = status == 429 ? "rate_limit_error" : status == 503 ? "server_error" : "invalid_request_error";
  const std::string body = error_body(message, type, "", code).dump();
  return fmt::format("HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{}Connection: close\r\n\r\n{}",
                     status, reason(status), body.size(), status == 429 || status == 503 ? "Retry-After: 1\r\n" : "",
                     body);
}

// httplib's view of a connection: first the bytes the waiting room already read,
// then the socket, with a deadline for the body and a timeout per read and write.
class ConnStream : public httplib::Stream {
 public:
  ConnStream(Conn& c, const TransportOptions& o)
      : c_(c), io_(o.io_timeout), body_deadline_(Clock::now() + o.body_timeout) {}

  bool is_readable() const override { return off_ < c_.buf.size() || wait_ready(c_.fd, POLLIN, read_wait()); }
  bool is_writable() const override { return wait_ready(c_.fd, POLLOUT, io_) && !peer_closed(c_.fd); }

  ssize_t read(char* ptr, size_t size) override {
    if (off_ < c_.buf.size()) {
      const size_t n = std::min(size, c_.buf.size() - off_);
      std::memcpy(ptr, c_.buf.data() + off_, n);
      off_ += n;
      return ssize_t(n);
    }
    for (;;) {
      if (!wait_ready(c_.fd, POLLIN, read_wait())) return -1;
      const ssize_t n = recv(c_.fd, ptr, size, MSG_DONTWAIT);
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      return n;
    }
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    for (;;) {
      const ssize_t n = send(c_.fd, ptr, size, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (!wait_ready(c_.fd, POLLOUT, io_)) return -1;
        continue;
      }
      return n;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = peer_address(c_.fd, &port); }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip = local_address(c_.fd, &port); }
  socket_t socket() const override { return c_.fd; }

  // Bytes received but not consumed (the start of a pipelined next request).
  std::string unread() const { return c_.buf.substr(std::min(off_, c_.buf.size())); }

 private:
  milliseconds read_wait() const {
    const auto left = std::chrono::duration_cast<milliseconds>(body_deadline_ - Clock::now());
    return std::min(io_, left);
  }
  Conn& c_;
  size_t off_ = 0;
  milliseconds io_;
  Clock::time_point body_deadline_;
};

}  // namespace

struct HttpTransport::Impl {
  HttpTransport& owner;
  TransportOptions o;
  int wake_fd = -1;
  std::mutex mu;
  std::condition_variable work_cv;
  std::vector<std::unique_ptr<Conn>> inbox;  // new or returning connections, for the waiting room
  std::deque<std::unique_ptr<Conn>> ready;   // complete requests, for the workers
  std::map<std::string, size_t> per_client;  // open connections per address
  size_t open = 0;
  size_t active = 0;      // requests dispatched to the workers and not finished
  bool refusing = false;  // a stop was requested: no new requests, idle connections close
  bool stopping = false;  // the threads are ending (drain)
  Clock::time_point refusing_since;
  std::thread poller;
  std::vector<std::thread> workers;

  Impl(HttpTransport& t, TransportOptions opts) : owner(t), o(std::move(opts)) {
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0) throw std::runtime_error(fmt::format("eventfd: {}", std::strerror(errno)));
    poller = std::thread([this] { waiting_room(); });
    for (size_t i = 0; i < std::max<size_t>(1, o.workers); ++i) workers.emplace_back([this] { work(); });
  }

  ~Impl() {
    stop();
    close(wake_fd);
  }

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof one);
  }

  void refused(int status) {
    if (o.on_refused) o.on_refused(status);
  }

  // Sends an error and lets the connection drain (so the client reads the reply
  // rather than a reset) until it closes or a second passes.
  void refuse(Conn& c, int status, const std::string& message, const std::string& code) {
    const std::string r = refusal(status, message, code);
    [[maybe_unused]] const ssize_t n = send(c.fd, r.data(), r.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    shutdown(c.fd, SHUT_WR);
    c.phase = Conn::Phase::Closing;
    c.deadline = Clock::now() + milliseconds(1000);
    refused(status);
  }

  void finish(std::unique_ptr<Conn> c) {
    shutdown(c->fd, SHUT_RDWR);
    close(c->fd);
    std::lock_guard lk(mu);
    --open;
    if (!c->client.empty()) {
      auto it = per_client.find(c->client);
      if (it != per_client.end() && --it->second == 0) per_client.erase(it);
    }
  }

  // The accepting thread: count the connection against the caps, then into the waiting room.
  void accept(int fd) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    auto c = std::make_unique<Conn>();
    c->fd = fd;
    c->deadline = Clock::now() + o.head_timeout;
    const std::string client = peer_address(fd);
    bool over_client = false, shutting_down = false;
    {
      std::lock_guard lk(mu);
      shutting_down = refusing || stopping;
      if (shutting_down || open >= o.max_connections) {
        c.reset();
      } else {
        ++open;
        over_client = per_client[client] >= o.max_connections_per_client;
        if (!over_client) {
          ++per_client[client];
          c->client = client;
        }
      }
    }
    if (!c) {
      const std::string r = shutting_down
                                ? refusal(503, "the server is shutting down", "server_shutdown")
                                : refusal(503, "the server has too many open connections", "too_many_connections");
      [[maybe_unused]] const ssize_t n = send(fd, r.data(), r.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      close(fd);
      refused(503);
      return;
    }
    if (over_client)
      refuse(*c, 429,
             fmt::format("too many open connections from {} (the limit is {})", client, o.max_connections_per_client),
             "too_many_connections");
    std::lock_guard lk(mu);
    inbox.push_back(std::move(c));
    wake();
  }

  enum class Next { Wait, Dispatch, Close };

  // Decides what a connection in the waiting room needs after new bytes (or none).
  Next advance(Conn& c) {
    if (c.phase == Conn::Phase::Closing) return Next::Wait;
    if (c.phase == Conn::Phase::Idle) {
      if (c.buf.empty()) return Next::Wait;
      c.phase = Conn::Phase::Head;
      c.deadline = Clock::now() + o.head_timeout;
    }
    if (c.phase == Conn::Phase::Head) {
      const size_t end = head_end(c.buf);
      if (end == std::string::npos) {
        if (c.buf.size() > o.max_head_bytes)
          refuse(c, 431, fmt::format("the request line and headers are larger than {} bytes", o.max_head_bytes),
                 "header_too_large");
        return Next::Wait;
      }
      const HeadInfo h = inspect_head(std::string_view(c.buf).substr(0, end));
      if (!h.plain_length || h.expects_continue || h.length > o.buffered_body_bytes) return Next::Dispatch;
      c.need = end + h.length;
      c.phase = Conn::Phase::Body;
    }
    return c.buf.size() >= c.need ? Next::Dispatch : Next::Wait;
  }

  // Reads what the socket has (up to what the phase may buffer); false when the peer is gone.
  bool receive(Conn& c) {
    char tmp[16384];
    for (;;) {
      size_t room = sizeof tmp;
      if (c.phase == Conn::Phase::Body)
        room = std::min(room, c.need - std::min(c.need, c.buf.size()));
      else if (c.phase != Conn::Phase::Closing)
        room = std::min(room, o.max_head_bytes + 1 - std::min(o.max_head_bytes + 1, c.buf.size()));
      if (room == 0) return true;
      const ssize_t n = recv(c.fd, tmp, room, MSG_DONTWAIT);
      if (n > 0) {
        if (c.phase != Conn::Phase::Closing) {
          c.buf.append(tmp, size_t(n));
          if (c.phase == Conn::Phase::Idle) {  // the next request's head deadline starts now
            c.phase = Conn::Phase::Head;
            c.deadline = Clock::now() + o.head_timeout;
          }
        }
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
    }
  }

  void waiting_room() {
    std::vector<std::unique_ptr<Conn>> waiting;
    std::vector<pollfd> fds;
    for (;;) {
      std::vector<std::unique_ptr<Conn>> arrived;
      bool closing_all = false;
      {
        std::lock_guard lk(mu);
        if (stopping) break;
        arrived.swap(inbox);
        closing_all = refusing;
      }
      for (auto& c : arrived) {
        waiting.push_back(std::move(c));
        settle(waiting.back(), advance(*waiting.back()));  // a returning connection may hold a whole request
      }
      if (closing_all)  // shutting down: only connections that were sent an error stay, to drain
        for (auto& c : waiting)
          if (c && c->phase != Conn::Phase::Closing) finish(std::move(c));
      std::erase(waiting, nullptr);

      auto now = Clock::now();
      auto soonest = now + milliseconds(1000);
      fds.assign(1, pollfd{wake_fd, POLLIN, 0});
      for (const auto& c : waiting) {
        soonest = std::min(soonest, c->deadline);
        fds.push_back(pollfd{c->fd, POLLIN, 0});
      }
      const auto wait = std::chrono::duration_cast<milliseconds>(soonest - now).count();
      const int r = poll(fds.data(), fds.size(), int(std::max<int64_t>(0, wait) + 1));
      if (r < 0 && errno != EINTR) break;
      if (fds[0].revents) {
        uint64_t v;
        [[maybe_unused]] const ssize_t n = ::read(wake_fd, &v, sizeof v);
      }
      for (size_t i = 0; i < waiting.size(); ++i) {
        auto& c = waiting[i];
        if (fds[i + 1].revents == 0) continue;
        if (!receive(*c)) {
          finish(std::move(c));
          continue;
        }
        settle(c, advance(*c));
      }
      now = Clock::now();
      for (auto& c : waiting) {
        if (!c || c->deadline > now) continue;
        if (c->phase == Conn::Phase::Head || c->phase == Conn::Phase::Body) {
          refuse(*c, 408,
                 fmt::format("the request was not received within {} s", double(o.head_timeout.count()) / 1000.0),
                 "request_timeout");
        } else {
          finish(std::move(c));
        }
      }
      std::erase(waiting, nullptr);
    }
    for (auto& c : waiting)
      if (c) finish(std::move(c));
  }

  void settle(std::unique_ptr<Conn>& c, Next next) {
    if (next == Next::Dispatch) {
      std::lock_guard lk(mu);
      if (refusing) return;  // left to the shutdown sweep, which closes it
      ready.push_back(std::move(c));
      ++active;
      work_cv.notify_one();
    } else if (next == Next::Close) {
      finish(std::move(c));
    }
  }

  void work() {
    for (;;) {
      std::unique_ptr<Conn> c;
      {
        std::unique_lock lk(mu);
        work_cv.wait(lk, [&] { return stopping || !ready.empty(); });
        if (stopping) return;
        c = std::move(ready.front());
        ready.pop_front();
      }
      bool keep = false;
      {
        ConnStream stream(*c, o);
        const bool last = c->served + 1 >= o.max_requests_per_connection;
        bool closed = false;
        tls_socket = c->fd;
        tls_close = false;
        const bool ok = owner.handle_request(stream, last, closed);
        tls_socket = -1;
        ++c->served;
        c->buf = stream.unread();
        keep = ok && !closed && !last && !tls_close;
      }
      std::unique_lock lk(mu);
      --active;
      if (!keep || stopping || refusing) {
        lk.unlock();
        finish(std::move(c));
        continue;
      }
      c->phase = Conn::Phase::Idle;
      c->deadline = Clock::now() + o.idle_timeout;
      inbox.push_back(std::move(c));
      wake();
    }
  }

  void refuse_new() {
    {
      std::lock_guard lk(mu);
      if (!refusing) refusing_since = Clock::now();
      refusing = true;
    }
    wake();
  }

  // After refuse_new(): whether the requests being handled have finished (or had `grace` to).
  bool quiet(std::chrono::milliseconds grace) {
    std::lock_guard lk(mu);
    return active == 0 || Clock::now() - refusing_since > grace;
  }

  void stop() {
    {
      std::lock_guard lk(mu);
      if (stopping && !poller.joinable()) return;
      stopping = true;
    }
    wake();
    work_cv.notify_all();
    if (poller.joinable()) poller.join();
    for (auto& w : workers)
      if (w.joinable()) w.join();
    std::vector<std::unique_ptr<Conn>> left;
    {
      std::lock_guard lk(mu);
      for (auto& c : inbox) left.push_back(std::move(c));
      for (auto& c : ready) left.push_back(std::move(c));
      inbox.clear();
      ready.clear();
    }
    for (auto& c : left) finish(std::move(c));
  }
};

HttpTransport::HttpTransport(TransportOptions opts) : impl_(std::make_unique<Impl>(*this, std::move(opts))) {
  // httplib's accept loop hands each socket to process_and_close_socket through
  // this queue; it runs the hand-over at once (the waiting room does the rest).
  // The loop wakes every 200 ms to call on_idle, which ends it once a stop was
  // requested and the requests being handled have finished: httplib stops calling
  // content providers as soon as its listening socket is closed, so closing it
  // earlier would cut replies short (new connections are refused meanwhile).
  struct Inline : httplib::TaskQueue {
    explicit Inline(HttpTransport& t) : t_(t) {}
    void enqueue(std::function<void()> fn) override { fn(); }
    void shutdown() override {}
    void on_idle() override {
      if (t_.stop_requested_ && t_.svr_sock_ != INVALID_SOCKET && t_.impl_->quiet(std::chrono::seconds(10))) t_.stop();
    }
    HttpTransport& t_;
  };
  new_task_queue = [this] { return new Inline(*this); };
  set_idle_interval(0, 200000);
  // An error reply closes the connection: after a broken request or one whose body
  // was not read (413), what follows on the connection cannot be trusted to be a request.
  set_post_routing_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status < 400) return;
    res.headers.erase("Keep-Alive");
    res.headers.erase("Connection");
    res.set_header("Connection", "close");
    tls_close = true;
  });
  // What httplib advertises in Keep-Alive headers.
  set_keep_alive_timeout(std::max<time_t>(1, time_t(impl_->o.idle_timeout.count() / 1000)));
  set_keep_alive_max_count(impl_->o.max_requests_per_connection);
}

HttpTransport::~HttpTransport() = default;

void HttpTransport::set_backlog(int n) {
  if (svr_sock_ != INVALID_SOCKET && ::listen(svr_sock_, n) != 0)
    throw std::runtime_error(fmt::format("listen: {}", std::strerror(errno)));
}

void HttpTransport::request_stop() {
  stop_requested_ = true;
  impl_->refuse_new();
}

void HttpTransport::drain() { impl_->stop(); }

int HttpTransport::current_socket() { return tls_socket; }

bool HttpTransport::process_and_close_socket(socket_t sock) {
  impl_->accept(sock);
  return true;
}

bool HttpTransport::handle_request(httplib::Stream& stream, bool close_after, bool& closed) {
  return process_request(stream, close_after, closed, nullptr);
}

}  // namespace sluice::server
