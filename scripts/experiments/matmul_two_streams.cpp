// Issue 18, PERFORMANCE.md "Open issues": a variant of minillm/cpu_kernels/matmul.cpp that
// reads TWO panels at once, so that each thread streams from two places in memory.
// Experiment only (16 rows, N a multiple of 16, no bias); driven by matmul_two_streams.py.
//
// Per pair of panels (a, b) and per block of KB values of k: rows 0-7 against both
// panels (16 accumulators), then rows 8-15 against the same, now cached, block; the
// partial sums wait in `buf` between blocks. The 16 rows' sums are in k order, as in
// the kept kernel.
#include <cstdint>
#include <cstring>
#include <omp.h>
typedef float vec16 __attribute__((vector_size(64)));
constexpr int64_t kPanel = 16, kDistance = 2048;
#ifndef KB
#define KB 64
#endif

static inline vec16 ld(const float* p) { vec16 v; std::memcpy(&v, p, 64); return v; }

// Two panels at once (two streams), 16 rows in two halves of 8, k in blocks of KB
static void two_panels(const float* __restrict x, int64_t K, const float* __restrict pa,
                       const float* __restrict pb, float* __restrict ya, float* __restrict yb, int64_t N) {
  vec16 buf[16][2];
  for (int m = 0; m < 16; ++m) buf[m][0] = buf[m][1] = vec16{};
  for (int64_t k0 = 0; k0 < K; k0 += KB) {
    const int64_t k1 = k0 + KB < K ? k0 + KB : K;
    for (int half = 0; half < 2; ++half) {
      vec16 a[8], b[8];
#pragma GCC unroll 8
      for (int m = 0; m < 8; ++m) { a[m] = buf[8 * half + m][0]; b[m] = buf[8 * half + m][1]; }
      const float* xr = x + 8 * half * K;
      for (int64_t k = k0; k < k1; ++k) {
        const vec16 wa = ld(pa + k * kPanel), wb = ld(pb + k * kPanel);
        if (half == 0) { __builtin_prefetch(pa + k * kPanel + kDistance, 0, 2); __builtin_prefetch(pb + k * kPanel + kDistance, 0, 2); }
#pragma GCC unroll 8
        for (int m = 0; m < 8; ++m) { const float xv = xr[m * K + k]; a[m] += xv * wa; b[m] += xv * wb; }
      }
#pragma GCC unroll 8
      for (int m = 0; m < 8; ++m) { buf[8 * half + m][0] = a[m]; buf[8 * half + m][1] = b[m]; }
    }
  }
  for (int m = 0; m < 16; ++m) { std::memcpy(ya + m * N, &buf[m][0], 64); std::memcpy(yb + m * N, &buf[m][1], 64); }
}

static void one_panel(const float* __restrict x, int64_t K, const float* __restrict p, float* __restrict y, int64_t N) {
  vec16 acc[16];
  for (int m = 0; m < 16; ++m) acc[m] = vec16{};
  for (int64_t k = 0; k < K; ++k) {
    const vec16 w = ld(p + k * kPanel);
    __builtin_prefetch(p + k * kPanel + kDistance, 0, 2);
#pragma GCC unroll 16
    for (int m = 0; m < 16; ++m) acc[m] += x[m * K + k] * w;
  }
  for (int m = 0; m < 16; ++m) std::memcpy(y + m * N, &acc[m], 64);
}

extern "C" int minillm_matmul_few_rows(const float* x, const float* panels, const float* bias,
                                       float* y, int64_t M, int64_t N, int64_t K, int num_threads) {
  const int64_t P = N / kPanel;   // assume N % 16 == 0, M == 16
#pragma omp parallel num_threads(num_threads)
  {
    const int t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t lo = P * t / T, hi = P * (t + 1) / T, n = hi - lo, half = n / 2;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = lo + i, b = lo + half + i;
      two_panels(x, K, panels + a * K * kPanel, panels + b * K * kPanel, y + a * kPanel, y + b * kPanel, N);
    }
    if (n % 2) one_panel(x, K, panels + (hi - 1) * K * kPanel, y + (hi - 1) * kPanel, N);
  }
  return 0;
}
