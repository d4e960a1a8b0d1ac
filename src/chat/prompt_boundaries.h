// Where the message boundaries of a rendered conversation's head lie, which
// other conversations may share: the end of the leading system (or
// developer) messages and the tools, which every session of a coding agent
// sends alike, and the end of each message after them before the first
// assistant turn (Codex's environment context, say, before the user's
// prompt). The prompt cache keeps a checkpoint of the state there
// (runtime/prompt_cache.h), so that a new session starts from the longest;
// recurrent state can only resume where it was saved.
//
// Each is found by rendering the messages before it with an empty user turn
// after them: the tokens that render has in common with the prompt end where
// the next message's text begins. Renders are remembered (a few, least
// recently used forgotten), so a long system prompt is not tokenised again
// on every request.
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
  // those boundaries, ascending; none where the head cannot be rendered
  // alone, or it covers the whole prompt but its last token. Thread-safe.
  std::vector<int64_t> find(const nlohmann::json& messages, const nlohmann::json& tools, const ChatOptions& opts,
                            const std::vector<int32_t>& prompt);

 private:
  std::vector<int32_t> render(const nlohmann::json& head, const nlohmann::json& tools, const ChatOptions& opts);
  const ChatCodec& codec_;
  std::mutex mu_;
  std::list<std::pair<std::string, std::vector<int32_t>>> renders_;  // head -> its render, most recent first
};

}  // namespace sluice::chat
