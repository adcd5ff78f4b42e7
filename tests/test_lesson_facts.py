"""What the lessons say about the engine, held to the engine.

A lesson's prose states facts about the engine: which executor and attention backend run
by default, how a backend pads, what the readable model's layer looks like, what one
engine step calls. The engine keeps changing under the course (a faster backend, a new
default), and a sentence that was true goes stale without anything noticing. So each
fact below is a row of a table:

    (lesson, the phrases the lesson states, a check of the engine)

and its test asserts both halves: every phrase is still in the lesson's markdown (so
rewording the sentence means revisiting its fact here), and the engine still behaves as
the phrase says (so a change to the engine that falsifies the sentence fails here, and
the lesson is fixed with it). `RETIRED` lists claims and names that were true once and
are false now; they must not come back into any lesson.

Fast, no real model: the checks run on the tiny random Llama (`build_tiny_llama`).
"""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import pytest
import torch
from executor_support import cpu_executor_reason as reason_for

pytestmark = pytest.mark.unit

LESSONS = Path(__file__).resolve().parent.parent / "lessons"
CPU = torch.device("cpu")


def lesson_text(lesson: str, kinds=("markdown",)) -> str:
    """The cells of lesson `lesson` ("00" … "12") of the given kinds, whitespace collapsed
    (prose wraps anywhere, so a phrase is matched across line breaks)."""
    path = next(LESSONS.glob(f"{lesson}_*.ipynb"))
    cells = json.loads(path.read_text())["cells"]
    return " ".join(" ".join("".join(c["source"]).split()) for c in cells if c["cell_type"] in kinds)


