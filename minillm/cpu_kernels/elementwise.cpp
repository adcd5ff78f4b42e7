// The element-wise chains between a decoder layer's matmuls, one loop each.
//
// In PyTorch each of these is several ops (minillm/model.py): every op is a call into
// the library, a pass over the rows, and a new tensor. Here each chain reads its inputs
// once and writes its outputs once:
//
//   add_rms_norm   residual += x;  out = RMSNorm(residual) · weight
//   rope           q and k rotated in place: x·cos + rotate_half(x)·sin
//   silu_and_mul   out = SiLU(gate) · up, from the fused gate/up projection's output
//
// Same formulas as model.py, with its roundings: in bf16, PyTorch rounds each op's result
// to bf16, so these loops round (`round_as`) wherever the PyTorch code does. float32 sums
// may be ordered differently (a few units in the last place).

#include <cmath>
#include <cstdint>

#include <omp.h>

#include "common.h"

namespace {

constexpr int64_t kParallelElements = 1 << 15;   // below this, a second thread costs more

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

// x [rows, heads, D] (rows `row_stride` apart) rotated in place by each row's angles:
// x·cos + roll(x, D/2)·sin_signed, with cos, sin_signed [rows, D] (model.py's
// `apply_rope`: sin_signed is −sin on the first half, +sin on the second).
template <typename T>
void rope(T* x, int64_t row_stride, int64_t rows, int64_t heads, int64_t D, const T* cos,
          const T* sin_signed, int num_threads) {
  const int64_t half = D / 2;
#pragma omp parallel for num_threads(num_threads) if (rows * heads * D > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* c = cos + r * D;
    const T* s = sin_signed + r * D;
    for (int64_t head = 0; head < heads; ++head) {
      T* v = x + r * row_stride + head * D;
      float rotated[512];                 // D ≤ 512 (checked in Python)
      for (int64_t i = 0; i < D; ++i) rotated[i] = to_float(v[i < half ? i + half : i - half]);
#pragma omp simd
      for (int64_t i = 0; i < D; ++i)
        store(v + i, round_as(v, to_float(v[i]) * to_float(c[i]))
                         + round_as(v, rotated[i] * to_float(s[i])));
    }
  }
}

// gate_up [rows, 2·I] (gate | up) → out [rows, I] = SiLU(gate) · up, SiLU(g) = g / (1 + e^-g).
template <typename T>
void silu_and_mul(const T* gate_up, T* out, int64_t rows, int64_t I, int num_threads) {
#pragma omp parallel for num_threads(num_threads) if (rows * I > kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const T* gate = gate_up + r * 2 * I;
    const T* up = gate + I;
    T* o = out + r * I;
#pragma omp simd
    for (int64_t i = 0; i < I; ++i) {
      const float g = to_float(gate[i]);
      store(o + i, round_as(o, g / (1.0f + exp_approx(-g))) * to_float(up[i]));
    }
  }
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
