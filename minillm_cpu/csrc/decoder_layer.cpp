// A small step's decoder layers, in one call: the same kernels the readable layers call
// one by one once the "cpu" executor has swapped its modules in (minillm_cpu/modules.py),
// in the same order, on the same numbers.
// `minillm_decoder_layer_float32` is one layer; `minillm_decoder_layers_float32`, all of them.
//
//   x      = RMSNorm(h += pending) · input_norm          add_rms_norm   (elementwise.cpp)
//   qkv    = x @ W_qkvᵀ                                  matmul_few_rows (matmul.cpp)
//   q, k  rotated in place                               rope           (elementwise.cpp)
//   attn   = attention over the paged cache (k, v written into it first)
//                                                        paged_attention (paged_attention.cpp)
//   x      = RMSNorm(h += attn @ W_oᵀ) · post_norm       matmul, add_rms_norm
//   out    = (SiLU(x @ W_gateᵀ) · (x @ W_upᵀ)) @ W_downᵀ  matmul, silu_and_mul, matmul
//
// Why one call: a decode step's matmuls stream hundreds of megabytes of weights through
// the caches, so each return to Python between two kernels finds the interpreter's and
// PyTorch's own code and data evicted, and pays tens of microseconds of cache misses for
// a kernel that computes for a few. Nine returns a layer become one a step
// (docs/performance.md, change 14). Because the arithmetic is the very same calls, the
// result is the layer-by-layer path's to the bit (tests/test_forward.py checks it).
//
// fp32 only, 1-16 rows (what matmul_few_rows multiplies), and every query row attended by
// the kernel (no long prefill chunk): `minillm_cpu/fused_stack.py` decides, per step.

#include <cstdint>
#include <vector>

extern "C" {   // the entry points of the other kernel files, called here directly
int minillm_matmul_few_rows(const float* x, const float* panels, const float* bias, float* y,
                            int64_t M, int64_t N, int64_t K, int num_threads);
void minillm_add_rms_norm_float32(const float* x, float* residual, const float* weight,
                                  float* out, int64_t rows, int64_t H, float eps,
                                  int num_threads);
void minillm_rope_float32(float* x, int64_t row_stride, int64_t rows, int64_t heads, int64_t D,
                          const float* cos, const float* sin_signed, int num_threads);
int minillm_paged_attention_float32(const float* q, int64_t q_row_stride, const float* k,
                                    const float* v, int64_t kv_row_stride,
                                    const int64_t* slot_mapping, float* k_cache, float* v_cache,
                                    const int32_t* block_tables, int64_t table_stride,
                                    const int32_t* query_start_loc, const int32_t* seq_lens,
                                    int64_t num_seqs, int64_t max_pairs, float* out,
                                    int64_t num_heads, int64_t num_kv_heads, int64_t head_dim,
                                    int64_t block_size, float scale, int num_threads);
void minillm_silu_and_mul_float32(const float* gate_up, float* out, int64_t rows, int64_t I,
                                  int num_threads);
}

// What a layer keeps from step to step: its weights (matmul weights as panels, biases
// or null) and its slice of the KV cache. Field order = `fused_stack.py`'s LayerArgs.
struct LayerArgs {
  const float *input_norm, *post_norm;                    // [H] each
  const float *qkv, *qkv_bias, *o, *o_bias;               // panels, bias [N] or null
  const float *gate_up, *gate_up_bias, *down, *down_bias;
  float *k_cache, *v_cache;                               // [blocks, block_size, Hkv, D]
  int64_t hidden, num_heads, num_kv_heads, head_dim, intermediate, block_size;
  float eps, scale;                                       // eps: both norms (one config)
};

