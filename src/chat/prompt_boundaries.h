// Where a rendered conversation's head that other conversations share ends:
// the end of the leading system (or developer) messages and the tools, which
// every session of a coding agent sends alike. The prompt cache keeps a
// checkpoint of the state there (runtime/prompt_cache.h), so that a new
// session starts from it; recurrent state can only resume where it was saved.
//
// Found by rendering the same head with an empty user turn after it: the
// tokens it has in common with the prompt are the shared head (up to where
// the first user message's text begins). The render is remembered per head
// (a few, least recently used forgotten), so a long system prompt is not
// tokenised again on every request.
#pragma once
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "chat/chat_codec.h"

namespace sluice::chat {

class PromptBoundaries {
 public:
  explicit PromptBoundaries(const ChatCodec& codec) : codec_(codec) {}
  // The positions of `prompt` (rendered from messages, tools and opts) at
  // the end of its shared head, ascending; none when the conversation has no
  // system message and no tools, the head cannot be rendered alone, or it
  // covers the whole prompt but its last token. Thread-safe.
  std::vector<int64_t> find(const nlohmann::json& messages, const nlohmann::json& tools, const ChatOptions& opts,
                            const std::vector<int32_t>& prompt);

 private:
  const ChatCodec& codec_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::vector<int32_t>>> renders_;  // head -> its render, most recent first
};

}  // namespace sluice::chat
