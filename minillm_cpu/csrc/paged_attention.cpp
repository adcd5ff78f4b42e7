// Paged attention on the CPU, reading K/V where they lie in the block pool.
//
// One call per layer and step does what the "torch" backend does with a dozen PyTorch
// ops (minillm/attention/torch_paged.py): write the step's new K/V into their cache
// slots, then, for every query row, attend over its own sequence's keys through the
// block table, causally. No K/V block is copied and no mask is built: each query row
// knows its context length (how many keys it may see), and loops over exactly those.
//
// Layouts (the same as everywhere in minillm):
//   q            [T, Hq, D]   rows `q_row_stride` elements apart (a view of the QKV output)
//   k, v         [T, Hkv, D]  the step's new keys/values, rows `kv_row_stride` apart
//   k/v_cache    [num_blocks, block_size, Hkv, D]   contiguous
//   out          [T, Hq, D]   contiguous
// Query head i reads K/V head i / G, G = Hq / Hkv (grouped-query attention).
//
// For one query row and one K/V head h, with its G query heads q_g and its ctx keys:
//   1. scores   s_g[p] = scale · q_g · k_p            p = 0 … ctx-1, block by block
//   2. softmax  w_g[p] = e^(s_g[p] - max) / Σ e^(…)
//   3. output   o_g    = Σ_p w_g[p] · v_p
// Keys of one K/V head are read once for all G query heads of that head.
//
// Speed: a query head's D values are held in registers as vectors of 8 floats (GCC/Clang
// vector extensions: AVX on x86, NEON on ARM, chosen by the compiler with
// -march=native) while it meets a block's keys, eight keys at a time, and the eight
// dot products are summed together (`sum8_of_8`). When a work item reads only some of
// each token's heads, the next block's keys are prefetched while this block is read,
// because blocks sit anywhere in memory and those strided reads leave the CPU's own
// prefetcher behind. Work items — (query row, K/V heads) — are split between OpenMP
// threads by their number of keys, so a long sequence does not leave the other thread idle.

#include <cstdint>
#include <vector>

#include <omp.h>

#include "common.h"

