// The OpenAI error body of an ApiError (chat/api_error.h).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

#include "chat/api_error.h"

namespace sluice::server {

// {"error": {"message", "type", "param", "code"}} with null for empty param/code.
inline nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param = "",
                                 const std::string& code = "") {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}
inline nlohmann::json error_body(const chat::ApiError& e) { return error_body(e.what(), e.type(), e.param(), e.code()); }

}  // namespace sluice::server
