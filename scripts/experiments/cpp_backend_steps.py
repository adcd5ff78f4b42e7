"""Issue 18: the same replayed steps with the "sparse" and the "cpp" backend, per step kind.
    .venv/bin/python scripts/experiments/cpp_backend_steps.py float32|bfloat16 [ROUNDS]

Replays real engine steps (`captured_steps.py`: decodes of 16, 4 and 1 sequences at
~128 tokens of context, and a 40-token prompt beside 15 decodes) through the model's
forward pass with each backend, in alternating rounds (median of 5 passes a round).
With "cpp" the model also runs its element-wise chains through the C++ kernels, so a
row is what the whole backend switch buys. Also prints the largest logit difference
and the share of rows whose greedy token agrees."""
import sys

import torch

from captured_steps import decode_batches, median_ms, prompt_beside_decodes, replay  # this folder
from minillm import LLM
from minillm.attention import make_attention_backend
from benchmarks import ab


def main(dtype: str, rounds: int) -> None:
    llm = LLM("smollm2-135m", max_num_seqs=16, num_kv_blocks=16 * 12, dtype=dtype)
    runner = llm.llm_engine.runner
    steps = decode_batches(llm, sizes=(16, 4, 1))
    steps["prompt + 15"] = prompt_beside_decodes(llm)
    backends = {name: make_attention_backend(name) for name in ("sparse", "cpp")}
    print(f"{dtype}, {torch.get_num_threads()} threads; C++ kernels built in "
          f"{backends['cpp'].cpu_kernels.build_seconds:.1f} s (0.0: cached)")
    for kind, batch in steps.items():
        def forward(backend):
            return replay(runner, batch, backend)
        logits = {name: forward(b) for name, b in backends.items()}
        diff = (logits["cpp"] - logits["sparse"]).abs().max().item()
        agree = (logits["cpp"].argmax(-1) == logits["sparse"].argmax(-1)).float().mean().item()
        runs = ab.alternate({name: (lambda b=b: {"ms": median_ms(lambda: forward(b), 5)})
                             for name, b in backends.items()}, rounds)
        ms = {name: m["ms"] for name, m in ab.medians(runs).items()}
        ratio = ab.summary(ab.paired_ratios(runs, "sparse", "cpp", "ms"))
        print(f"{kind:>11}: sparse {ms['sparse']:6.2f} ms, cpp {ms['cpp']:6.2f} ms, "
              f"{ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f}); "
              f"max logit diff {diff:.1e}, greedy agree {agree:.2f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "float32", int(sys.argv[2]) if len(sys.argv) > 2 else 8)
