// AVX-512 twins of the scalar kernels in matmul_scalar.cpp. Weights are decoded
// 16 at a time in registers; f32 accumulation.
#include <immintrin.h>

#include <vector>

#include "kernels/matmul.h"
#include "util/numeric.h"

namespace sluice::kernels {

namespace {

// Unpacks 8 bytes of nibbles into 16 bytes in element order (low nibble first).
inline __m128i unpack_nibbles(const uint8_t* p) {
  __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  __m128i mask = _mm_set1_epi8(0x0f);
  __m128i lo = _mm_and_si128(b, mask);
  __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), mask);
  return _mm_unpacklo_epi8(lo, hi);
}

// Row decoders: chunk(c) returns columns [c, c+16) as f32 (c % 16 == 0, full chunk).
struct DecF32 {
  const float* p;
  DecF32(const QMatrix& W, int64_t r) : p(reinterpret_cast<const float*>(W.data + r * W.row_bytes)) {}
  __m512 chunk(int64_t c) const { return _mm512_loadu_ps(p + c); }
};
struct DecBF16 {
  const uint16_t* p;
  DecBF16(const QMatrix& W, int64_t r) : p(reinterpret_cast<const uint16_t*>(W.data + r * W.row_bytes)) {}
  __m512 chunk(int64_t c) const {
    __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
};
struct DecF16 {
  const uint16_t* p;
  DecF16(const QMatrix& W, int64_t r) : p(reinterpret_cast<const uint16_t*>(W.data + r * W.row_bytes)) {}
  __m512 chunk(int64_t c) const {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + c)));
  }
};
// e4m3 bits placed into an f16 (sign to bit 15, exponent/mantissa shifted by 7)
// equal the e4m3 value times 2^-8, for normals and subnormals alike.
struct DecFP8 {
  const uint8_t* p;
  const float* s;
  int32_t block;
  DecFP8(const QMatrix& W, int64_t r)
      : p(W.data + r * W.row_bytes),
        s(static_cast<const float*>(W.scale) + ((W.row0 + r) / W.block) * W.scale_stride),
        block(W.block) {}
  __m512 chunk(int64_t c) const {
    __m256i b = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + c)));
    __m256i sign = _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x80)), 8);
    __m256i mag = _mm256_slli_epi16(_mm256_and_si256(b, _mm256_set1_epi16(0x7f)), 7);
    __m512 v = _mm512_cvtph_ps(_mm256_or_si256(sign, mag));
    return _mm512_mul_ps(v, _mm512_set1_ps(s[c / block] * 256.0f));
  }
};
struct DecInt4 {
  const uint8_t* p;
  const uint16_t* s;
  int32_t group;
  DecInt4(const QMatrix& W, int64_t r)
      : p(W.data + r * W.row_bytes),
        s(static_cast<const uint16_t*>(W.scale) + (W.row0 + r) * W.scale_stride),
        group(W.group) {}
  __m512 chunk(int64_t c) const {
    __m512i u = _mm512_cvtepu8_epi32(unpack_nibbles(p + c / 2));
    __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(u, _mm512_set1_epi32(8)));
    return _mm512_mul_ps(v, _mm512_set1_ps(bf16_to_f32(s[c / group])));
  }
};
struct DecMxfp4 {
  const uint8_t* p;
  const uint8_t* s;
  __m512 lut;
  DecMxfp4(const QMatrix& W, int64_t r)
      : p(W.data + r * W.row_bytes), s(static_cast<const uint8_t*>(W.scale) + (W.row0 + r) * W.scale_stride) {
    lut = _mm512_loadu_ps(kFp4Values);
  }
  __m512 chunk(int64_t c) const {
    __m512i u = _mm512_cvtepu8_epi32(unpack_nibbles(p + c / 2));
    return _mm512_mul_ps(_mm512_permutexvar_ps(u, lut), _mm512_set1_ps(e8m0_to_f32(s[c >> 5])));
  }
};
struct DecInt8 {
  const int8_t* p;
  float s;
  DecInt8(const QMatrix& W, int64_t r)
      : p(reinterpret_cast<const int8_t*>(W.data + r * W.row_bytes)),
        s(static_cast<const float*>(W.scale)[W.row0 + r]) {}
  __m512 chunk(int64_t c) const {
    __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + c))));
    return _mm512_mul_ps(v, _mm512_set1_ps(s));
  }
};

// Columns past the last full 16-chunk, decoded with the scalar definition.
inline __m512 tail_chunk(const QMatrix& W, int64_t r, int64_t c0) {
  alignas(64) float t[16] = {};
  for (int64_t c = c0; c < W.cols; ++c) t[c - c0] = decode_elem_ref(W, r, c);
  return _mm512_load_ps(t);
}

