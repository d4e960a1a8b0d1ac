#include "chat/text_codec.h"

#include <filesystem>
#include <fstream>

#include "chat/api_error.h"
#include "format/generation_config.h"
#include "text/xtml.h"
#include "util/error.h"
#include "util/json_depth.h"

namespace sluice::chat {

namespace {

class TextDetokenizer : public Detokenizer {
 public:
  explicit TextDetokenizer(const text::Tokenizer& tok) : tok_(tok), dec_(tok) {}
  std::string push(int32_t id) override { return tok_.valid_id(id) ? dec_.push(id) : std::string(); }
  std::string flush() override { return dec_.flush(); }

 private:
  const text::Tokenizer& tok_;
  text::IncrementalDecoder dec_;
};

}  // namespace

TextChatCodec::TextChatCodec(const std::string& model_dir, int64_t model_vocab) {
  tok_ = text::Tokenizer::load(model_dir);
  for (const auto& a : tok_->added_tokens()) added_ids_.insert(a.id);
  if (tok_->vocab_size() > model_vocab)
    fail("{}: the tokenizer has {} ids but the model only {}", model_dir, tok_->vocab_size(), model_vocab);
  namespace fs = std::filesystem;
  const bool has_template = fs::exists(model_dir + "/chat_template.jinja") || [&] {
    std::ifstream in(model_dir + "/tokenizer_config.json");
    if (!in) return false;
    auto cfg = nlohmann::json::parse(in, nullptr, false);
    if (cfg.is_object()) add_bos_ = cfg.value("add_bos_token", false);
    return cfg.is_object() && cfg.contains("chat_template") && !cfg["chat_template"].is_null();
  }();
  if (has_template) tmpl_.emplace(text::ChatTemplate::load(model_dir));
  if (tmpl_) {
    const std::string& src = tmpl_->source();
    if (src.find("<｜tool▁calls▁begin｜>") != std::string::npos) family_ = "deepseek_v3";
    else if (src.find("<|tool_calls_section_begin|>") != std::string::npos) family_ = "kimi_k2";
    else if (src.find("<tool_call>") != std::string::npos) family_ = "qwen3";
    else if (src.find("<|channel|>") != std::string::npos) family_ = "gpt_oss";
    template_renders_tools_ = src.find("tools") != std::string::npos;
  }
  // Kimi K3: the four XTML markers are special tokens and no Jinja template
  // says otherwise (a template that spells <|open|> is K3's own, rendered natively).
  bool xtml = true;
  for (const char* m : {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"})
    if (auto id = tok_->token_id(m); !id || !tok_->is_special(*id)) xtml = false;
  if (xtml && (!tmpl_ || tmpl_->source().find("<|open|>") != std::string::npos)) {
    family_ = "kimi_k3";
    stop_ids_.push_back(*tok_->token_id("<|end_of_msg|>"));
  }
  if (auto e = tok_->eos_id()) stop_ids_.push_back(*e);
  // generation_config.json's eos_token_id (an id or a list) ends a reply too.
  for (int32_t id : generation_eos_ids(model_dir)) stop_ids_.push_back(id);
  // (<|call|> ends a harmony turn that calls a tool: the call is parsed where generation stops.)
  for (const char* marker : {"<|im_end|>", "<|eot_id|>", "<|return|>", "<|call|>"})
    if (auto id = tok_->token_id(marker); id && tok_->is_special(*id)) stop_ids_.push_back(*id);
}

bool TextChatCodec::is_marker(int32_t id) const {
  return added_ids_.count(id) > 0 || (tok_->valid_id(id) && tok_->is_special(id));
}

std::string TextChatCodec::describe() const {
  if (family_ == "kimi_k3")
    return fmt::format("{} tokenizer, {} ids, Kimi K3 XTML chat format", tok_->kind(), tok_->vocab_size());
  return fmt::format("{} tokenizer, {} ids, {}", tok_->kind(), tok_->vocab_size(),
                     tmpl_ ? "chat template, " + (family_.empty() ? std::string("Qwen3-style tool calls as text")
                                                                   : family_ + " tool calls")
                           : std::string("no chat template"));
}

std::vector<int32_t> TextChatCodec::render_xtml(const nlohmann::json& messages, const nlohmann::json& tools,
                                                const ChatOptions& opts) const {
  text::XtmlOptions o;
  o.thinking = opts.reasoning_effort != "none";
  o.thinking_effort = opts.reasoning_effort.empty() || !o.thinking ? "max" : opts.reasoning_effort;
  try {
    // Ordered JSON: a call's arguments keep the order they were written in (it changes the ids).
    const auto msgs = nlohmann::ordered_json::parse(messages.dump());
    const auto tls = tools.is_array() && !tools.empty() ? nlohmann::ordered_json::parse(tools.dump())
                                                         : nlohmann::ordered_json();
    return text::xtml_encode(*tok_, text::xtml_render(msgs, tls, o));
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", "messages", "",
                   fmt::format("this conversation cannot be written in Kimi K3's chat format: {}", e.what()));
  }
}

std::vector<int32_t> TextChatCodec::render_chat(const nlohmann::json& messages, const nlohmann::json& tools,
                                                const ChatOptions& opts) const {
  if (family_ == "kimi_k3") return render_xtml(messages, tools, opts);
  if (!tmpl_)
    throw ApiError(400, "invalid_request_error", "messages", "",
                   "this model has no chat template: use /v1/completions");
  nlohmann::json msgs = messages;
  const bool has_tools = tools.is_array() && !tools.empty();
  if (family_.empty()) {
    // A template without any tool-call syntax (the shipped model's ChatML): tools are
    // declared in a system message and calls are written as Qwen3-style text, which
    // reply_syntax() parses; earlier calls are replayed as that text in their turns.
    for (auto& m : msgs)
      if (m.contains("tool_calls")) {
        std::string text = m["content"].is_string() ? m["content"].get<std::string>() : "";
        for (const auto& c : m["tool_calls"])
          text += "<tool_call>\n{\"name\": " + nlohmann::json(c["function"]["name"]).dump() +
                  ", \"arguments\": " + c["function"]["arguments"].get<std::string>() + "}\n</tool_call>";
        m["content"] = text;
        m.erase("tool_calls");
      }
    if (has_tools) {
      const std::string sys = "# Tools\n<tools>\n" + tools.dump() +
                              "\n</tools>\nCall a tool as <tool_call>\n{\"name\": ..., \"arguments\": {...}}\n</tool_call>";
      if (!msgs.empty() && msgs[0]["role"] == "system" && msgs[0]["content"].is_string())
        msgs[0]["content"] = msgs[0]["content"].get<std::string>() + "\n\n" + sys;
      else
        msgs.insert(msgs.begin(), nlohmann::json{{"role", "system"}, {"content", sys}});
    }
  } else if (family_ == "gpt_oss") {
    // Harmony templates read the reasoning of a turn as `thinking` and write a call's
    // arguments with tojson, so they get the arguments as an object.
    for (auto& m : msgs) {
      if (m.contains("reasoning_content") && !m.contains("thinking")) m["thinking"] = m["reasoning_content"];
      if (m.contains("tool_calls"))
        for (auto& c : m["tool_calls"]) {
          auto& a = c["function"]["arguments"];
          if (a.is_string()) {
            // Parsed without limit, the object would be copied and walked recursively (issue 38).
            if (json_text_depth(a.get<std::string>()) > kMaxJsonDepth)
              throw ApiError(400, "invalid_request_error", "messages", "",
                             fmt::format("a tool call's arguments are nested deeper than {} levels (the limit)",
                                         kMaxJsonDepth));
            auto parsed = nlohmann::json::parse(a.get<std::string>(), nullptr, false);
            if (parsed.is_object()) a = std::move(parsed);
          }
        }
    }
  } else if (has_tools && !template_renders_tools_) {
    // The template (DeepSeek-V3's, for one) has no place for tool definitions: they go
    // into a system message, with the call syntax the model was trained on.
    std::string sys = "## Tools\nYou can call these functions:\n" + tools.dump() +
                      "\nTo call a function, reply with <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
                      "NAME\n```json\nARGUMENTS\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    if (!msgs.empty() && msgs[0]["role"] == "system" && msgs[0]["content"].is_string())
      msgs[0]["content"] = msgs[0]["content"].get<std::string>() + "\n\n" + sys;
    else
      msgs.insert(msgs.begin(), nlohmann::json{{"role", "system"}, {"content", sys}});
  }
  const nlohmann::json tools_arg = has_tools && !family_.empty() ? tools : nlohmann::json();
  auto render = [&](const nlohmann::json& m) {
    try {
      nlohmann::json extra = nlohmann::json::object();
      if (!opts.reasoning_effort.empty()) extra["reasoning_effort"] = opts.reasoning_effort;
      // Templates of the Qwen3 kind switch reasoning off with enable_thinking.
      if (opts.reasoning_effort == "none") extra["enable_thinking"] = false;
      return tmpl_->render(m, tools_arg, true, extra);
    } catch (const Error& e) {
      throw ApiError(400, "invalid_request_error", "messages", "",
                     fmt::format("the model's chat template cannot render this conversation: {}", e.what()));
    }
  };
  const std::string rendered = render(msgs);

  // Text from the client that spells a special or added token (a turn marker, a
  // tool-call marker) must stay text, not become that token. Such contents are
  // swapped for placeholders, the template rendered again, and the contents
  // encoded without special tokens in their places. This is done only when the
  // template passes contents through unchanged (checked), and only when needed,
  // so ordinary conversations tokenize exactly as the reference does.
  auto spells_marker = [&](const std::string& s) {
    for (const auto& a : tok_->added_tokens())
      if (!a.content.empty() && s.find(a.content) != std::string::npos) return true;
    return false;
  };
  const std::string nonce = new_tool_call_id().substr(5, 12);
  std::vector<std::string> originals;
  nlohmann::json guarded = msgs;
  for (auto& m : guarded) {
    if (m["role"] == "assistant" || !m["content"].is_string()) continue;
    const std::string c = m["content"].get<std::string>();
    if (!spells_marker(c)) continue;
    m["content"] = fmt::format("\x01{}:{}\x01", nonce, originals.size());
    originals.push_back(c);
  }
  if (originals.empty()) return tok_->encode(rendered);
  const std::string with_ph = render(guarded);
  // Split into template text and placeholders; rebuild to check the template left them alone.
  std::vector<std::pair<bool, std::string>> parts;  // (is_content, text)
  std::string rebuilt;
  size_t pos = 0;
  const std::string open = "\x01" + nonce + ":";
  while (pos < with_ph.size()) {
    const size_t p = with_ph.find(open, pos);
    if (p == std::string::npos) break;
    const size_t q = with_ph.find('\x01', p + open.size());
    if (q == std::string::npos) break;
    size_t idx = 0;
    try {
      idx = std::stoul(with_ph.substr(p + open.size(), q - p - open.size()));
    } catch (const std::exception&) {
      return tok_->encode(rendered);
    }
    if (idx >= originals.size()) return tok_->encode(rendered);
    parts.push_back({false, with_ph.substr(pos, p - pos)});
    parts.push_back({true, originals[idx]});
    rebuilt += parts[parts.size() - 2].second + originals[idx];
    pos = q + 1;
  }
  parts.push_back({false, with_ph.substr(pos)});
  rebuilt += parts.back().second;
  if (rebuilt != rendered) return tok_->encode(rendered);  // the template changed the contents
  std::vector<int32_t> ids;
  for (const auto& [is_content, text] : parts) {
    auto piece = is_content ? tok_->encode_ordinary(text) : tok_->encode(text);
    ids.insert(ids.end(), piece.begin(), piece.end());
  }
  return ids;
}

std::vector<int32_t> TextChatCodec::encode(const std::string& text, bool add_bos) const {
  std::vector<int32_t> ids;
  if (add_bos && add_bos_)
    if (auto b = tok_->bos_id()) ids.push_back(*b);
  auto body = tok_->encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

std::unique_ptr<Detokenizer> TextChatCodec::detokenizer() const { return std::make_unique<TextDetokenizer>(*tok_); }

std::string TextChatCodec::token_bytes(int32_t id) const {
  return tok_->valid_id(id) ? std::string(tok_->token_bytes(id)) : std::string();
}

ReplySyntax TextChatCodec::reply_syntax(const std::vector<int32_t>& prompt) const {
  ReplySyntax s;
  if (family_ == "deepseek_v3") s = deepseek_v3_syntax();
  else if (family_ == "kimi_k2") s = kimi_k2_syntax();
  else if (family_ == "qwen3") s = qwen3_syntax();
  else if (family_ == "kimi_k3") s = kimi_k3_syntax();
  else if (family_ == "gpt_oss") s = gpt_oss_syntax();
  else s = qwen3_syntax();  // the calls render_chat() asks for when the template has no syntax of its own
  // A generation prompt that ends inside an opened <think> block.
  std::string tail;
  for (size_t i = prompt.size() > 8 ? prompt.size() - 8 : 0; i < prompt.size(); ++i) tail += token_bytes(prompt[i]);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  auto ends_with = [&](std::string_view m) {
    return tail.size() >= m.size() && tail.compare(tail.size() - m.size(), m.size(), m) == 0;
  };
  s.starts_in_reasoning = family_ == "kimi_k3"   ? ends_with("<|open|>think<|sep|>")
                          : family_ == "gpt_oss" ? ends_with("<|channel|>analysis<|message|>")
                                                 : ends_with("<think>");
  return s;
}

}  // namespace sluice::chat
