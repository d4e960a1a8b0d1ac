// Errors a client caused or must hear about, with the HTTP status and the
// error fields every API's error body is made from (message, type, param,
// code): thrown by the conversation layer (a template that cannot render, a
// schema the grammar cannot express, a prompt over the context) and by the
// server's request parsers alike.
#pragma once
#include <string>

#include <fmt/format.h>

#include "util/error.h"

namespace sluice::chat {

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

// 400 invalid_request_error about one request field.
template <typename... Args>
[[noreturn]] void bad_field(const std::string& param, fmt::format_string<Args...> f, Args&&... args) {
  throw ApiError(400, "invalid_request_error", param, "", fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace sluice::chat
