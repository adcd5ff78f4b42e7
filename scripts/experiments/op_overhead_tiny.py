"""Issue 18: what a decode step costs when the arithmetic costs nothing.
    .venv/bin/python scripts/experiments/op_overhead_tiny.py

A random Llama with SmolLM2's 30 layers and 9/3 heads but tiny widths (hidden 72, head
size 8, MLP 64, vocabulary 512: ~1,500 times fewer FLOPs) runs exactly the ops of a
SmolLM2 step, so its step time is the engine's fixed cost: Python, the dispatcher, the
kernels' own overheads. Replayed decode steps of 16, 4 and 1 sequences at ~128 tokens
(`captured_steps.py`), median of 200, with the packed matmuls or plain `F.linear`, and
with the sparse, torch or no attention (a backend that returns its queries)."""
import torch

from captured_steps import decode_batches, median_ms              # this folder
from minillm import LLM
from minillm.attention import make_attention_backend
from minillm_cpu.packed_linear import Linear
from minillm.model.tiny import build_tiny_llama


class NoAttention:
    name = "none"

    def __call__(self, q, k, v, k_cache, v_cache, meta, scale):
        return q


def main() -> None:
    torch.set_num_threads(2)
    hf = build_tiny_llama(num_hidden_layers=30, hidden_size=72, num_attention_heads=9,
                          num_key_value_heads=3, intermediate_size=64, vocab_size=512)
    llm = LLM(hf, max_num_seqs=16, num_kv_blocks=16 * 12)
    batches = decode_batches(llm, sizes=(16, 4, 1), context=128)
    runner = llm.llm_engine.runner
    backends = {"sparse": make_attention_backend("sparse"),
                "torch": make_attention_backend("torch"), "none": NoAttention()}
    linears = [m for m in runner.model.modules() if isinstance(m, Linear)]
    packs = [m.packed for m in linears]
    for size, batch in sorted(batches.items(), reverse=True):
        for matmul in ("packed", "F.linear"):
            for module, pack in zip(linears, packs):
                module.packed = pack if matmul == "packed" else None
            for name, backend in backends.items():
                def step(batch=batch, backend=backend):
                    batch.meta.scratch.clear()
                    return runner.model(batch.input_ids, batch.positions, runner.kv_caches,
                                        batch.meta, batch.logits_indices, backend)
                for _ in range(10):
                    step()
                print(f"batch {size:2d}, {matmul:8s} matmuls, {name:6s} attention: "
                      f"{median_ms(step, 200):5.2f} ms")


if __name__ == "__main__":
    main()
