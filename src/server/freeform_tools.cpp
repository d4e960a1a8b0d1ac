#include "server/freeform_tools.h"

#include <fmt/format.h>

namespace sluice::server {

using nlohmann::json;

json freeform_function(const std::string& name, const std::string& description, const json& format) {
  std::string desc = description;
  if (format.is_object() && format.value("type", "") == "grammar") {
    const std::string syntax = format.value("syntax", "");
    const std::string definition = format.contains("definition") && format["definition"].is_string()
                                       ? format["definition"].get<std::string>()
                                       : "";
    desc += fmt::format("{}The input is text following this {} grammar:\n{}", desc.empty() ? "" : "\n\n",
                        syntax.empty() ? "formal" : syntax, definition);
  }
  json params = {{"type", "object"},
                 {"properties", {{"input", {{"type", "string"}, {"description", "The tool's input, as text."}}}}},
                 {"required", {"input"}},
                 {"additionalProperties", false}};
  json f = {{"name", name}, {"parameters", params}};
  if (!desc.empty()) f["description"] = desc;
  return {{"type", "function"}, {"function", f}};
}

std::string freeform_arguments(const std::string& input) {
  return json({{"input", input}}).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string freeform_input(const std::string& arguments) {
  const json j = json::parse(arguments, nullptr, false);
  if (j.is_object() && j.contains("input") && j["input"].is_string()) return j["input"].get<std::string>();
  return arguments;
}

namespace {
bool space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }
}  // namespace

std::string FreeformInput::feed(std::string_view piece) {
  raw_.append(piece);
  std::string out;
  if (state_ == State::Head) {
    // {"input": " with any whitespace between the tokens
    size_t at = 0;
    for (std::string_view tok : {std::string_view("{"), std::string_view("\"input\""), std::string_view(":"),
                                 std::string_view("\"")}) {
      while (at < raw_.size() && space(raw_[at])) ++at;
      const std::string_view have = std::string_view(raw_).substr(at, tok.size());
      if (have != tok.substr(0, have.size())) {
        state_ = State::Off;
        return "";
      }
      if (have.size() < tok.size()) return "";
      at += tok.size();
    }
    state_ = State::String;
    pos_ = at;
  }
  while (state_ == State::String && pos_ < raw_.size()) {
    const char c = raw_[pos_];
    if (c == '"') {
      state_ = State::Done;
      break;
    }
    if (c != '\\') {
      // A character's bytes go out together (a piece may end inside one).
      const unsigned char u = static_cast<unsigned char>(c);
      const size_t n = u >= 0xF0 ? 4 : u >= 0xE0 ? 3 : u >= 0xC0 ? 2 : 1;
      if (pos_ + n > raw_.size()) break;
      out.append(raw_, pos_, n);
      pos_ += n;
      continue;
    }
    // An escape: decoded by the JSON parser once it is whole (a surrogate pair as one).
    size_t len = pos_ + 1 < raw_.size() && raw_[pos_ + 1] == 'u' ? 6 : 2;
    if (pos_ + len > raw_.size()) break;
    if (len == 6) {
      unsigned v = 0;
      for (size_t i = pos_ + 2; i < pos_ + 6; ++i) {
        const char h = raw_[i];
        const int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
        v = v * 16 + unsigned(d < 0 ? 0 : d);
      }
      if (v >= 0xD800 && v < 0xDC00) {
        len = 12;
        if (pos_ + len > raw_.size()) break;
      }
    }
    const json j = json::parse("\"" + raw_.substr(pos_, len) + "\"", nullptr, false);
    if (!j.is_string()) {
      state_ = State::Off;
      break;
    }
    out += j.get<std::string>();
    pos_ += len;
  }
  sent_ += out;
  return out;
}

std::string FreeformInput::finish() {
  const std::string whole = freeform_input(raw_);
  if (whole.compare(0, sent_.size(), sent_) != 0) return "";  // not as streamed: what was sent stands
  return whole.substr(sent_.size());
}

}  // namespace sluice::server
