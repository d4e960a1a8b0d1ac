#include "server/http_head.h"

#include <cctype>

namespace sluice::server {

namespace {

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

}  // namespace

size_t head_end(std::string_view b) {
  if (b.substr(0, 2) == "\r\n") return 2;
  const size_t p = b.find("\n\r\n");
  return p == std::string_view::npos ? std::string::npos : p + 3;
}

HeadInfo inspect_head(std::string_view head) {
  HeadInfo h;
  int lengths = 0;
  bool other_framing = false;
  size_t p = head.find('\n');
  while (p != std::string_view::npos && p + 1 < head.size()) {
    const size_t q = head.find('\n', p + 1);
    std::string_view line = head.substr(p + 1, (q == std::string_view::npos ? head.size() : q) - p - 1);
    p = q;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    if (iequals(name, "content-length")) {
      ++lengths;
      size_t n = 0;
      bool ok = !value.empty() && value.size() <= 15;
      for (char c : value) ok = ok && c >= '0' && c <= '9', n = n * 10 + size_t(c - '0');
      if (ok) h.length = n;
      else other_framing = true;
    } else if (iequals(name, "transfer-encoding")) {
      other_framing = true;
    } else if (iequals(name, "expect")) {
      h.expects_continue = true;
    }
  }
  h.plain_length = lengths <= 1 && !other_framing;
  return h;
}

}  // namespace sluice::server
