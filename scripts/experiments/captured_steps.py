"""Shared by the experiments in this folder: real decode steps to replay, and a timer.

`decode_batches` runs real prompts through an `LLM` and keeps the flat batches the
engine built, so an experiment can call the model's forward pass again on exactly the
step the engine ran (same positions, block tables, KV cache contents): `replay`.
Not a script: the others import it (`from captured_steps import ...`)."""
import time

from minillm import SamplingParams
import minillm.model.model_runner as model_runner


def _recording():
    """(list the engine's flat batches are appended to, the original builder to restore).
    The runner calls `build_flat_batch` by its module-level name once a step."""
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


def replay(runner, batch, backend=None):
    """The model's forward pass on a captured step again, planned as the engine plans
    each step (`backend.for_step(meta)`; default backend: the engine's) → logits [S, V]."""
    attention = (backend or runner.backend).for_step(batch.meta)
    return runner.model(batch.input_ids, batch.positions, runner.kv_caches, attention,
                        batch.logits_indices)


def median_ms(fn, n):
    """Median wall time of `n` calls of `fn`, in ms."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return sorted(times)[n // 2] * 1e3