def collapsed(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------------------------------ helpers of the checks

def tiny_config():
    from minillm.model.tiny import build_tiny_llama
    return build_tiny_llama(seed=0).config


def cpu_executor_reason() -> str | None:
    """None when the "cpu" executor (the minillm_cpu package) runs the tiny model here."""
    return reason_for(tiny_config())


def tiny_llm(**knobs):
    from minillm import LLM
    from minillm.model.tiny import build_tiny_llama
    return LLM(build_tiny_llama(seed=0), dtype=torch.float32, device="cpu", block_size=4,
               max_num_seqs=4, **knobs)


def decode_metadata(seq_lens: list[int], block_size: int = 4):
    """One decode row per sequence, each in its own run of blocks: (meta, caches, q, k, v)."""
    from minillm.model.batch import build_attention_metadata
    tables, first = [], 0
    for n in seq_lens:
        tables.append(list(range(first, first + -(-n // block_size))))
        first += len(tables[-1])
    slots = [t[(n - 1) // block_size] * block_size + (n - 1) % block_size
             for t, n in zip(tables, seq_lens)]
    meta = build_attention_metadata([1] * len(seq_lens), seq_lens, tables, slots, block_size, CPU)
    g = torch.Generator().manual_seed(0)
    k_cache, v_cache = (torch.randn(first, block_size, 2, 16, generator=g) for _ in range(2))
    q, k, v = (torch.randn(len(seq_lens), h, 16, generator=g) for h in (4, 2, 2))
    return meta, (k_cache, v_cache), q, k, v


# ------------------------------------------------------------------ the checks

def auto_takes_cpu_where_it_builds_else_eager():
    from minillm.model.executor import resolve_executor
    cfg = tiny_config()
    expected = "cpu" if cpu_executor_reason() is None else "eager"
    assert resolve_executor("auto", CPU, torch.float32, cfg).name == expected
    assert resolve_executor("auto", torch.device("cuda"), torch.float32, cfg).name == "eager", \
        '"auto" must not take the CPU executor on a GPU'


def backend_defaults_per_executor():
    from minillm.attention import BACKENDS
    from minillm.model.executor import EXECUTORS, EagerExecutor
    eager = EagerExecutor()
    assert eager.attention_backend(CPU, torch.float32) == "sparse" and "sparse" in BACKENDS
    assert eager.attention_backend(torch.device("cuda"), torch.bfloat16) == "triton"
    if cpu_executor_reason() is None:
        assert EXECUTORS["cpu"]().attention_backend(CPU, torch.float32) == "cpp"
        assert "cpp" in BACKENDS


def reference_loops_over_sequences():
    """One attention call per sequence, over exactly that sequence's keys: no padding."""
    import minillm.attention.reference as reference
    seq_lens = [5, 40, 17]
    meta, caches, q, k, v = decode_metadata(seq_lens)
    key_lengths, sdpa = [], reference.F.scaled_dot_product_attention

    def recording_sdpa(query, key, value, **kwargs):
        key_lengths.append(key.shape[-2])
        return sdpa(query, key, value, **kwargs)
    reference.F.scaled_dot_product_attention = recording_sdpa
    try:
        reference.PerSequenceAttention()(q, k, v, *caches, meta, 0.25)
    finally:
        reference.F.scaled_dot_product_attention = sdpa
    assert key_lengths == seq_lens


def torch_and_sparse_pad_to_their_group():
    """Short decodes beside long ones: two groups, the short ones padded to their own
    group's longest context, not to the step's."""
    from minillm.attention import SparseAttention, TorchAttention
    seq_lens = [5, 6, 7, 8, 5, 6, 7, 8] + [120, 118]          # block size 4
    meta, *_ = decode_metadata(seq_lens)
    for backend in (TorchAttention(), SparseAttention()):
        groups = backend.plan(meta).groups
        widths = sorted(group.shape[1] for group in groups)      # (G, L): L padded positions
        assert len(groups) == 2 and widths == [8, 120], (backend.name, widths)


def cpp_walks_each_row_and_pads_nothing():
    if cpu_executor_reason() is not None:
        pytest.skip(cpu_executor_reason())
    from minillm.attention import PerSequenceAttention
    from minillm_cpu.cpp_attention import CppAttention
    meta, caches, q, k, v = decode_metadata([5, 6, 120])
    cpp = CppAttention()
    plan = cpp.plan(meta)
    assert set(plan._fields) == {"long_chunks"} and plan.long_chunks is None, \
        "the cpp plan of a decode step has no groups to pad"
    want = PerSequenceAttention()(q, k, v, *(c.clone() for c in caches), meta, 0.25)
    assert torch.allclose(cpp(q, k, v, *caches, meta, 0.25), want, atol=1e-5)


def decoder_layer_is_two_residual_lines():
    from minillm.attention import TorchAttention
    from minillm.kv_cache.tensors import allocate_kv_cache
    from minillm.model.batch import build_attention_metadata
    from minillm.model.llama import DecoderLayer, LlamaModel
    from minillm.model.tiny import build_tiny_llama
    source = collapsed(inspect.getsource(DecoderLayer.forward))
    for line in ("h = h + self.attn(self.input_norm(h), rope, layer_cache, attention)",
                 "return h + self.mlp(self.post_attention_norm(h))"):
        assert line in source, line
    model = LlamaModel.from_hf(build_tiny_llama(seed=0), dtype=torch.float32)
    layer, T = model.layers[0], 6
    meta = build_attention_metadata([T], [T], [[0, 1]], list(range(T)), 4, CPU)
    cache = allocate_kv_cache(1, 2, 4, model.num_kv_heads, model.head_dim, torch.float32, CPU)[0]
    h = torch.randn(T, model.config.hidden_size, generator=torch.Generator().manual_seed(0))
    rope, attention = model.rotary(torch.arange(T), h.dtype), TorchAttention().for_step(meta)
    with torch.inference_mode():
        out = layer(h, rope, cache, attention)
        mid = h + layer.attn(layer.input_norm(h), rope, cache, attention)
        assert torch.equal(out, mid + layer.mlp(layer.post_attention_norm(mid)))


def eager_runs_the_model_as_written():
    from minillm.model.llama import DecoderStack
    llm = tiny_llm(executor="eager")
    assert llm.llm_engine.config["executor"] == "eager"
    assert type(llm.model.layers) is DecoderStack
    foreign = {type(m).__qualname__ for m in llm.model.modules()
               if type(m).__module__ != "minillm.model.llama"
               and not type(m).__module__.startswith("torch.nn")}
    assert not foreign, f"eager left modules that llama.py does not write: {foreign}"


def cpu_executor_swaps_modules_and_fuses():
    if cpu_executor_reason() is not None:
        pytest.skip(cpu_executor_reason())
    from torch import nn

    from minillm.model.llama import RMSNorm, SiluAndMul
    llm = tiny_llm(executor="cpu")
    assert llm.llm_engine.config["attention_backend"] == "cpp"
    kinds = {type(m) for m in llm.model.modules()}
    assert not kinds & {nn.Linear, RMSNorm, SiluAndMul}, "a module was not swapped"
    assert type(llm.model.rotary).__name__ == "CppRotaryEmbedding"   # it wraps RotaryEmbedding's tables
    names = {kind.__name__ for kind in kinds}
    assert {"PackedLinear", "CppRMSNorm", "CppSiluAndMul", "CppRotaryEmbedding",
            "FusedDecoderStack"} <= names, names
    stack = llm.model.layers
    assert type(stack).__name__ == "FusedDecoderStack" and stack.fused is True
    stack.fused = False
    assert stack.qualifies(None, None, None) is False, "fused = False must run layer by layer"


def same_greedy_tokens_on_both_executors():
    if cpu_executor_reason() is not None:
        pytest.skip(cpu_executor_reason())
    from minillm import SamplingParams
    prompts = [{"prompt_token_ids": list(range(3, 3 + n))} for n in (5, 13, 9)]
    params = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)
    tokens = {name: [o.outputs[0].token_ids for o in tiny_llm(executor=name).generate(
        prompts, params, use_tqdm=False)] for name in ("eager", "cpu")}
    assert tokens["eager"] == tokens["cpu"]


def one_plan_per_step_shared_by_the_layers():
    """`runner.execute(plan)` asks the backend for the step's plan once (`for_step`), and
    every layer attends with it."""
    from minillm import SamplingParams
    llm = tiny_llm(executor="eager", attention_backend="torch")
    backend, counts = llm.llm_engine.runner.backend, {"plan": 0, "attend": 0}
    plan, attend = backend.plan, backend.attend

    def counted(name, fn):
        def call(*args, **kwargs):
            counts[name] += 1
            return fn(*args, **kwargs)
        return call
    backend.plan, backend.attend = counted("plan", plan), counted("attend", attend)
    llm.generate([{"prompt_token_ids": [3, 4, 5, 6, 7]}],
                 SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True), use_tqdm=False)
    steps = len(llm.trace.steps)
    assert counts == {"plan": steps, "attend": steps * llm.model.num_layers}, (counts, steps)


def the_appendix_skips_where_minillm_cpu_cannot_run():
    """Lesson 07's appendix asks `figures/l07.py::cpu_appendix_skip_reason` whether it can
    run: not with MINILLM_EXECUTOR=eager, not on a CUDA machine."""
    import importlib
    import os
    import sys
    sys.path.insert(0, str(LESSONS))
    try:
        l07 = importlib.import_module("figures.l07")
    finally:
        sys.path.remove(str(LESSONS))
    saved_env, saved_cuda = os.environ.get("MINILLM_EXECUTOR"), torch.cuda.is_available
    try:
        os.environ["MINILLM_EXECUTOR"] = "eager"
        assert "MINILLM_EXECUTOR=eager" in (l07.cpu_appendix_skip_reason() or "")
        os.environ.pop("MINILLM_EXECUTOR")
        torch.cuda.is_available = lambda: True
        assert "CUDA" in (l07.cpu_appendix_skip_reason() or "")
        torch.cuda.is_available = saved_cuda
        assert (l07.cpu_appendix_skip_reason() is None) == (cpu_executor_reason() is None)
    finally:
        torch.cuda.is_available = saved_cuda
        if saved_env is None:
            os.environ.pop("MINILLM_EXECUTOR", None)
        else:
            os.environ["MINILLM_EXECUTOR"] = saved_env


def the_learner_kernel_runs_only_on_cuda():
    """Lesson 13: a finished ex07 is used on CUDA only; on a CPU the part is 'not used'."""
    from minillm.engine.components import learner_parts
    on = {d: next(s for s in learner_parts("solutions", device=torch.device(d))
                  if s.part.key == "decode_kernel") for d in ("cpu", "cuda")}
    assert on["cpu"].whose == "not used" and "needs CUDA" in on["cpu"].reason
    assert on["cuda"].whose == "yours"


def the_learner_engine_runs_the_readable_model():
    """Lesson 13: `components="exercises"` runs the readable model (executor "eager"),
    whatever `auto` would pick, with the learner's attention as its backend."""
    from minillm import LLM
    from minillm.model.tiny import build_tiny_llama
    llm = LLM(build_tiny_llama(seed=0), components="exercises")
    assert llm.trace.config["executor"] == "eager", llm.trace.config
    assert llm.llm_engine.runner.backend.name == "exercises"


# ------------------------------------------------------------------ the table

FACTS = [
    ("00", ('The default, `"auto"`, takes `"cpu"` on a CPU where an optional package installed '
            "beside minillm, `minillm_cpu`, can build its C++ kernels",
            'Anywhere else (a GPU, no C++ compiler) `"auto"` takes `"eager"`'),
     auto_takes_cpu_where_it_builds_else_eager),
    ("00", ("brings its own attention backend, `cpp`",), backend_defaults_per_executor),
    ("04", ("the `sparse` backend — the readable engine's default there",),
     backend_defaults_per_executor),
    ("07", ("plain PyTorch, and the readable engine's default on a CPU",
            "With the default executor, where the optional `minillm_cpu` package builds its C++ "
            "kernels, it is that package's `cpp` backend"),
     backend_defaults_per_executor),
    ("00", ("Both give the same greedy tokens",), same_greedy_tokens_on_both_executors),
    ("06", ("`minillm`'s reference attention loops over the sequences, each over its own keys only",),
     reference_loops_over_sequences),
    ("06", ("the `torch` and `sparse` backends pad a decode row to the longest context *of its "
            "group* of similar lengths",),
     torch_and_sparse_pad_to_their_group),
    ("04", ("sorts the decode rows into groups of similar length (`split_by_length`)",),
     torch_and_sparse_pad_to_their_group),
    ("06", ("the `cpp` backend of the optional `minillm_cpu` package walks each row's own blocks "
            "and pads nothing",),
     cpp_walks_each_row_and_pads_nothing),
    ("04", ("`h = h + self.attn(self.input_norm(h), rope, layer_cache, attention)`",
            "`return h + self.mlp(self.post_attention_norm(h))`"),
     decoder_layer_is_two_residual_lines),
    ("04", ('`executor="eager"` (lesson 00): the model exactly as `minillm/model/llama.py` writes it',),
     eager_runs_the_model_as_written),
    ("00", ('`"eager"` runs the model exactly as `llama.py` writes it',), eager_runs_the_model_as_written),
    ("07", ("every `nn.Linear` → `PackedLinear`, `RMSNorm` → `CppRMSNorm`, `SiluAndMul` → "
            "`CppSiluAndMul`, `RotaryEmbedding` → `CppRotaryEmbedding`, and the stack of layers "
            "→ `FusedDecoderStack`",
            "`llm.model.layers.fused = False` turns it off"),
     cpu_executor_swaps_modules_and_fuses),
    ("07", ("not with `MINILLM_EXECUTOR=eager` (which keeps every plugin out)",
            "not on a CUDA machine"),
     the_appendix_skips_where_minillm_cpu_cannot_run),
    ("01", ("We time the engine's own decode step, `runner.execute(plan)`",
            "asks the attention backend for the step's plan (`runner.backend.for_step(meta)`, "
            "shared by every layer)"),
     one_plan_per_step_shared_by_the_layers),
    ("04", ("plans its index tensors once per step (reused by all layers)",),
     one_plan_per_step_shared_by_the_layers),
    ("13", ("so it runs only on CUDA",), the_learner_kernel_runs_only_on_cuda),
    ("13", ('Both run the readable model (`executor="eager"`), so the difference is the parts',),
     the_learner_engine_runs_the_readable_model),
]

# (lessons, text, why it must not come back). "*": every lesson; markdown and code.
RETIRED = [
    ("07", "Until now the engine's attention was PyTorch",
     "on a CPU the engine ran the sparse backend (eager) or minillm_cpu's cpp backend"),
    ("06", "pads every decode row", "the reference loops per sequence; torch and sparse pad per group"),
    ("01", "exactly as the engine calls it", "lesson 01 times runner.execute itself"),
    ("*", "the engine's default there, `cpp`", "cpp is minillm_cpu's backend, the default only with it"),
    ("*", "meta.scratch", "a step's plan is backend.for_step(meta).plan"),
    ("*", "fuse_layers", "the fused stack's switch is llm.model.layers.fused"),
    ("*", "kernels = load()", "it shadowed the Triton package `kernels`"),
    ("*", "minillm/flat_batch", "now minillm/model/batch.py"),
    ("*", "cpp_paged.py", "now minillm_cpu/cpp_attention.py"),
    ("*", "PERFORMANCE.md", "now docs/performance.md"),
    ("*", "minillm/bench", "now the top-level benchmarks/"),
    ("*", "cpu_kernels/", "now minillm_cpu/csrc/"),
    ("*", "`model.py`", "now minillm/model/llama.py"),
]

ALL_LESSONS = sorted(p.name[:2] for p in LESSONS.glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("lesson, phrases, check", FACTS,
                         ids=[f"{lesson}-{check.__name__}" for lesson, _, check in FACTS])
def test_the_lesson_states_it_and_the_engine_does_it(lesson, phrases, check):
    prose = lesson_text(lesson)
    missing = [p for p in phrases if collapsed(p) not in prose]
    assert not missing, (f"lesson {lesson} no longer says {missing}: if the sentence changed, "
                         f"update this fact (and its check, {check.__name__}) to the new wording")
    check()


@pytest.mark.parametrize("lessons, text, why", RETIRED, ids=[text for _, text, _ in RETIRED])
def test_retired_claims_stay_out(lessons, text, why):
    found = [lesson for lesson in (ALL_LESSONS if lessons == "*" else [lessons])
             if collapsed(text) in lesson_text(lesson, ("markdown", "code"))]
    assert not found, f"lessons {found} say {text!r}, which is no longer true: {why}"


def test_the_phrase_match_ignores_line_breaks_and_nothing_else():
    """How phrases are matched: across the lesson's line wrapping, and literally."""
    prose = lesson_text("04")
    assert collapsed("the model exactly as\n`minillm/model/llama.py` writes it") in prose
    assert collapsed("the model exactly as `minillm/model/model.py` writes it") not in prose
