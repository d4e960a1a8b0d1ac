#include "chat/prompt_boundaries.h"

#include <algorithm>

namespace sluice::chat {

namespace {
constexpr size_t kRemembered = 16;  // heads whose render is kept
}

std::vector<int32_t> PromptBoundaries::render(const nlohmann::json& head, const nlohmann::json& tools,
                                              const ChatOptions& opts) {
  const bool has_tools = tools.is_array() && !tools.empty();
  const std::string key = head.dump() + '\x1f' + (has_tools ? tools.dump() : "") + '\x1f' + opts.reasoning_effort;
  {
    std::lock_guard lk(mu_);
    auto it = std::find_if(renders_.begin(), renders_.end(), [&](const auto& e) { return e.first == key; });
    if (it != renders_.end()) {
      renders_.splice(renders_.begin(), renders_, it);
      return it->second;
    }
  }
  std::vector<int32_t> ids;
  try {
    ids = codec_.render_chat(head, tools, opts);
  } catch (const std::exception&) {
    // A template that wants more than a head: no boundary there (remembered as such).
  }
  std::lock_guard lk(mu_);
  renders_.emplace_front(key, ids);
  if (renders_.size() > kRemembered) renders_.pop_back();
  return ids;
}

std::vector<int64_t> PromptBoundaries::find(const nlohmann::json& messages, const nlohmann::json& tools,
                                            const ChatOptions& opts, const std::vector<int32_t>& prompt) {
  // The head: every message before the first assistant turn but the last message.
  size_t n = 0;
  while (n + 1 < messages.size() && messages[n].value("role", "") != "assistant") ++n;
  const bool has_tools = tools.is_array() && !tools.empty();
  size_t first = 0;  // the leading system / developer messages: the first boundary ends them
  while (first < n && (messages[first].value("role", "") == "system" || messages[first].value("role", "") == "developer"))
    ++first;
  if (first == 0 && !has_tools) first = 1;  // without a system prompt or tools: from the first user message on
  std::vector<int64_t> out;
  for (size_t k = first; k <= n; ++k) {
    if (k == 0) continue;
    nlohmann::json head = nlohmann::json::array();
    for (size_t i = 0; i < k; ++i) head.push_back(messages[i]);
    head.push_back({{"role", "user"}, {"content", ""}});
    const std::vector<int32_t> r = render(head, tools, opts);
    const size_t m = std::min(r.size(), prompt.size());
    size_t b = 0;
    while (b < m && r[b] == prompt[b]) ++b;
    if (b > 0 && b + 1 < prompt.size() && (out.empty() || int64_t(b) > out.back())) out.push_back(int64_t(b));
  }
  return out;
}

}  // namespace sluice::chat
