// Element types that appear in safetensors headers.
#pragma once
#include <cstdint>
#include <optional>
#include <string_view>

namespace sluice {

enum class DType : uint8_t { F64, F32, F16, BF16, F8_E4M3, F8_E5M2, F8_E8M0, I64, I32, I16, I8, U8, BOOL };

std::optional<DType> parse_dtype(std::string_view s);
std::string_view dtype_name(DType d);
int64_t dtype_size(DType d);

}  // namespace sluice
