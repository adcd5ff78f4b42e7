// y [M, N] = x [M, K] @ W[N, K]ᵀ (+ bias) for a decode step's few rows (M <= 16), fp32.
//
// A decode step multiplies a handful of rows by every weight matrix once. The arithmetic
// is small (2·M FLOPs per weight) and the weights are hundreds of megabytes, so the
// step is a race to *stream the weights in from memory* while the multiplies keep up.
// Three things decide that race:
//
// 1. The layout. W is re-arranged once, at load time (`CpuKernels.pack_panels`), into
//    panels of 16 output columns: panel p holds W[16p .. 16p+15, k] for k = 0, 1, 2, ...
//    one after another, so the kernel reads each panel as one contiguous run of memory,
//    16 floats (one 64-byte cache line, one AVX-512 register) per k. For each k it
//    multiplies that vector by x[m, k] for every row m and adds into M accumulator
//    registers: M·16 outputs stay in registers for the whole sum over k, and each weight
//    is read exactly once.
//
// 2. Prefetching. The CPU's own prefetcher follows a stream only so far ahead; with M
//    multiply-adds between one weight load and the next, the out-of-order core holds too
//    few loads in flight to cover the memory's latency. An explicit prefetch kDistance
//    floats ahead (8 KiB, into L2) asks for each line long before it is needed, and a
//    second one kNearDistance floats ahead (1 KiB) moves it on into L1, so that the
//    loads themselves do not wait on L2 (docs/performance.md, change 14).
//
// 3. Two streams a thread. Each thread walks two panels at once, far apart in memory
//    (`rows_times_panels`), so that twice as many lines are on their way at any time;
//    k goes in blocks of kBlock, and 9-16 rows take a block in two passes of at most 8
//    rows (the second finds the block in L1) so that both panels' accumulators fit the
//    32 vector registers (docs/performance.md: change 14 has what it bought, change 13
//    the distances and hints tried).
//
// Each output is one running sum over k in order, the same for every row and batch size:
// a row gets the same result whether it is multiplied alone or beside 15 others.

#include <cstdint>
#include <cstring>

#include <omp.h>

