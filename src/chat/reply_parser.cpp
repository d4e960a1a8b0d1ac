#include "chat/reply_parser.h"

#include <atomic>
#include <chrono>
#include <random>

#include <nlohmann/json.hpp>

#include "text/xtml.h"

namespace sluice::chat {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool all_space(std::string_view s) { return trim(s).empty(); }

// Length of the longest tail of `s` that is a proper prefix of `marker`.
size_t partial_tail(std::string_view s, std::string_view marker) {
  if (marker.empty()) return 0;
  for (size_t len = std::min(marker.size() - 1, s.size()); len > 0; --len)
    if (s.substr(s.size() - len) == marker.substr(0, len)) return len;
  return 0;
}

}  // namespace

void ReplyDelta::append(ReplyDelta&& o) {
  content += o.content;
  reasoning += o.reasoning;
  for (auto& c : o.tool_calls) tool_calls.push_back(std::move(c));
  for (auto& p : o.call_parts) {
    // Parts of the same call that follow each other merge into one.
    if (!call_parts.empty() && call_parts.back().index == p.index && !call_parts.back().ends && !call_parts.back().cut) {
      ToolCallPart& last = call_parts.back();
      last.arguments += p.arguments;
      last.ends = p.ends;
      last.cut = p.cut;
      if (p.begins) last.begins = true, last.id = p.id, last.name = p.name;
    } else {
      call_parts.push_back(std::move(p));
    }
  }
}

ReplyParser::ReplyParser(ReplySyntax syntax, bool tools)
    : syn_(std::move(syntax)), tools_(tools && !syn_.call_begin.empty()),
      mode_(syn_.starts_in_reasoning ? Mode::Reasoning : Mode::Content) {}

void ReplyParser::emit_text(ReplyDelta& out, std::string_view text) {
  // Whitespace is held until something visible follows, so a reply that is only
  // tool calls has no stray newlines as content.
  if (after_think_) {  // the newlines that usually follow </think> are not content
    while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
    if (text.empty()) return;
    after_think_ = false;
  }
  // Trailing whitespace is held too, whatever precedes it in this piece, so the
  // result does not depend on where the text was cut into pieces.
  size_t body = text.size();
  while (body > 0 && std::isspace(static_cast<unsigned char>(text[body - 1]))) --body;
  if (body == 0) {
    ws_.append(text);
    return;
  }
  out.content += ws_;
  out.content.append(text.substr(0, body));
  ws_.assign(text.substr(body));
  any_content_ = true;
}

void ReplyParser::step(ReplyDelta& out, bool final) {
  for (;;) {
    bool more = false;
    switch (mode_) {
      case Mode::Content: more = step_content(out, final); break;
      case Mode::Reasoning: more = step_reasoning(out, final); break;
      case Mode::Section: more = step_section(out, final); break;
      case Mode::Call: more = step_call(out, final); break;
    }
    if (!more) return;
  }
}

const std::string& ReplyParser::calls_opener() const {
  return syn_.section_begin.empty() ? syn_.call_begin : syn_.section_begin;
}

bool ReplyParser::step_content(ReplyDelta& out, bool final) {
  std::string_view b = buf_;
  const std::string& open_calls = calls_opener();
  // Markers that change mode from here.
  size_t best = std::string::npos;
  const std::string* which = nullptr;
  auto consider = [&](const std::string& m) {
    if (m.empty()) return;
    auto p = b.find(m);
    if (p < best) best = p, which = &m;
  };
  // <think> opens reasoning only at the very start of the reply.
  const bool think_ok = !any_content_ && calls_ == 0 && !syn_.think_begin.empty();
  if (think_ok) {
    auto p = b.find(syn_.think_begin);
    if (p != std::string_view::npos && all_space(b.substr(0, p))) best = p, which = &syn_.think_begin;
  }
  if (tools_) consider(open_calls);
  for (const auto& m : syn_.drop_markers) consider(m);
  if (which) {
    emit_text(out, b.substr(0, best));
    buf_.erase(0, best + which->size());
    if (which == &syn_.think_begin) mode_ = Mode::Reasoning;
    else if (which != &open_calls) return true;  // a dropped marker: still content
    else if (syn_.section_begin.empty()) start_call();
    else mode_ = Mode::Section;
    return true;
  }
  size_t hold = 0;
  if (!final) {
    if (think_ok) {
      const size_t t = partial_tail(b, syn_.think_begin);
      if (t > 0 && all_space(b.substr(0, b.size() - t))) hold = std::max(hold, t);
    }
    if (tools_) hold = std::max(hold, partial_tail(b, open_calls));
    for (const auto& m : syn_.drop_markers) hold = std::max(hold, partial_tail(b, m));
  }
  emit_text(out, b.substr(0, b.size() - hold));
  buf_.erase(0, b.size() - hold);
  return false;
}

