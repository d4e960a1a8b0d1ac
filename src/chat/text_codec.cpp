#include "chat/text_codec.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <utility>

#include "chat/api_error.h"
#include "format/generation_config.h"
#include "util/error.h"

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

// A syntax with a native format that recognises the checkpoint, else the first
// whose marker the template spells (in the family table's order), else none.
const ChatSyntax* syntax_of(const text::Tokenizer& tok, const text::ChatTemplate* tmpl) {
  for (const ChatSyntax* s : chat_syntaxes())
    if (s->native && s->native->recognises(tok, tmpl)) return s;
  if (!tmpl) return nullptr;
  for (const ChatSyntax* s : chat_syntaxes())
    if (!s->template_marker.empty() && tmpl->source().find(s->template_marker) != std::string::npos) return s;
  return nullptr;
}

// A template without any tool-call syntax (the shipped model's ChatML): tools are
// declared in a system message and calls are written as Qwen3-style text, which
// reply_syntax() parses; earlier calls are replayed as that text in their turns.
void write_calls_as_qwen3_text(nlohmann::json& msgs, const nlohmann::json& tools) {
  for (auto& m : msgs)
    if (m.contains("tool_calls")) {
      std::string text = m["content"].is_string() ? m["content"].get<std::string>() : "";
      for (const auto& c : m["tool_calls"])
        text += "<tool_call>\n{\"name\": " + nlohmann::json(c["function"]["name"]).dump() +
                ", \"arguments\": " + c["function"]["arguments"].get<std::string>() + "}\n</tool_call>";
      m["content"] = text;
      m.erase("tool_calls");
    }
  if (tools.is_array() && !tools.empty())
    append_system_message(msgs, "# Tools\n<tools>\n" + tools.dump() +
                                    "\n</tools>\nCall a tool as <tool_call>\n{\"name\": ..., \"arguments\": {...}}\n</tool_call>");
}

// The rendered text split into template text and client contents at the
// placeholders ("\x01NONCE:INDEX\x01") that stand for `originals`: (is_content,
// text) pieces; nullopt when a placeholder does not read back.
std::optional<std::vector<std::pair<bool, std::string>>> split_at_placeholders(
    const std::string& with_ph, const std::string& nonce, const std::vector<std::string>& originals) {
  std::vector<std::pair<bool, std::string>> parts;
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
      return std::nullopt;
    }
    if (idx >= originals.size()) return std::nullopt;
    parts.push_back({false, with_ph.substr(pos, p - pos)});
    parts.push_back({true, originals[idx]});
    pos = q + 1;
  }
  parts.push_back({false, with_ph.substr(pos)});
  return parts;
}

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
  syntax_ = syntax_of(*tok_, tmpl_ ? &*tmpl_ : nullptr);
  if (tmpl_) template_renders_tools_ = tmpl_->source().find("tools") != std::string::npos;
  if (syntax_ && syntax_->native) stop_ids_.push_back(*tok_->token_id(syntax_->native->end_of_turn));
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
  if (syntax_ && syntax_->native)
    return fmt::format("{} tokenizer, {} ids, {}", tok_->kind(), tok_->vocab_size(), syntax_->native->description);
  return fmt::format("{} tokenizer, {} ids, {}", tok_->kind(), tok_->vocab_size(),
                     tmpl_ ? "chat template, " + (!syntax_ ? std::string("Qwen3-style tool calls as text")
                                                           : std::string(syntax_->name) + " tool calls")
                           : std::string("no chat template"));
}

std::vector<int32_t> TextChatCodec::render_chat(const nlohmann::json& messages, const nlohmann::json& tools,
                                                const ChatOptions& opts) const {
  if (syntax_ && syntax_->native) return syntax_->native->render(*tok_, messages, tools, opts);
  if (!tmpl_)
    throw ApiError(400, "invalid_request_error", "messages", "",
                   "this model has no chat template: use /v1/completions");
  nlohmann::json msgs = messages;
  if (!syntax_) write_calls_as_qwen3_text(msgs, tools);
  else if (syntax_->prepare_messages) syntax_->prepare_messages(msgs, tools, template_renders_tools_);
  const bool has_tools = tools.is_array() && !tools.empty();
  const nlohmann::json tools_arg = has_tools && syntax_ ? tools : nlohmann::json();
  return encode_rendered(msgs, tools_arg, opts);
}

std::string TextChatCodec::render_template(const nlohmann::json& msgs, const nlohmann::json& tools,
                                           const ChatOptions& opts) const {
  try {
    nlohmann::json extra = nlohmann::json::object();
    if (!opts.reasoning_effort.empty()) extra["reasoning_effort"] = opts.reasoning_effort;
    // Templates of the Qwen3 kind switch reasoning off with enable_thinking.
    if (opts.reasoning_effort == "none") extra["enable_thinking"] = false;
    return tmpl_->render(msgs, tools, true, extra);
  } catch (const Error& e) {
    throw ApiError(400, "invalid_request_error", "messages", "",
                   fmt::format("the model's chat template cannot render this conversation: {}", e.what()));
  }
}

bool TextChatCodec::spells_marker(const std::string& s) const {
  for (const auto& a : tok_->added_tokens())
    if (!a.content.empty() && s.find(a.content) != std::string::npos) return true;
  return false;
}

std::vector<int32_t> TextChatCodec::encode_rendered(const nlohmann::json& msgs, const nlohmann::json& tools,
                                                    const ChatOptions& opts) const {
  const std::string rendered = render_template(msgs, tools, opts);
  // Text from the client that spells a special or added token (a turn marker, a
  // tool-call marker) must stay text, not become that token. Such contents are
  // swapped for placeholders, the template rendered again, and the contents
  // encoded without special tokens in their places. This is done only when the
  // template passes contents through unchanged (checked), and only when needed,
  // so ordinary conversations tokenize exactly as the reference does.
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
  const auto parts = split_at_placeholders(render_template(guarded, tools, opts), nonce, originals);
  if (!parts) return tok_->encode(rendered);
  std::string rebuilt;
  for (const auto& part : *parts) rebuilt += part.second;
  if (rebuilt != rendered) return tok_->encode(rendered);  // the template changed the contents
  std::vector<int32_t> ids;
  for (const auto& [is_content, text] : *parts) {
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
  // Without a syntax of its own, the calls render_chat() asks for: Qwen3's.
  ReplySyntax s = syntax_ ? syntax_->reply_syntax() : qwen3_syntax();
  // A generation prompt that ends inside an opened reasoning block.
  std::string tail;
  for (size_t i = prompt.size() > 8 ? prompt.size() - 8 : 0; i < prompt.size(); ++i) tail += token_bytes(prompt[i]);
  while (!tail.empty() && (tail.back() == '\n' || tail.back() == ' ')) tail.pop_back();
  const std::string_view opener = syntax_ ? syntax_->reasoning_opener : "<think>";
  s.starts_in_reasoning =
      tail.size() >= opener.size() && tail.compare(tail.size() - opener.size(), opener.size(), opener) == 0;
  return s;
}

}  // namespace sluice::chat
