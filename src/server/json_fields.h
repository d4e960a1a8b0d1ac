// The field checks the three API parsers share (Chat Completions and Completions
// in server/api_request.cpp, Anthropic Messages in server/anthropic_api.cpp, Responses
// in server/responses_api.cpp): whether a field is there, which fields an object
// may have, and a field's JSON type. Each refusal is a 400 invalid_request_error
// (chat::bad_field) whose param is the field's path, e.g. "messages[2].content".
#pragma once
#include <cstdint>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

namespace sluice::server::fields {

// How a type error ends. Plain: "'x' must be a string" (Anthropic, Responses and
// most nested OpenAI fields); WithGot: "'x' must be a string, got an integer"
// (the OpenAI parsers' top-level fields and messages), naming what came with
// type_name.
enum class Wording { Plain, WithGot };

// "null", "a boolean", "a string", "an array", "an object", "an integer", "a number".
const char* type_name(const nlohmann::json& j);

// The key is there and not null: every API reads a null field as an absent one.
bool present(const nlohmann::json& obj, const char* key);

// Refuses `obj` without `key`: "'<prefix><key>' is required", param <prefix><key>
// (`prefix` as for only_known). require: a null value is there (its type check
// refuses it); require_present: a null counts as absent, as present() says.
void require(const nlohmann::json& obj, const std::string& key, const std::string& prefix);
void require_present(const nlohmann::json& obj, const std::string& key, const std::string& prefix);

// Refuses any key of `obj` not in `known`: "unknown field '<prefix><key>': this
// server does not support it", param <prefix><key>. `prefix` is the object's path
// with a trailing '.', or "" for the body.
void only_known(const nlohmann::json& obj, const std::set<std::string>& known, const std::string& prefix);

// `v` (the value at path `where`) if it has the type, else "'<where>' must be <a type>".
std::string string_at(const nlohmann::json& v, const std::string& where, Wording wording = Wording::Plain);
bool boolean_at(const nlohmann::json& v, const std::string& where, Wording wording = Wording::Plain);
const nlohmann::json& object_at(const nlohmann::json& v, const std::string& where, Wording wording = Wording::Plain);
const nlohmann::json& array_at(const nlohmann::json& v, const std::string& where, Wording wording = Wording::Plain);

// obj[key], a finite number within [lo, hi] / an integer within [lo, hi], in the
// OpenAI wording: "'<key>' must be a number, got a string", "'<key>' must be
// between <lo> and <hi>, got <value>".
double number_in(const nlohmann::json& obj, const char* key, double lo, double hi);
int64_t integer_in(const nlohmann::json& obj, const char* key, int64_t lo, int64_t hi);

}  // namespace sluice::server::fields
