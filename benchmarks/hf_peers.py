"""transformers as a contender: padded `generate` batches and its own continuous batching.

* `hf_generate_static` — the usual way to batch with Hugging Face: padded batches of
  `batch_size` prompts in arrival order, greedy, each batch running until its longest
  request is done (`max_new_tokens` = the batch's longest). Rows that finished early
  keep computing: only each request's own length counts as *useful* tokens.
* `hf_continuous` — transformers' paged-attention scheduler
  (`ContinuousBatchingManager`), a per-request `max_new_tokens`.

Both return `peer_result`'s dict and are timed from the first request handed in to
the last token out.
"""

from __future__ import annotations

import contextlib
import time

import torch


def peer_result(elapsed: float, lens: list[int], produced: list[int], computed: int) -> dict:
    """A contender's numbers; raises if any request got a different number of tokens."""
    wrong = [(i, got, want) for i, (got, want) in enumerate(zip(produced, lens)) if got != want]
    if wrong or len(produced) != len(lens):
        raise RuntimeError(f"wrong output lengths (index, got, wanted): {wrong[:5]}")
    useful = sum(lens)
    return {"elapsed_s": elapsed, "useful_tokens": useful, "computed_tokens": computed,
            "tokens_per_s": useful / elapsed}


@contextlib.contextmanager
def eos_disabled(model):
    """Let `generate` run to max_new_tokens: no EOS stopping, and no EOS masking either
    (min_new_tokens would change which tokens are chosen; this changes nothing but the
    stop rule — the same as minillm's and vLLM's ignore_eos)."""
    saved = model.generation_config.eos_token_id
    model.generation_config.eos_token_id = None
    try:
        yield
    finally:
        model.generation_config.eos_token_id = saved


@torch.inference_mode()
def hf_generate_static(model, prompts: list[list[int]], lens: list[int], batch_size: int,
                       pad_id: int) -> dict:
    """Padded static batches with `model.generate` (greedy, left padding)."""
    produced, computed = [], 0
    start = time.perf_counter()
    with eos_disabled(model):
        for i in range(0, len(prompts), batch_size):
            batch, want = prompts[i:i + batch_size], lens[i:i + batch_size]
            width = max(len(p) for p in batch)
            ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in batch])   # [b, width]
            mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch])
            out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False,
                                 max_new_tokens=max(want), pad_token_id=pad_id)
            new = out.shape[1] - width               # every row ran to the batch's longest
            produced += [min(new, n) for n in want]  # the useful part of each row
            computed += new * len(batch)
            if new != max(want):
                raise RuntimeError(f"generate made {new} tokens, expected {max(want)}")
    return peer_result(time.perf_counter() - start, lens, produced, computed)


HF_PAGE = 32            # tokens per page of transformers' paged cache


@torch.inference_mode()
def hf_continuous(model, prompts: list[list[int]], lens: list[int], max_concurrent: int) -> dict:
    """transformers' ContinuousBatchingManager with a per-request max_new_tokens."""
    from transformers import ContinuousBatchingConfig, GenerationConfig
    gen = GenerationConfig(do_sample=False, max_new_tokens=max(lens), eos_token_id=-1,
                           pad_token_id=0)
    # size the paged cache for the workload: left alone it takes most of the free RAM
    longest = max(len(p) + n for p, n in zip(prompts, lens))
    cb = ContinuousBatchingConfig(max_requests_per_batch=max_concurrent, page_size=HF_PAGE,
                                  num_blocks=max_concurrent * -(-longest // HF_PAGE) + 2,
                                  max_batch_tokens=2048, allow_block_sharing=False)
    manager = model.init_continuous_batching(generation_config=gen, continuous_batching_config=cb)
    manager.start()
    try:
        start = time.perf_counter()
        for i, (p, n) in enumerate(zip(prompts, lens)):
            manager.add_request(p, request_id=f"r{i}", max_new_tokens=n, eos_token_id=-1)
        done = {}
        while len(done) < len(prompts):
            result = manager.get_result(timeout=1)
            if result is None:
                if not manager.is_running():
                    raise RuntimeError("transformers' batching thread stopped early")
                continue
            if result.is_finished():
                if result.error:
                    raise RuntimeError(f"transformers CB failed: {result.error}")
                done[result.request_id] = len(result.generated_tokens)
        elapsed = time.perf_counter() - start
    finally:
        manager.stop(block=True)
        manager.destroy()
    produced = [done[f"r{i}"] for i in range(len(prompts))]
    return peer_result(elapsed, lens, produced, sum(produced))
