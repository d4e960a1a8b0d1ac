// Fuzz target: the waiting room's view of a request head (http_head.h) against
// httplib's parser, which the head is handed to. For any bytes: when httplib's
// request handler runs, the bytes it had read by then must already form a
// complete head by head_end() (else the waiting room would hold a request
// httplib could answer, until the header deadline); inspect_head() never
// reports a body length that is not the request's only Content-Length.
#include <cstdint>
#include <cstring>
#include <string>

#include <httplib.h>

#include "server/http_head.h"

namespace {

// The input as a connection that then closes.
class MemoryStream : public httplib::Stream {
 public:
  explicit MemoryStream(std::string_view d) : d_(d) {}
  bool is_readable() const override { return true; }
  bool is_writable() const override { return true; }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, d_.size() - off_);
    std::memcpy(ptr, d_.data() + off_, n);
    off_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char*, size_t size) override { return ssize_t(size); }
  void get_remote_ip_and_port(std::string& ip, int& port) const override { ip = "127.0.0.1", port = 1; }
  void get_local_ip_and_port(std::string& ip, int& port) const override { ip = "127.0.0.1", port = 2; }
  socket_t socket() const override { return -1; }
  size_t consumed() const { return off_; }

 private:
  std::string_view d_;
  size_t off_ = 0;
};

class Parser : public httplib::Server {
 public:
  Parser() {
    Get(".*", [this](const httplib::Request&, httplib::Response&) { at_handler_ = stream_->consumed(); });
  }
  // Bytes read when the handler ran, or npos if it did not.
  size_t run(std::string_view input) {
    MemoryStream s(input);
    stream_ = &s;
    at_handler_ = std::string::npos;
    bool closed = false;
    process_request(s, true, closed, nullptr);
    return at_handler_;
  }

 private:
  MemoryStream* stream_ = nullptr;
  size_t at_handler_ = std::string::npos;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t end = sluice::server::head_end(input);
  if (end != std::string::npos) {
    if (end > input.size()) __builtin_trap();
    const auto h = sluice::server::inspect_head(std::string_view(input).substr(0, end));
    if (h.plain_length && h.length > 999999999999999ull) __builtin_trap();
  }
  static Parser parser;
  const size_t at = parser.run(input);
  if (at != std::string::npos && sluice::server::head_end(input.substr(0, at)) == std::string::npos) __builtin_trap();
  return 0;
}
