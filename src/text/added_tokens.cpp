#include "text/added_tokens.h"

#include <algorithm>

namespace sluice::text {

int32_t AddedTokenMatcher::child(int32_t node, uint8_t b) const {
  const auto& ch = nodes_[size_t(node)].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& p, uint8_t v) { return p.first < v; });
  return it != ch.end() && it->first == b ? it->second : -1;
}

void AddedTokenMatcher::add(std::string_view content, int32_t id) {
  if (content.empty()) return;
  int32_t node = 0;
  for (char c : content) {
    const uint8_t b = uint8_t(c);
    int32_t next = child(node, b);
    if (next < 0) {
      next = int32_t(nodes_.size());
      nodes_.push_back(Node{});
      auto& ch = nodes_[size_t(node)].children;
      auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& p, uint8_t v) { return p.first < v; });
      ch.insert(it, {b, next});
    }
    node = next;
  }
  nodes_[size_t(node)].id = id;
  first_byte_[uint8_t(content[0])] = true;
}

std::vector<AddedTokenMatcher::Segment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Segment> out;
  size_t start = 0, i = 0;
  const size_t n = text.size();
  while (i < n) {
    if (!first_byte_[uint8_t(text[i])]) {
      ++i;
      continue;
    }
    int32_t node = 0, match_id = -1;
    size_t match_end = 0;
    for (size_t j = i; j < n; ++j) {
      node = child(node, uint8_t(text[j]));
      if (node < 0) break;
      if (nodes_[size_t(node)].id >= 0) {
        match_id = nodes_[size_t(node)].id;
        match_end = j + 1;
      }
    }
    if (match_id >= 0) {
      if (i > start) out.push_back({start, i, -1});
      out.push_back({i, match_end, match_id});
      i = start = match_end;
    } else {
      ++i;
    }
  }
  if (start < n) out.push_back({start, n, -1});
  return out;
}

}  // namespace sluice::text
