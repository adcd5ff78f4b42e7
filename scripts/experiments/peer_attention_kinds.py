"""Issue 18: what attention costs in a continuous run of the peers workload, by step.
    .venv/bin/python scripts/experiments/peer_attention_kinds.py [float32|bfloat16]

One `LLM` (the default CPU backend), the bench's peers workload after a warm-up; every
call of the attention backend is timed (its KV write, plan and groups included) and
filed under the step's kind: "prompt" (a step that carries prompt tokens) or "decN" (N
decodes). Printed per kind: steps, seconds, µs per layer, the mean context of its
sequences, and how many steps had 1, 2, 3 … groups (the backend's `split_by_length`)."""
import collections
import sys
import time

import torch

from minillm import LLM, SamplingParams
from benchmarks.peers import peer_output_lengths, peer_prompts


def main(dtype: str) -> None:
    torch.set_num_threads(2)
    llm = LLM(max_num_seqs=16, dtype=dtype)
    runner = llm.llm_engine.runner
    backend = runner.backend
    seconds, contexts = collections.Counter(), collections.Counter()
    groups = collections.defaultdict(collections.Counter)

    def timed(q, k, v, k_cache, v_cache, meta, scale):
        start = time.perf_counter()
        out = backend(q, k, v, k_cache, v_cache, meta, scale)
        kind = "prompt" if meta.max_query_len > 1 else f"dec{meta.num_seqs:02d}"
        seconds[kind] += time.perf_counter() - start
        if k_cache is runner.kv_caches[0][0]:          # once a step: the first layer
            groups[kind][len(meta.scratch[backend.name].groups)] += 1
            contexts[kind] += sum(meta.seq_lens_list) / meta.num_seqs
        return out
    timed.name = backend.name
    runner.backend = timed
    prompts = [{"prompt_token_ids": p} for p in peer_prompts(llm.tokenizer)]
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True)
              for n in peer_output_lengths()]
    llm.generate(prompts[:16], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
    seconds.clear(), contexts.clear(), groups.clear()
    start = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    wall = time.perf_counter() - start
    layers = len(runner.kv_caches)
    print(f"{dtype}: run {wall:.1f} s, attention {sum(seconds.values()):.2f} s")
    for kind in sorted(seconds):
        steps = sum(groups[kind].values())
        print(f"  {kind:7s} {steps:4d} steps {seconds[kind]:6.3f} s "
              f"{1e6 * seconds[kind] / steps / layers:6.0f} µs a layer, mean context "
              f"{contexts[kind] / steps:5.0f}, groups {dict(sorted(groups[kind].items()))}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "float32")
