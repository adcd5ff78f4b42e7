"""Shared by the issue-18 experiments: real decode steps to replay, and a timer.

`decode_batches` runs real prompts through an `LLM` and keeps the flat batches the
engine built, so an experiment can call the model's forward pass again on exactly the
step the engine ran (same positions, block tables, KV cache contents): `replay`."""
import time

from minillm import SamplingParams
import minillm.model.model_runner as model_runner


def _recording():
    """(list the engine's flat batches are appended to, the original builder to restore)."""
    seen, build = [], model_runner.build_flat_batch
    model_runner.build_flat_batch = lambda plan, bs, dev: seen.append(build(plan, bs, dev)) or seen[-1]
    return seen, build


def decode_batches(llm, sizes=(16,), context=128):
    """{batch size: a decode step of that many sequences at ~`context` tokens}."""
    seen, build = _recording()
    prompts = [{"prompt_token_ids": [1 + (i * 7 + j) % 1000 for j in range(context)]}
               for i in range(max(sizes))]
    steps = {}
    try:
        for size in sorted(sizes, reverse=True):
            llm.generate(prompts[:size], SamplingParams(max_tokens=8, ignore_eos=True), use_tqdm=False)
            steps[size] = [b for b in seen if b.input_ids.shape[0] == size][-1]
    finally:
        model_runner.build_flat_batch = build
    return steps


def prompt_beside_decodes(llm, decodes=15, context=128, prompt_len=40):
    """A step that carries a new `prompt_len`-token prompt beside `decodes` decodes at
    ~`context` tokens (the peers workload's common "with a prompt" step): `decodes` + 1
    requests start together, one finishes after 3 tokens, and a waiting one takes its
    place (`llm` must hold `decodes` + 1 sequences at a time)."""
    seen, build = _recording()
    prompts = [{"prompt_token_ids": [1 + (i * 7 + j) % 1000 for j in range(context)]}
               for i in range(decodes + 1)]
    prompts.append({"prompt_token_ids": [1 + (j * 5) % 1000 for j in range(prompt_len)]})
    params = [SamplingParams(max_tokens=3 if i == 0 else 30, ignore_eos=True)
              for i in range(len(prompts))]
    try:
        llm.generate(prompts, params, use_tqdm=False)
    finally:
        model_runner.build_flat_batch = build
    rows = decodes + prompt_len
    return [b for b in seen if b.input_ids.shape[0] == rows and b.logits_indices.shape[0] == decodes + 1][-1]


def replay(runner, batch, backend=None):
    """The model's forward pass on a captured step again (with `backend`, default the
    engine's), re-planned as the engine plans each step → logits [S, vocab]."""
    batch.meta.scratch.clear()
    return runner.model(batch.input_ids, batch.positions, runner.kv_caches, batch.meta,
                        batch.logits_indices, backend or runner.backend)


def median_ms(fn, n):
    """Median wall time of `n` calls of `fn`, in ms."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[n // 2] * 1e3
