"""Issue 18: the compiled decoder stack of commit 71d39b9 inside the engine, step by step.
    .venv/bin/python scripts/experiments/compiled_stack_in_engine.py float32 [first-rows]

Loads `minillm/compiled_model.py` as it was at 71d39b9 (`git show`; reverted in
e4f1531: the decoder stack under `torch.compile` with inductor's freezing and C++
wrapper, attention as a custom op) and runs the peers workload on two `LLM`s in this
process, one eager and one compiled, each forward pass timed and sorted by step kind
(`peer_step_kinds.KINDS`); two runs each, alternating. The compiled model's first
multi-token call decides how inductor packs the weights: freezing packs them for the
*row count of that call* (`optimization_hint` of the dynamic size in
torch/_inductor/fx_passes/mkldnn_fusion.py). In the engine that call is the first step,
16 prompts of ~38 tokens (600 rows); with `first-rows` N the script first calls the
compiled stack once on N rows (a replayed step of N decodes), so it packs for N."""
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from captured_steps import decode_batches                          # this folder
from peer_step_kinds import KINDS                                  # this folder
import minillm.model.llama as model_module
import minillm_cpu.packed_linear as packed_linear
from minillm import LLM, SamplingParams
from benchmarks.peers import peer_output_lengths, peer_prompts

COMMIT = "71d39b9"


def load_compiled_model():
    """71d39b9's compiled_model.py (its layer call adapted to today's signature), and the
    hooks it needs in today's model: `linear` is plain F.linear while tracing (inductor
    packs the weights itself) and `logits()`."""
    source = subprocess.run(["git", "show", f"{COMMIT}:minillm/compiled_model.py"],
                            capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "compiled_model_71d39b9.py"
    old_call = "            h = layer(h, (cos, sin), layer_cache, None, attention)\n        return h\n"
    new_call = ("            h, pending = layer(h, pending, (cos, sin), layer_cache, None, attention)\n"
                "        return h + pending\n")                  # today's layers add the MLP late
    assert old_call in source
    source = source.replace(old_call, new_call).replace(
        "        attention = _GraphAttention()\n", "        attention, pending = _GraphAttention(), None\n")
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("compiled_model_71d39b9", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    eager_linear = packed_linear.linear

    def linear(x, weight, bias=None, packed=None):
        if torch.compiler.is_compiling():
            return F.linear(x, weight, bias)
        return eager_linear(x, weight, bias, packed)
    packed_linear.linear = model_module.linear = linear

    def logits(self, h):
        h = self.norm(h)
        return linear(h, self.embed_tokens.weight, packed=self.lm_head_packed).float()
    model_module.LlamaModel.logits = logits
    return module.CompiledModel


def main(dtype: str, first_rows: int | None) -> None:
    torch.set_num_threads(2)
    CompiledModel = load_compiled_model()
    eager, compiled = LLM(max_num_seqs=16, dtype=dtype), LLM(max_num_seqs=16, dtype=dtype)
    runner = compiled.llm_engine.runner
    if first_rows:                                   # pack for this many rows
        batch = decode_batches(compiled, sizes=(first_rows,))[first_rows]
    runner.model = CompiledModel(runner.model)
    start = time.perf_counter()
    if first_rows:
        batch.meta.scratch.clear()
        runner.model(batch.input_ids, batch.positions, runner.kv_caches, batch.meta,
                     batch.logits_indices, runner.backend)
    prompts = [{"prompt_token_ids": p} for p in peer_prompts(eager.tokenizer)]
    lens = peer_output_lengths()
    params = [SamplingParams(temperature=0.0, max_tokens=n, ignore_eos=True) for n in lens]
    for llm in (compiled, eager):
        llm.generate(prompts[:16], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
        llm.generate(prompts[:1], SamplingParams(max_tokens=2, ignore_eos=True), use_tqdm=False)
    print(f"compiled: first calls {time.perf_counter() - start:.0f} s "
          f"{ {k: round(v) for k, v in runner.model.compile_seconds.items()} }")
    steps = {"eager": [], "compiled": []}
    for name, llm in (("eager", eager), ("compiled", compiled)):
        forward = llm.llm_engine.runner.model

        def timed(*args, forward=forward, name=name):
            t0 = time.perf_counter()
            out = forward(*args)
            steps[name].append((args[0].shape[0], args[4].shape[0], time.perf_counter() - t0))
            return out
        llm.llm_engine.runner.model = timed
    walls = {"eager": [], "compiled": []}
    for r in range(2):
        for name, llm in ((("eager", eager), ("compiled", compiled)) if r == 0
                          else (("compiled", compiled), ("eager", eager))):
            t0 = time.perf_counter()
            llm.generate(prompts, params, use_tqdm=False)
            walls[name].append(time.perf_counter() - t0)
    for name in ("eager", "compiled"):
        print(f"{name}: runs {', '.join(f'{w:.1f}' for w in walls[name])} s")
        for kind, matches in KINDS.items():
            times = [t for rows, seqs, t in steps[name] if matches(rows, seqs)]
            print(f"   {kind:14s} {len(times):4d} steps, {sum(times):5.2f} s, "
                  f"median {1e3 * statistics.median(times):6.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "float32",
         int(sys.argv[2]) if len(sys.argv) > 2 else None)
