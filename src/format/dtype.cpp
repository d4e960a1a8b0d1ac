#include "format/dtype.h"

namespace sluice {

namespace {
struct Entry {
  DType d;
  std::string_view name;
  int64_t size;
};
constexpr Entry kTable[] = {
    {DType::F64, "F64", 8},         {DType::F32, "F32", 4},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2},       {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::F8_E8M0, "F8_E8M0", 1}, {DType::I64, "I64", 8},         {DType::I32, "I32", 4},
    {DType::I16, "I16", 2},         {DType::I8, "I8", 1},           {DType::U8, "U8", 1},
    {DType::BOOL, "BOOL", 1},
};
}  // namespace

std::optional<DType> parse_dtype(std::string_view s) {
  for (const auto& e : kTable)
    if (e.name == s) return e.d;
  return std::nullopt;
}

std::string_view dtype_name(DType d) {
  for (const auto& e : kTable)
    if (e.d == d) return e.name;
  return "?";
}

int64_t dtype_size(DType d) {
  for (const auto& e : kTable)
    if (e.d == d) return e.size;
  return 0;
}

}  // namespace sluice
