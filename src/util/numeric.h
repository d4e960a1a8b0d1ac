// Scalar conversions between storage formats and float. These are the
// reference definitions; SIMD kernels must agree with them bit for bit.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace sluice {

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round-to-nearest-even, NaN kept quiet.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

inline float f16_to_f32(uint16_t h) {
  uint32_t s = uint32_t(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  uint32_t u;
  if (e == 0) {
    if (m == 0) {
      u = s;
    } else {  // subnormal: renormalise
      int sh = 0;
      while (!(m & 0x400u)) { m <<= 1; ++sh; }
      m &= 0x3ffu;
      u = s | (uint32_t(127 - 15 - sh + 1) << 23) | (m << 13);
    }
  } else if (e == 31) {
    u = s | 0x7f800000u | (m << 13);
  } else {
    u = s | ((e + 127 - 15) << 23) | (m << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// float8_e4m3fn: no infinities, S.1111.111 is NaN.
inline float fp8_e4m3_to_f32(uint8_t b) {
  int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  float v;
  if (e == 15 && m == 7) return std::nanf("");
  if (e == 0) v = float(m) * (1.0f / 512.0f);
  else v = std::ldexp(1.0f + float(m) / 8.0f, e - 7);
  return s ? -v : v;
}

// E8M0 block scale (OCP MX): 2^(e-127); 0xFF is NaN.
inline float e8m0_to_f32(uint8_t e) {
  if (e == 0xff) return std::nanf("");
  uint32_t u = e == 0 ? 0x00400000u : uint32_t(e) << 23;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// FP4 E2M1 code -> value (bit 3 is the sign).
inline constexpr float kFp4Values[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

}  // namespace sluice