template <class Dec>
void rows_kernel(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int64_t n, int64_t ldx, float* Y,
                 int64_t ldy) {
  const int64_t full = W.cols & ~int64_t(15);
  const int64_t rem = W.cols - full;
  const __mmask16 tmask = __mmask16((1u << rem) - 1u);
  if (n == 1) {
    // Four rows at a time: four independent weight streams share each x chunk.
    int64_t r = r0;
    for (; r + 4 <= r1; r += 4) {
      Dec d0(W, r), d1(W, r + 1), d2(W, r + 2), d3(W, r + 3);
      __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
      for (int64_t c = 0; c < full; c += 16) {
        const __m512 x = _mm512_loadu_ps(X + c);
        a0 = _mm512_fmadd_ps(d0.chunk(c), x, a0);
        a1 = _mm512_fmadd_ps(d1.chunk(c), x, a1);
        a2 = _mm512_fmadd_ps(d2.chunk(c), x, a2);
        a3 = _mm512_fmadd_ps(d3.chunk(c), x, a3);
      }
      if (rem) {
        const __m512 x = _mm512_maskz_loadu_ps(tmask, X + full);
        a0 = _mm512_fmadd_ps(tail_chunk(W, r, full), x, a0);
        a1 = _mm512_fmadd_ps(tail_chunk(W, r + 1, full), x, a1);
        a2 = _mm512_fmadd_ps(tail_chunk(W, r + 2, full), x, a2);
        a3 = _mm512_fmadd_ps(tail_chunk(W, r + 3, full), x, a3);
      }
      Y[r] = _mm512_reduce_add_ps(a0);
      Y[r + 1] = _mm512_reduce_add_ps(a1);
      Y[r + 2] = _mm512_reduce_add_ps(a2);
      Y[r + 3] = _mm512_reduce_add_ps(a3);
    }
    for (; r < r1; ++r) {
      Dec d(W, r);
      __m512 a0 = _mm512_setzero_ps();
      for (int64_t c = 0; c < full; c += 16) a0 = _mm512_fmadd_ps(d.chunk(c), _mm512_loadu_ps(X + c), a0);
      if (rem) a0 = _mm512_fmadd_ps(tail_chunk(W, r, full), _mm512_maskz_loadu_ps(tmask, X + full), a0);
      Y[r] = _mm512_reduce_add_ps(a0);
    }
    return;
  }
  // Several activation rows: decode the weight row once into an L1 buffer.
  thread_local std::vector<float> buf;
  const int64_t padded = full + (rem ? 16 : 0);
  if (int64_t(buf.size()) < padded + 16) buf.resize(size_t(padded + 16));
  float* row = buf.data();
  for (int64_t r = r0; r < r1; ++r) {
    Dec d(W, r);
    for (int64_t c = 0; c < full; c += 16) _mm512_storeu_ps(row + c, d.chunk(c));
    if (rem) _mm512_storeu_ps(row + full, tail_chunk(W, r, full));
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      const float* x0 = X + i * ldx;
      const float* x1 = x0 + ldx;
      const float* x2 = x1 + ldx;
      const float* x3 = x2 + ldx;
      __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps(), a2 = _mm512_setzero_ps(), a3 = _mm512_setzero_ps();
      for (int64_t c = 0; c < full; c += 16) {
        __m512 w = _mm512_loadu_ps(row + c);
        a0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x0 + c), a0);
        a1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x1 + c), a1);
        a2 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x2 + c), a2);
        a3 = _mm512_fmadd_ps(w, _mm512_loadu_ps(x3 + c), a3);
      }
      if (rem) {
        __m512 w = _mm512_loadu_ps(row + full);
        a0 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(tmask, x0 + full), a0);
        a1 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(tmask, x1 + full), a1);
        a2 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(tmask, x2 + full), a2);
        a3 = _mm512_fmadd_ps(w, _mm512_maskz_loadu_ps(tmask, x3 + full), a3);
      }
      Y[i * ldy + r] = _mm512_reduce_add_ps(a0);
      Y[(i + 1) * ldy + r] = _mm512_reduce_add_ps(a1);
      Y[(i + 2) * ldy + r] = _mm512_reduce_add_ps(a2);
      Y[(i + 3) * ldy + r] = _mm512_reduce_add_ps(a3);
    }
    for (; i < n; ++i) {
      const float* x = X + i * ldx;
      __m512 a = _mm512_setzero_ps();
      for (int64_t c = 0; c < full; c += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(row + c), _mm512_loadu_ps(x + c), a);
      if (rem) a = _mm512_fmadd_ps(_mm512_loadu_ps(row + full), _mm512_maskz_loadu_ps(tmask, x + full), a);
      Y[i * ldy + r] = _mm512_reduce_add_ps(a);
    }
  }
}

}  // namespace

void matmul_rows_avx512(const QMatrix& W, int64_t r0, int64_t r1, const float* X, int64_t n, int64_t ldx, float* Y,
                        int64_t ldy) {
  switch (W.fmt) {
    case WeightFormat::F32: return rows_kernel<DecF32>(W, r0, r1, X, n, ldx, Y, ldy);
    case WeightFormat::BF16: return rows_kernel<DecBF16>(W, r0, r1, X, n, ldx, Y, ldy);
    case WeightFormat::F16: return rows_kernel<DecF16>(W, r0, r1, X, n, ldx, Y, ldy);
    case WeightFormat::FP8_E4M3_BLOCK:
      if (W.block % 16 == 0) return rows_kernel<DecFP8>(W, r0, r1, X, n, ldx, Y, ldy);
      break;
    case WeightFormat::INT4_GROUP:
      if (W.group % 16 == 0) return rows_kernel<DecInt4>(W, r0, r1, X, n, ldx, Y, ldy);
      break;
    case WeightFormat::MXFP4: return rows_kernel<DecMxfp4>(W, r0, r1, X, n, ldx, Y, ldy);
    case WeightFormat::INT8_ROW: return rows_kernel<DecInt8>(W, r0, r1, X, n, ldx, Y, ldy);
  }
  matmul_rows_ref(W, r0, r1, X, n, ldx, Y, ldy);
}

}  // namespace sluice::kernels
