// A model's chat template (Jinja) rendered with the conversation.
#pragma once
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "text/jinja.h"

namespace sluice::text {

class ChatTemplate {
 public:
  // Reads `chat_template` from tokenizer_config.json (a string, or a list of
  // {name, template} where "default" is used), else chat_template.jinja.
  // bos_token / eos_token come from tokenizer_config.json.
  static ChatTemplate load(const std::string& model_dir);

  ChatTemplate(const std::string& source, std::optional<std::string> bos_token, std::optional<std::string> eos_token);

  // messages: [{role, content, [reasoning_content], [tool_calls], [tool_call_id], [name]}, ...]
  // tools: null or a list of tool definitions; `extra` (an object) adds
  // variables such as enable_thinking. Throws sluice::Error naming the
  // template line on template errors (including raise_exception).
  std::string render(const nlohmann::json& messages, const nlohmann::json& tools = nullptr,
                     bool add_generation_prompt = true, const nlohmann::json& extra = nlohmann::json::object()) const;

  // The template variables render() uses (for references and debugging).
  nlohmann::json context(const nlohmann::json& messages, const nlohmann::json& tools = nullptr,
                         bool add_generation_prompt = true,
                         const nlohmann::json& extra = nlohmann::json::object()) const;
  std::string render_context(const nlohmann::json& context) const { return tmpl_.render(context); }

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  jinja::Template tmpl_;
  std::optional<std::string> bos_, eos_;
};

}  // namespace sluice::text
