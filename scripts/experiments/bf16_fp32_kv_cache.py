"""Issue 18: a bf16 model with an fp32 KV cache, so its decodes can read the cache in place.
    .venv/bin/python scripts/experiments/bf16_fp32_kv_cache.py

CPU `sampled_addmm` has no bf16 kernel, so in bf16 the sparse backend gathers K/V and
calls SDPA. With the cache kept in fp32 (the bf16 K/V values are exact in fp32) decode
groups can take the in-place path: queries cast up, outputs cast back. One bf16 `LLM`,
two caches swapped between runs of the peers workload (4 alternating rounds)."""
import time

import torch

import minillm.attention.sparse_paged as sparse_paged
from minillm import LLM, SamplingParams
from benchmarks.peers import peer_output_lengths, peer_prompts
from minillm.kv_cache.tensors import allocate_kv_cache


def main(rounds: int = 4) -> None:
    torch.set_num_threads(2)
    attend = sparse_paged._SparseDecodeGroup.attend

    def attend_in_cache_dtype(self, q, k_cache, v_cache, scale):
        if q.dtype != k_cache.dtype:
            return attend(self, q.to(k_cache.dtype), k_cache, v_cache, scale).to(q.dtype)
        return attend(self, q, k_cache, v_cache, scale)
    sparse_paged._SparseDecodeGroup.attend = attend_in_cache_dtype
    llm = LLM(max_num_seqs=16, dtype="bfloat16")
    runner = llm.llm_engine.runner
    k0 = runner.kv_caches[0][0]
    caches = {"bf16 cache": runner.kv_caches,
              "fp32 cache": allocate_kv_cache(len(runner.kv_caches), k0.shape[0], k0.shape[1],
                                              k0.shape[2], k0.shape[3], torch.float32, "cpu")}
    prompts = [{"prompt_token_ids": p} for p in peer_prompts(llm.tokenizer)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
              for n in peer_output_lengths()]
    times = {name: [] for name in caches}
    for name, cache in caches.items():
        runner.kv_caches = cache
        llm.generate(prompts[:16], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
    for r in range(rounds):
        for name in (list(caches) if r % 2 == 0 else list(caches)[::-1]):
            runner.kv_caches = caches[name]
            start = time.perf_counter()
            llm.generate(prompts, params, use_tqdm=False)
            times[name].append(time.perf_counter() - start)
    for name, t in times.items():
        print(f"{name}: {', '.join(f'{s:.2f}' for s in t)} s")
    print("bf16 / fp32 cache per round:",
          ", ".join(f"{a / b:.3f}" for a, b in zip(times["bf16 cache"], times["fp32 cache"])))


if __name__ == "__main__":
    main()