// What one step shares across its layers: the rows, their rotary rows and the attention
// metadata (minillm/model/batch.py). Field order = `fused_stack.py`'s StepArgs.
struct StepArgs {
  int64_t rows;
  const float *cos, *sin_signed;                          // [rows, D] each
  const int64_t* slot_mapping;                            // [rows]
  const int32_t* block_tables;                            // [num_seqs, table_stride]
  int64_t table_stride;
  const int32_t *query_start_loc, *seq_lens;              // [num_seqs + 1], [num_seqs]
  int64_t num_seqs, max_pairs;
  int num_threads;
};

// h [rows, H] (the residual stream, updated in place); pending [rows, H], the previous
// layer's output not yet added (null at the first layer); out [rows, H], this layer's
// output. Returns 0, or a kernel's nonzero code for shapes it cannot run; the Python side
// checks those before the call (`fused_stack.py`), since h may be half-updated then.
extern "C" int minillm_decoder_layer_float32(const LayerArgs* w, const StepArgs* s,
                                             const float* pending, float* h, float* out) {
  const int64_t T = s->rows, H = w->hidden, D = w->head_dim, I = w->intermediate;
  const int64_t Hq = w->num_heads, Hkv = w->num_kv_heads, qkv_width = (Hq + 2 * Hkv) * D;
  const int threads = s->num_threads;
  thread_local std::vector<float> scratch;                // x | qkv | attn | gate_up | act
  scratch.resize(T * (H + qkv_width + Hq * D + 2 * I + I));
  float* x = scratch.data();                              // [T, H]
  float* qkv = x + T * H;                                 // [T, Hq + 2·Hkv, D]
  float* attn = qkv + T * qkv_width;                      // [T, Hq, D]
  float* gate_up = attn + T * Hq * D;                     // [T, 2·I]
  float* act = gate_up + T * 2 * I;                       // [T, I]

  minillm_add_rms_norm_float32(pending, h, w->input_norm, x, T, H, w->eps, threads);
  int failed = minillm_matmul_few_rows(x, w->qkv, w->qkv_bias, qkv, T, qkv_width, H, threads);
  if (failed) return failed;
  minillm_rope_float32(qkv, qkv_width, T, Hq + Hkv, D, s->cos, s->sin_signed, threads);
  failed = minillm_paged_attention_float32(
      qkv, qkv_width, qkv + Hq * D, qkv + (Hq + Hkv) * D, qkv_width, s->slot_mapping,
      w->k_cache, w->v_cache, s->block_tables, s->table_stride, s->query_start_loc,
      s->seq_lens, s->num_seqs, s->max_pairs, attn, Hq, Hkv, D, w->block_size, w->scale,
      threads);
  if (failed) return failed;
  failed = minillm_matmul_few_rows(attn, w->o, w->o_bias, out, T, H, Hq * D, threads);
  if (failed) return failed;
  minillm_add_rms_norm_float32(out, h, w->post_norm, x, T, H, w->eps, threads);
  failed = minillm_matmul_few_rows(x, w->gate_up, w->gate_up_bias, gate_up, T, 2 * I, H, threads);
  if (failed) return failed;
  minillm_silu_and_mul_float32(gate_up, act, T, I, threads);
  return minillm_matmul_few_rows(act, w->down, w->down_bias, out, T, H, I, threads);
}

// Every layer of the step in turn, the way `LlamaModel.forward` loops over them: h [rows, H]
// updated in place, each layer's output the next one's `pending`. The outputs alternate
// between two buffers, `out` and `spare`, arranged so that the last layer writes `out`.
extern "C" int minillm_decoder_layers_float32(const LayerArgs* layers, int64_t num_layers,
                                              const StepArgs* s, float* h, float* out,
                                              float* spare) {
  const float* pending = nullptr;                         // the first layer adds nothing
  for (int64_t i = 0; i < num_layers; ++i) {
    float* written = (num_layers - 1 - i) % 2 == 0 ? out : spare;
    const int failed = minillm_decoder_layer_float32(&layers[i], s, pending, h, written);
    if (failed) return failed;
    pending = written;
  }
  return 0;
}
