// Errors a client caused or must hear about, with the HTTP status and the
// OpenAI error body fields (message, type, param, code).
#pragma once
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace sluice::server {

class ApiError : public Error {
 public:
  ApiError(int status, std::string type, std::string param, std::string code, const std::string& message)
      : Error(message), status_(status), type_(std::move(type)), param_(std::move(param)), code_(std::move(code)) {}
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

 private:
  int status_;
  std::string type_, param_, code_;
};

// {"error": {"message", "type", "param", "code"}} with null for empty param/code.
inline nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param = "",
                                 const std::string& code = "") {
  nlohmann::json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return {{"error", e}};
}
inline nlohmann::json error_body(const ApiError& e) { return error_body(e.what(), e.type(), e.param(), e.code()); }

// 400 invalid_request_error about one request field.
template <typename... Args>
[[noreturn]] void bad_field(const std::string& param, fmt::format_string<Args...> f, Args&&... args) {
  throw ApiError(400, "invalid_request_error", param, "", fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace sluice::server
