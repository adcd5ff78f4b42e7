// The element-wise chains between a decoder layer's matmuls, one loop each.
//
// In PyTorch each of these is several ops (minillm/model/llama.py): every op is a call into
// the library, a pass over the rows, and a new tensor. Here each chain reads its inputs
// once and writes its outputs once:
//
//   add_rms_norm   residual += x;  out = RMSNorm(residual) · weight
//   rope           q and k rotated in place: x·cos + rotate_half(x)·sin
//   silu_and_mul   out = SiLU(gate) · up, from the fused gate/up projection's output
//
// Same formulas as llama.py, with its roundings: in bf16, PyTorch rounds each op's result
// to bf16, so these loops round (`round_as`) wherever the PyTorch code does. float32 sums
// may be ordered differently (a few units in the last place).

#include <cmath>
#include <cstdint>

#include <omp.h>

#include "common.h"

namespace {

// Below this many elements a second thread costs more than it saves. Measured inside a
// fused decode step (decoder_layer.cpp), where the rows arrive from the matmul spread over
// both cores' caches, 4096 (16 rows of SmolLM2 run on two threads) beat 32768
// (docs/performance.md, change 14).
constexpr int64_t kParallelElements = 1 << 12;

// residual [rows, H] += x (when x is given);  out [rows, H] = RMSNorm(residual) · weight.
// RMSNorm: the row divided by its root mean square, sqrt(mean(r²) + eps), taken in float32.
template <typename T>
void add_rms_norm(const T* x, T* residual, const T* weight, T* out, int64_t rows, int64_t H,
                  float eps, int num_threads) {
#pragma omp parallel for num_threads(num_threads) if (rows * H > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    T* h = residual + r * H;
    float squares = 0.0f;
    if (x != nullptr) {
      const T* add = x + r * H;
#pragma omp simd reduction(+ : squares)
      for (int64_t i = 0; i < H; ++i) {
        const float sum = round_as(h, to_float(h[i]) + to_float(add[i]));
        store(h + i, sum);
        squares += sum * sum;
      }
    } else {
#pragma omp simd reduction(+ : squares)
      for (int64_t i = 0; i < H; ++i) squares += to_float(h[i]) * to_float(h[i]);
    }
    const float inv_rms = 1.0f / std::sqrt(squares / float(H) + eps);
    T* o = out + r * H;
#pragma omp simd
    for (int64_t i = 0; i < H; ++i)   // bf16: normed rounds first, then times the weight
      store(o + i, to_float(weight[i]) * round_as(h, to_float(h[i]) * inv_rms));
  }
}

// One head's D values rotated in place: x·cos + roll(x, D/2)·sin_signed. The first half
// pairs with the second, so each loop step reads one value of each half, then writes both.
template <typename T>
void rope_head(T* __restrict lo, T* __restrict hi, const T* __restrict c,
               const T* __restrict s, int64_t half) {
#pragma omp simd
  for (int64_t i = 0; i < half; ++i) {
    const float a = to_float(lo[i]), b = to_float(hi[i]);
    store(lo + i, round_as(lo, a * to_float(c[i])) + round_as(lo, b * to_float(s[i])));
    store(hi + i, round_as(hi, b * to_float(c[half + i])) + round_as(hi, a * to_float(s[half + i])));
  }
}

// x [rows, heads, D] (rows `row_stride` apart) rotated in place by each row's angles:
// x·cos + roll(x, D/2)·sin_signed, with cos, sin_signed [rows, D] (llama.py's
// `apply_rope`: sin_signed is −sin on the first half, +sin on the second).
template <typename T>
void rope(T* x, int64_t row_stride, int64_t rows, int64_t heads, int64_t D, const T* cos,
          const T* sin_signed, int num_threads) {
  const int64_t half = D / 2;
#pragma omp parallel for num_threads(num_threads) if (rows * heads * D > kParallelElements)
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t head = 0; head < heads; ++head) {
      T* v = x + r * row_stride + head * D;
      rope_head(v, v + half, cos + r * D, sin_signed + r * D, half);
    }
}

// One row: o[i] = SiLU(gate[i]) · up[i], a tile of e^-gate at a time, then the rest.
// (Two loops, not one: in a single loop GCC's partial-redundancy elimination gives the
// division a copy for exp_approx's clamped inputs, x / (1 + e^88), and computes it in
// every vector lane; the result is subnormal, and subnormal results cost the CPU a
// microcode assist each, which made the loop many times slower: docs/performance.md,
// change 12b.)
template <typename T>
void silu_and_mul_row(const T* __restrict gate, const T* __restrict up, T* __restrict o,
                      int64_t I) {
  constexpr int64_t kTile = 64;
  float e[kTile];                                                       // e^-gate
  for (int64_t start = 0; start < I; start += kTile) {
    const int64_t n = I - start < kTile ? I - start : kTile;
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) e[i] = exp_approx(-to_float(gate[start + i]));
#pragma omp simd
    for (int64_t i = 0; i < n; ++i) {
      const float g = to_float(gate[start + i]);
      store(o + start + i, round_as(o, g / (1.0f + e[i])) * to_float(up[start + i]));
    }
  }
}

// gate_up [rows, 2·I] (gate | up) → out [rows, I] = SiLU(gate) · up, SiLU(g) = g / (1 + e^-g).
template <typename T>
void silu_and_mul(const T* gate_up, T* out, int64_t rows, int64_t I, int num_threads) {
#pragma omp parallel for num_threads(num_threads) if (rows * I > kParallelElements)
  for (int64_t r = 0; r < rows; ++r)
    silu_and_mul_row(gate_up + r * 2 * I, gate_up + r * 2 * I + I, out + r * I, I);
}

}  // namespace

#define MINILLM_ENTRIES(SUFFIX, T)                                                            \
  extern "C" void minillm_add_rms_norm_##SUFFIX(const T* x, T* residual, const T* weight,     \
                                                T* out, int64_t rows, int64_t H, float eps,  \
                                                int num_threads) {                           \
    add_rms_norm(x, residual, weight, out, rows, H, eps, num_threads);                       \
  }                                                                                          \
  extern "C" void minillm_rope_##SUFFIX(T* x, int64_t row_stride, int64_t rows,               \
                                        int64_t heads, int64_t D, const T* cos,              \
                                        const T* sin_signed, int num_threads) {              \
    rope(x, row_stride, rows, heads, D, cos, sin_signed, num_threads);                       \
  }                                                                                          \
  extern "C" void minillm_silu_and_mul_##SUFFIX(const T* gate_up, T* out, int64_t rows,       \
                                                int64_t I, int num_threads) {                \
    silu_and_mul(gate_up, out, rows, I, num_threads);                                        \
  }
MINILLM_ENTRIES(float32, float)
MINILLM_ENTRIES(bfloat16, bf16)
