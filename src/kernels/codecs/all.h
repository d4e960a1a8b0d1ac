// Every weight format's codec, one file per row of kernels/weight_formats.def.
// No include guard: kernels/matmul_simd.cpp includes this once per Highway
// target (each codec's SIMD part has Highway's toggle guard; its definition
// part, an ordinary include guard).
#include "kernels/codecs/f32.h"
#include "kernels/codecs/bf16.h"
#include "kernels/codecs/f16.h"
#include "kernels/codecs/fp8_e4m3_block.h"
#include "kernels/codecs/int4_group.h"
#include "kernels/codecs/mxfp4.h"
#include "kernels/codecs/int8_row.h"
