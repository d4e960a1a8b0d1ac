#include "chat/prompt_boundaries.h"

#include <algorithm>

namespace sluice::chat {

namespace {
constexpr size_t kRemembered = 8;  // heads whose render is kept
}

std::vector<int64_t> PromptBoundaries::find(const nlohmann::json& messages, const nlohmann::json& tools,
                                            const ChatOptions& opts, const std::vector<int32_t>& prompt) {
  nlohmann::json head = nlohmann::json::array();
  for (const auto& m : messages) {
    const std::string role = m.value("role", "");
    if (role != "system" && role != "developer") break;
    head.push_back(m);
  }
  const bool has_tools = tools.is_array() && !tools.empty();
  if (head.empty() && !has_tools) return {};
  head.push_back({{"role", "user"}, {"content", ""}});
  const std::string key = head.dump() + '\x1f' + (has_tools ? tools.dump() : "") + '\x1f' + opts.reasoning_effort;
  std::vector<int32_t> render;
  {
    std::lock_guard lk(mu_);
    auto it = std::find_if(renders_.begin(), renders_.end(), [&](const auto& e) { return e.first == key; });
    if (it != renders_.end()) {
      renders_.splice(renders_.begin(), renders_, it);
      render = it->second;
    }
  }
  if (render.empty()) {
    try {
      render = codec_.render_chat(head, tools, opts);
    } catch (const std::exception&) {
      return {};  // a template that wants more than a head: no boundary
    }
    std::lock_guard lk(mu_);
    renders_.emplace_front(key, render);
    if (renders_.size() > kRemembered) renders_.pop_back();
  }
  const size_t n = std::min(render.size(), prompt.size());
  size_t b = 0;
  while (b < n && render[b] == prompt[b]) ++b;
  if (b == 0 || b + 1 >= prompt.size()) return {};
  return {int64_t(b)};
}

}  // namespace sluice::chat
