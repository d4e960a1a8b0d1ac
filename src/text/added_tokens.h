// Finds added/special token strings in text: at each position the longest
// token starting there wins, scanning left to right (the rule of
// transformers.js' DictionarySplitter and HF tokenizers' added-token split).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::text {

class AddedTokenMatcher {
 public:
  void add(std::string_view content, int32_t id);
  bool empty() const { return nodes_.size() <= 1; }

  struct Segment {
    size_t begin, end;
    int32_t id;  // -1: ordinary text
  };
  std::vector<Segment> split(std::string_view text) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;  // sorted by byte
    int32_t id = -1;
  };
  int32_t child(int32_t node, uint8_t b) const;
  std::vector<Node> nodes_{Node{}};
  bool first_byte_[256] = {};
};

}  // namespace sluice::text