namespace {

constexpr int64_t kPanel = 16;                     // output columns per panel (one vector)
constexpr int64_t kMaxRows = 16;                   // rows this kernel multiplies at once
constexpr int64_t kDistance = 2048;                // floats ahead to prefetch (8 KiB)
constexpr int64_t kNearDistance = 256;             // ... and into L1 (1 KiB)
constexpr int64_t kBlock = 32;                     // values of k per block (2 KiB per panel)

typedef float vec16 __attribute__((vector_size(64)));   // 16 floats: a zmm register

inline vec16 load(const float* p) {
  vec16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// sums[s][m] += Σ_{k0 <= k < k1} x[m, k] · panel_s[k] for rows kFrom <= m < kTo and S
// panels (streams). The running sums sit in registers for the block; the first pass over
// a block (kFrom == 0) also prefetches the lines of a later one.
template <int S, int kFrom, int kTo>
inline void accumulate_block(const float* __restrict x, int64_t K,
                             const float* const* __restrict panels, int64_t k0, int64_t k1,
                             vec16 (*__restrict sums)[kMaxRows]) {
  constexpr int R = kTo - kFrom;
  vec16 acc[S][R];
#pragma GCC unroll 16
  for (int m = 0; m < R; ++m)
    for (int s = 0; s < S; ++s) acc[s][m] = sums[s][kFrom + m];
  for (int64_t k = k0; k < k1; ++k) {
    vec16 w[S];                                                   // W[n0 .. n0+15, k]
    for (int s = 0; s < S; ++s) {
      w[s] = load(panels[s] + k * kPanel);
      if (kFrom == 0) {                     // a line 8 KiB ahead into L2, 1 KiB ahead into L1
        __builtin_prefetch(panels[s] + k * kPanel + kDistance, /*read*/ 0, /*into L2*/ 2);
        __builtin_prefetch(panels[s] + k * kPanel + kNearDistance, /*read*/ 0, /*L1*/ 3);
      }
    }
#pragma GCC unroll 16
    for (int m = 0; m < R; ++m) {
      const float x_mk = x[(kFrom + m) * K + k];                  // broadcast x[m, k]
      for (int s = 0; s < S; ++s) acc[s][m] += x_mk * w[s];
    }
  }
#pragma GCC unroll 16
  for (int m = 0; m < R; ++m)
    for (int s = 0; s < S; ++s) sums[s][kFrom + m] = acc[s][m];
}

// y[:, columns of S panels] for all M rows: the panels' weights stream in once, block by
// block of k; up to 8 rows take a block in one pass, 9-16 rows in two passes (the second
// finds the block in L1), so the accumulators (S·rows) fit the 32 vector registers.
template <int S, int M>
void panels_times_rows(const float* __restrict x, int64_t K, const float* const* panels,
                       const float* __restrict bias, float* __restrict y, int64_t N,
                       const int64_t* n0) {
  constexpr int kFirst = M > 8 ? (M + 1) / 2 : M;                 // rows in the first pass
  vec16 sums[S][kMaxRows] = {};
  for (int64_t k0 = 0; k0 < K; k0 += kBlock) {
    const int64_t k1 = k0 + kBlock < K ? k0 + kBlock : K;
    accumulate_block<S, 0, kFirst>(x, K, panels, k0, k1, sums);
    if constexpr (kFirst < M) accumulate_block<S, kFirst, M>(x, K, panels, k0, k1, sums);
  }
  float out[kPanel];
  for (int s = 0; s < S; ++s) {
    const int64_t width = N - n0[s] < kPanel ? N - n0[s] : kPanel;  // less in the last panel
    for (int m = 0; m < M; ++m) {
      std::memcpy(out, &sums[s][m], sizeof out);
      float* y_row = y + m * N + n0[s];
      for (int64_t j = 0; j < width; ++j) y_row[j] = bias ? out[j] + bias[n0[s] + j] : out[j];
    }
  }
}

// Each thread takes a contiguous range of panels and walks it as pairs far apart (its
// i-th panel with the one half its range later): two streams from two places in memory.
template <int M>
void rows_times_panels(const float* x, const float* panels, const float* bias, float* y,
                       int64_t N, int64_t K, int num_threads) {
  const int64_t num_panels = (N + kPanel - 1) / kPanel;
#pragma omp parallel num_threads(num_threads)
  {
    const int64_t t = omp_get_thread_num(), T = omp_get_num_threads();
    const int64_t lo = num_panels * t / T, hi = num_panels * (t + 1) / T;
    const int64_t half = (hi - lo) / 2;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = lo + i, b = lo + half + i;
      const float* pair[2] = {panels + a * K * kPanel, panels + b * K * kPanel};
      const int64_t n0[2] = {a * kPanel, b * kPanel};
      panels_times_rows<2, M>(x, K, pair, bias, y, N, n0);
    }
    if ((hi - lo) % 2) {                                          // the odd one out, alone
      const float* one[1] = {panels + (hi - 1) * K * kPanel};
      const int64_t n0[1] = {(hi - 1) * kPanel};
      panels_times_rows<1, M>(x, K, one, bias, y, N, n0);
    }
  }
}

// The row count is a template argument, so each M gets its own fully unrolled loop with
// its accumulators in registers; this table picks the one for M at run time.
typedef void (*Kernel)(const float*, const float*, const float*, float*, int64_t, int64_t, int);
template <int... Ms>
struct Table {
  static constexpr Kernel kernels[] = {nullptr, rows_times_panels<Ms>...};
};
constexpr auto& kKernels =
    Table<1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16>::kernels;

}  // namespace

// x [M, K] and y [M, N] contiguous; panels [ceil(N/16), K, 16] as `CpuKernels.pack_panels`
// makes them (the columns past N are zeros); bias [N] or null.
// Returns 0, or 1 when M is outside 1..16 (nothing computed).
extern "C" int minillm_matmul_few_rows(const float* x, const float* panels, const float* bias,
                                       float* y, int64_t M, int64_t N, int64_t K,
                                       int num_threads) {
  if (M < 1 || M > kMaxRows) return 1;
  kKernels[M](x, panels, bias, y, N, K, num_threads);
  return 0;
}