namespace {

typedef float floatx8 __attribute__((vector_size(32)));   // 8 floats, one vector
typedef uint16_t u16x8 __attribute__((vector_size(16)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));

inline floatx8 load8(const float* p) {
  floatx8 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline floatx8 load8(const bf16* p) {   // 8 bf16 → 8 floats: widen, shift into the top half
  u16x8 half;
  std::memcpy(&half, p, sizeof half);
  const u32x8 bits = __builtin_convertvector(half, u32x8) << 16;
  floatx8 v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
inline float sum8(floatx8 v) {   // in the order sum8_of_8 adds, for the same bits
  return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
}
// [a0+a1, a2+a3, a4+a5, a6+a7, b0+b1, b2+b3, b4+b5, b6+b7]: neighbours added, a then b
inline floatx8 add_pairs(floatx8 a, floatx8 b) {
  return __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14) +
         __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15);
}
// The eight sums of eight vectors at once, [Σv[0], Σv[1], ..., Σv[7]]: three rounds of
// add_pairs instead of eight sum8 of seven adds and seven lane moves each.
inline floatx8 sum8_of_8(const floatx8 (&v)[8]) {
  return add_pairs(add_pairs(add_pairs(v[0], v[1]), add_pairs(v[2], v[3])),
                   add_pairs(add_pairs(v[4], v[5]), add_pairs(v[6], v[7])));
}

void prefetch(const void* start, int64_t bytes) {   // into L2, one 64-byte line at a time
  const char* p = static_cast<const char*>(start);
  for (int64_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(p + offset, 0, 2);
}

struct Shapes {
  int64_t num_heads, num_kv_heads, block_size;
  float scale;
};

// One query row against its ctx keys, for K/V heads [h0, h1). NV = D / 8 vectors a head.
// q: the row's [Hq, D]; out: the row's [Hq, D]; table: its sequence's block ids;
// scores: room for (h1 - h0) · G · ctx floats.
template <typename T, int NV>
void attend_row(const T* q, const T* k_cache, const T* v_cache, const int32_t* table,
                int64_t ctx, int64_t h0, int64_t h1, const Shapes& s, T* out, float* scores) {
  constexpr int D = NV * 8;
  const int64_t G = s.num_heads / s.num_kv_heads, bs = s.block_size;
  const int64_t token_stride = s.num_kv_heads * D;              // one token's K (or V) row
  const int64_t num_blocks = (ctx + bs - 1) / bs;
  const int64_t span_bytes = (h1 - h0) * D * int64_t(sizeof(T));   // what we read of a row
  auto block = [&](const T* cache, int64_t j) { return cache + int64_t(table[j]) * bs * token_stride; };
  auto prefetch_block = [&](const T* start, int64_t tokens) {
    for (int64_t t = 0; t < tokens; ++t) prefetch(start + t * token_stride + h0 * D, span_bytes);
  };
  auto scores_of = [&](int64_t h, int64_t g) { return scores + ((h - h0) * G + g) * ctx; };
  // Reading all heads, a block is one contiguous run (bs · Hkv · D values) that the CPU's
  // own prefetcher follows; reading a few heads of each token, the reads stride, and
  // asking for the next block's lines ahead pays (docs/performance.md, change 14).
  const bool strided = h1 - h0 < s.num_kv_heads;

  // 1. scores, block by block; one query head at a time, its vectors in registers (the
  //    block's keys stay in L1 for the next query head of the group), eight keys at once
  for (int64_t j = 0; j < num_blocks; ++j) {
    const int64_t first = j * bs, n = ctx - first < bs ? ctx - first : bs;
    if (strided) {
      if (j + 1 < num_blocks) prefetch_block(block(k_cache, j + 1), bs);
      prefetch_block(block(v_cache, j), n);                     // for step 3
    }
    for (int64_t h = h0; h < h1; ++h) {
      const T* keys = block(k_cache, j) + h * D;
      for (int64_t g = 0; g < G; ++g) {
        floatx8 qg[NV];
        for (int i = 0; i < NV; ++i) qg[i] = load8(q + (h * G + g) * D + i * 8) * s.scale;
        auto partial_dot = [&](int64_t t) {                       // qg · key t, in 8 lanes
          floatx8 even = qg[0] * load8(keys + t * token_stride), odd = {};
          for (int i = 1; i < NV; ++i)                             // two chains: shorter wait
            (i % 2 ? odd : even) += qg[i] * load8(keys + t * token_stride + i * 8);
          return even + odd;
        };
        float* out_scores = scores_of(h, g) + first;
        int64_t t = 0;
        for (; t + 8 <= n; t += 8) {
          floatx8 parts[8];
          for (int u = 0; u < 8; ++u) parts[u] = partial_dot(t + u);
          const floatx8 eight = sum8_of_8(parts);
          std::memcpy(out_scores + t, &eight, sizeof eight);
        }
        for (; t < n; ++t) out_scores[t] = sum8(partial_dot(t));
      }
    }
  }
  // 2. softmax of every query head's scores, in place; 1 / sum kept for step 3
  std::vector<float> inv_sum((h1 - h0) * G);
  for (int64_t row = 0; row < (h1 - h0) * G; ++row) {
    float* x = scores + row * ctx;
    float top = x[0];
    for (int64_t p = 1; p < ctx; ++p) top = x[p] > top ? x[p] : top;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t p = 0; p < ctx; ++p) {
      x[p] = exp_approx(x[p] - top);
      sum += x[p];
    }
    inv_sum[row] = 1.0f / sum;
  }
  // 3. weighted sum of the values: one query head at a time, its output in registers
  //    (the head's values stay in L1/L2 for the next query head of the group)
  for (int64_t h = h0; h < h1; ++h) {
    for (int64_t g = 0; g < G; ++g) {
      const float* w = scores_of(h, g);
      floatx8 acc[NV] = {};
      for (int64_t j = 0; j < num_blocks; ++j) {
        const int64_t first = j * bs, n = ctx - first < bs ? ctx - first : bs;
        const T* values = block(v_cache, j) + h * D;
        for (int64_t t = 0; t < n; ++t)
          for (int i = 0; i < NV; ++i) acc[i] += w[first + t] * load8(values + t * token_stride + i * 8);
      }
      const float inv = inv_sum[(h - h0) * G + g];
      T* o = out + (h * G + g) * D;
      for (int i = 0; i < NV; ++i)
        for (int lane = 0; lane < 8; ++lane) store(o + i * 8 + lane, acc[i][lane] * inv);
    }
  }
}

// The step's new K/V rows into their slots (slot -1: a padding row, not written).
template <typename T>
void write_kv(const T* k, const T* v, int64_t kv_row_stride, const int64_t* slot_mapping,
              int64_t num_rows, T* k_cache, T* v_cache, int64_t row_elems) {
  for (int64_t t = 0; t < num_rows; ++t) {
    const int64_t slot = slot_mapping[t];
    if (slot < 0) continue;
    std::memcpy(k_cache + slot * row_elems, k + t * kv_row_stride, row_elems * sizeof(T));
    std::memcpy(v_cache + slot * row_elems, v + t * kv_row_stride, row_elems * sizeof(T));
  }
}

template <typename T, int NV>
void paged_attention(const T* q, int64_t q_row_stride, const T* k, const T* v,
                     int64_t kv_row_stride, const int64_t* slot_mapping, T* k_cache, T* v_cache,
                     const int32_t* block_tables, int64_t table_stride,
                     const int32_t* query_start_loc, const int32_t* seq_lens, int64_t num_seqs,
                     int64_t max_pairs, T* out, const Shapes& s, int num_threads) {
  constexpr int D = NV * 8;
  const int64_t G = s.num_heads / s.num_kv_heads, Hkv = s.num_kv_heads;
  const int64_t num_rows = query_start_loc[num_seqs];
  write_kv(k, v, kv_row_stride, slot_mapping, num_rows, k_cache, v_cache, Hkv * D);

  // every row this call attends: its sequence and its context length (keys it may see)
  std::vector<int64_t> rows, seq_of, ctx_of;
  int64_t total_keys = 0, longest = 0;
  for (int64_t b = 0; b < num_seqs; ++b) {
    const int64_t start = query_start_loc[b], end = query_start_loc[b + 1];
    const bool long_chunk = end - start > 1 && (end - start) * int64_t(seq_lens[b]) > max_pairs;
    if (long_chunk) continue;                                         // attended elsewhere
    for (int64_t t = start; t < end; ++t) {
      const int64_t ctx = seq_lens[b] - (end - 1 - t);                // causal: up to itself
      rows.push_back(t), seq_of.push_back(b), ctx_of.push_back(ctx);
      total_keys += ctx, longest = ctx > longest ? ctx : longest;
    }
  }
  // a work item is (row, a range of K/V heads): all heads of a row when there are rows
  // enough to keep every thread busy, else one head each
  const int64_t nrows = int64_t(rows.size());
  const int64_t heads_per_item = nrows >= 2 * num_threads ? Hkv : 1;
#pragma omp parallel num_threads(num_threads)
  {
    const int64_t me = omp_get_thread_num(), threads = omp_get_num_threads();
    // this thread's share of the keys; an item belongs to the thread owning its middle key
    const int64_t lo = total_keys * Hkv * me / threads, hi = total_keys * Hkv * (me + 1) / threads;
    std::vector<float> scores(heads_per_item * G * longest);
    int64_t keys_before = 0;
    for (int64_t r = 0; r < nrows; ++r) {
      for (int64_t h = 0; h < Hkv; h += heads_per_item) {
        const int64_t cost = ctx_of[r] * heads_per_item, middle = keys_before + cost / 2;
        keys_before += cost;
        if (middle < lo || middle >= hi) continue;
        const int64_t t = rows[r];
        attend_row<T, NV>(q + t * q_row_stride, k_cache, v_cache,
                          block_tables + seq_of[r] * table_stride, ctx_of[r], h,
                          h + heads_per_item, s, out + t * s.num_heads * D, scores.data());
      }
    }
  }
}

// head_dim → the template instance (D = 8 · NV); 1 for a head size it was not built for,
// or for query heads that do not group evenly over the K/V heads.
template <typename T>
int dispatch(const T* q, int64_t q_row_stride, const T* k, const T* v, int64_t kv_row_stride,
             const int64_t* slot_mapping, T* k_cache, T* v_cache, const int32_t* block_tables,
             int64_t table_stride, const int32_t* query_start_loc, const int32_t* seq_lens,
             int64_t num_seqs, int64_t max_pairs, T* out, int64_t num_heads,
             int64_t num_kv_heads, int64_t head_dim, int64_t block_size, float scale,
             int num_threads) {
  if (num_kv_heads < 1 || num_heads % num_kv_heads) return 1;
  const Shapes s{num_heads, num_kv_heads, block_size, scale};
#define MINILLM_HEAD_DIM(NV)                                                                  \
  case NV * 8:                                                                               \
    paged_attention<T, NV>(q, q_row_stride, k, v, kv_row_stride, slot_mapping, k_cache,       \
                           v_cache, block_tables, table_stride, query_start_loc, seq_lens,    \
                           num_seqs, max_pairs, out, s, num_threads);                         \
    return 0;
  switch (head_dim) {
    MINILLM_HEAD_DIM(1) MINILLM_HEAD_DIM(2) MINILLM_HEAD_DIM(4) MINILLM_HEAD_DIM(6)
    MINILLM_HEAD_DIM(8) MINILLM_HEAD_DIM(10) MINILLM_HEAD_DIM(12) MINILLM_HEAD_DIM(16)
    MINILLM_HEAD_DIM(20) MINILLM_HEAD_DIM(24) MINILLM_HEAD_DIM(32)
  }
#undef MINILLM_HEAD_DIM
  return 1;
}

}  // namespace

// The entry points Python calls (through ctypes): one per dtype, same arguments.
#define MINILLM_ENTRY(NAME, T)                                                                 \
  extern "C" int NAME(const T* q, int64_t q_row_stride, const T* k, const T* v,               \
                      int64_t kv_row_stride, const int64_t* slot_mapping, T* k_cache,          \
                      T* v_cache, const int32_t* block_tables, int64_t table_stride,           \
                      const int32_t* query_start_loc, const int32_t* seq_lens,                 \
                      int64_t num_seqs, int64_t max_pairs, T* out, int64_t num_heads,          \
                      int64_t num_kv_heads, int64_t head_dim, int64_t block_size, float scale, \
                      int num_threads) {                                                       \
    return dispatch<T>(q, q_row_stride, k, v, kv_row_stride, slot_mapping, k_cache, v_cache,   \
                       block_tables, table_stride, query_start_loc, seq_lens, num_seqs,        \
                       max_pairs, out, num_heads, num_kv_heads, head_dim, block_size, scale,   \
                       num_threads);                                                           \
  }
MINILLM_ENTRY(minillm_paged_attention_float32, float)
MINILLM_ENTRY(minillm_paged_attention_bfloat16, bf16)
