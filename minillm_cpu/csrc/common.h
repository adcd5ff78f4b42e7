// What the kernel files share: the two number formats, and an exp the compiler can
// vectorize. (minillm_cpu/kernels.py says how these files are built and used.)
#pragma once

#include <cstdint>
#include <cstring>

// bfloat16 is the top 16 bits of a float32: same exponent range, 8 bits of mantissa.
// It is stored as those 16 bits; arithmetic happens in float32.
typedef uint16_t bf16;

inline float to_float(float x) { return x; }
inline float to_float(bf16 x) {
  uint32_t bits = uint32_t(x) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

// float32 -> bfloat16, rounding to nearest, ties to even (what PyTorch does).
inline bf16 to_bf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return bf16((bits >> 16) | 0x40);   // NaN stays NaN
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return bf16(bits >> 16);
}

inline void store(float* p, float x) { *p = x; }
inline void store(bf16* p, float x) { *p = to_bf16(x); }

// x as a tensor of T's dtype would hold it: PyTorch rounds the result of every bf16 op to
// bf16, so a chain of bf16 ops written out in PyTorch rounds after each step; the kernels
// call this wherever that PyTorch code rounds, to give the same numbers.
inline float round_as(const float*, float x) { return x; }
inline float round_as(const bf16*, float x) { return to_float(to_bf16(x)); }

// e^x for x in [-87, 88] (clamped outside), to about 1 unit in the last place.
// e^x = 2^n · e^r with n = round(x / ln 2) and |r| <= ln(2)/2; e^r by its Taylor series
// to r^7 (the next term is below 2^-24 there), 2^n by writing n into the exponent bits.
// Plain arithmetic, so a loop of these becomes vector instructions (libm's expf would be
// one call per element).
inline float exp_approx(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;   // ln 2 in two parts, exact
  const float p = 1.0f + r * (1.0f + r * (1.0f / 2 + r * (1.0f / 6 + r * (1.0f / 24
                  + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
  const int32_t bits = (int32_t(n) + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}
