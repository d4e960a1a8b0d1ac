// Freeform ("custom") tools, whose input is text instead of a JSON object
// (Codex's apply_patch, OpenAI's custom tools in the Responses and Chat APIs):
// the model is shown a function with one string parameter, `input` (the tool's
// grammar, when it has one, is quoted in the description: it is not enforced),
// and its calls go back to the client as that text.
#pragma once
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace sluice::server {

// The function the model sees for a freeform tool: {"type": "function", "function": {...}}.
// `format`: the tool's format object ({"type": "text"} or a grammar), or null.
nlohmann::json freeform_function(const std::string& name, const std::string& description, const nlohmann::json& format);
// A call's arguments for an earlier call of a freeform tool replayed in the conversation.
std::string freeform_arguments(const std::string& input);
// A call's input text from its arguments: the `input` string, or the arguments as
// written when they are not an object with a string `input`.
std::string freeform_input(const std::string& arguments);

// Decodes the `input` string of a freeform call's arguments while they stream:
// each feed returns the text decoded so far that was not returned before;
// finish() returns the rest of freeform_input() of all the pieces.
class FreeformInput {
 public:
  std::string feed(std::string_view piece);
  std::string finish();

 private:
  enum class State { Head, String, Done, Off };
  std::string raw_;
  size_t pos_ = 0;
  State state_ = State::Head;
  std::string sent_;  // decoded text returned so far
};

}  // namespace sluice::server
