// y [M, N] = x [M, K] @ W[N, K]ᵀ (+ bias) for a decode step's few rows (M <= 16), fp32.
//
// A decode step multiplies a handful of rows by every weight matrix once. The arithmetic
// is small (2·M FLOPs per weight) and the weights are hundreds of megabytes, so the
// step is a race to *stream the weights in from memory* while the multiplies keep up.
// Two things decide that race:
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
//    floats ahead (8 KiB, into L2) asks for each line long before it is needed. On the
//    course machine that took 16 rows from ~12 to ~18 GB/s and one row from ~22 to
//    ~30, as fast as a plain read of the same bytes (25-31 GB/s): PERFORMANCE.md,
//    change 13, which also has the distances and hints tried.
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

typedef float vec16 __attribute__((vector_size(64)));   // 16 floats: a zmm register

// One panel: y[m, n0 .. n0+width) for all M rows, width <= 16 (less only in the last panel).
template <int M>
void panel_times_rows(const float* __restrict x, int64_t K, const float* __restrict panel,
                      const float* __restrict bias, float* __restrict y, int64_t N, int64_t n0,
                      int64_t width) {
  vec16 acc[M];
#pragma GCC unroll 16
  for (int m = 0; m < M; ++m) acc[m] = vec16{};
  for (int64_t k = 0; k < K; ++k) {
    vec16 w;                                                      // W[n0 .. n0+15, k]
    std::memcpy(&w, panel + k * kPanel, sizeof w);
    __builtin_prefetch(panel + k * kPanel + kDistance, /*read*/ 0, /*into L2*/ 2);
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) acc[m] += x[m * K + k] * w;      // broadcast x[m, k]
  }
  float out[kPanel];
  for (int m = 0; m < M; ++m) {
    std::memcpy(out, &acc[m], sizeof out);
    for (int64_t j = 0; j < width; ++j)
      y[m * N + n0 + j] = bias ? out[j] + bias[n0 + j] : out[j];
  }
}

template <int M>
void rows_times_panels(const float* x, const float* panels, const float* bias, float* y,
                       int64_t N, int64_t K, int num_threads) {
  const int64_t num_panels = (N + kPanel - 1) / kPanel;
#pragma omp parallel for num_threads(num_threads) schedule(static)
  for (int64_t p = 0; p < num_panels; ++p) {
    const int64_t n0 = p * kPanel;
    const int64_t width = N - n0 < kPanel ? N - n0 : kPanel;
    panel_times_rows<M>(x, K, panels + p * K * kPanel, bias, y, N, n0, width);
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
