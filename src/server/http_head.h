// What the transport's waiting room reads from a request head before handing
// the connection to httplib's parser: whether the head is complete, and how long
// a body follows. Must agree with httplib (tests/fuzz/http_head_fuzz.cpp checks it).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace sluice::server {

// Where the request head ends (one past its blank line), or npos. httplib reads
// the request line up to its '\n', then header lines until one that is exactly
// "\r\n": the head is complete at the first "\n\r\n" (a buffer opening with
// "\r\n" is a broken request line, answered at once).
size_t head_end(std::string_view b);

struct HeadInfo {
  bool plain_length = false;  // at most one valid Content-Length and nothing else framing the body
  size_t length = 0;          // its value (0 without one)
  bool expects_continue = false;
};

// head: the bytes up to head_end().
HeadInfo inspect_head(std::string_view head);

}  // namespace sluice::server