bool ReplyParser::step_reasoning(ReplyDelta& out, bool final) {
  std::string_view b = buf_;
  auto p = b.find(syn_.think_end);
  if (p != std::string_view::npos) {
    out.reasoning.append(b.substr(0, p));
    buf_.erase(0, p + syn_.think_end.size());
    after_think_ = true;
    mode_ = Mode::Content;
    return true;
  }
  const size_t hold = final ? 0 : partial_tail(b, syn_.think_end);
  out.reasoning.append(b.substr(0, b.size() - hold));
  buf_.erase(0, b.size() - hold);
  return false;
}

bool ReplyParser::step_section(ReplyDelta& out, bool final) {
  std::string_view b = buf_;
  auto pc = b.find(syn_.call_begin), pe = b.find(syn_.section_end);
  if (pc != std::string_view::npos && (pe == std::string_view::npos || pc < pe)) {
    buf_.erase(0, pc + syn_.call_begin.size());
    start_call();
    return true;
  }
  if (pe != std::string_view::npos) {
    buf_.erase(0, pe + syn_.section_end.size());
    mode_ = Mode::Content;
    return true;
  }
  if (final) {
    emit_text(out, trim(b));  // stray text in an unterminated section
    buf_.clear();
  }
  return false;
}

bool ReplyParser::step_call(ReplyDelta& out, bool final) {
  std::string_view b = buf_;
  const auto p = b.find(syn_.call_end);
  // Everything but a possible start of the end marker goes to the reader now.
  const size_t upto = p != std::string_view::npos ? p : final ? b.size() : b.size() - partial_tail(b, syn_.call_end);
  feed_call(out, b.substr(0, upto));
  buf_.erase(0, upto);
  if (p == std::string_view::npos && !final) return false;
  const bool marked = p != std::string_view::npos;
  if (marked) buf_.erase(0, syn_.call_end.size());
  end_call(out, marked);
  if (!marked) {
    buf_.clear();
    mode_ = Mode::Content;
    return false;
  }
  mode_ = syn_.section_begin.empty() ? Mode::Content : Mode::Section;
  return true;
}

ReplyDelta ReplyParser::push(std::string_view text) {
  ReplyDelta out;
  buf_.append(text);
  step(out, false);
  return out;
}

ReplyDelta ReplyParser::finish(bool cut) {
  ReplyDelta out;
  if (cut) {
    step(out, false);  // what is certain goes out; a held possible marker start does not
    if (mode_ == Mode::Call) {
      if (announced_) {
        ToolCallPart part;
        part.index = size_t(calls_);
        part.cut = true;
        out.call_parts.push_back(std::move(part));
      }
      reader_.reset();
    }
    buf_.clear();
    mode_ = Mode::Content;
  }
  step(out, true);
  if (calls_ == 0) out.content += ws_;
  ws_.clear();
  return out;
}

void ReplyParser::start_call() {
  mode_ = Mode::Call;
  reader_ = syn_.call_reader();
  call_text_.clear();
  call_args_.clear();
  announced_ = false;
}

void ReplyParser::feed_call(ReplyDelta& out, std::string_view text) {
  call_text_.append(text);
  std::string args = reader_->feed(text);
  if (!reader_->has_head()) return;
  ToolCallPart part;
  part.index = size_t(calls_);
  if (!announced_) {
    announced_ = true;
    part.begins = true;
    part.id = reader_->id();
    part.name = reader_->name();
  }
  call_args_ += args;
  part.arguments = std::move(args);
  if (part.begins || !part.arguments.empty()) out.call_parts.push_back(std::move(part));
}

void ReplyParser::end_call(ReplyDelta& out, bool marked) {
  std::optional<std::string> rest = reader_->finish();
  if (!rest) {
    // Not a call after all: keep the text visible rather than lose it.
    emit_text(out, syn_.call_begin);
    emit_text(out, call_text_);
    if (marked) emit_text(out, syn_.call_end);
  } else {
    ToolCallPart part;
    part.index = size_t(calls_);
    if (!announced_) part.begins = true, part.id = reader_->id(), part.name = reader_->name();
    part.arguments = *rest;
    part.ends = true;
    call_args_ += *rest;
    out.call_parts.push_back(std::move(part));
    out.tool_calls.push_back(ToolCall{reader_->id(), reader_->name(), call_args_});
    ++calls_;
  }
  reader_.reset();
  call_text_.clear();
  call_args_.clear();
  announced_ = false;
}

}  // namespace sluice::chat
