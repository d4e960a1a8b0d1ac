// Parsing of --tokens lists shared by the commands that take token ids.
#include <cerrno>
#include <climits>
#include <cstdlib>

#include <cstring>

#include "cli/commands.h"
#include "format/safetensors.h"
#include "util/error.h"

namespace sluice::cli {

std::vector<int32_t> parse_token_list(const std::string& s) {
  std::vector<int32_t> out;
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string item = s.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    char* end = nullptr;
    errno = 0;
    long long v = item.empty() ? 0 : std::strtoll(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || errno == ERANGE || v < 0 || v > INT32_MAX)
      fail("--tokens: item {} ('{}') is not a token id (non-negative integer)", out.size() + 1, item);
    out.push_back(int32_t(v));
    i = j + 1;
  }
  return out;
}

std::vector<int32_t> tokens_from_safetensors(const std::string& spec) {
  // FILE:TENSOR, an integer tensor (e.g. a reference file's input_ids)
  auto colon = spec.rfind(':');
  if (colon == std::string::npos) fail("--tokens-from must be FILE:TENSOR, got '{}'", spec);
  SafetensorsFile f(spec.substr(0, colon));
  TensorView t = f.get(spec.substr(colon + 1));
  std::vector<int32_t> out;
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (t.dtype() == DType::I64) {
      int64_t v;
      std::memcpy(&v, t.data + 8 * i, 8);
      out.push_back(int32_t(v));
    } else if (t.dtype() == DType::I32) {
      int32_t v;
      std::memcpy(&v, t.data + 4 * i, 4);
      out.push_back(v);
    } else {
      fail("{}: tensor '{}' must be I64 or I32", f.path(), t.name());
    }
  }
  return out;
}

}  // namespace sluice::cli
