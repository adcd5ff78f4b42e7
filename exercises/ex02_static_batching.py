"""Lesson 02 — static batching (静态批处理): count the waste, then build the padded loop.

Your turn: replace each `raise NotImplementedError` with your code, then run the check
cell at the end of lesson 02 (or `python -m minillm.grading 02`).

Three tasks:

1. `static_slot_waste` — the arithmetic of the seed example (8 slots, outputs
   30 … 700 → 79.5% of the slot-iterations idle), for any lengths and slot count;
2. `left_pad` — make one rectangular batch out of prompts of different lengths;
3. `padded_static_generate` — the classic `model.generate(batch)` loop: greedy
   decoding with the KV cache, every row computed every step until the longest
   request is done. Its tokens must equal minillm's `LLM(..., scheduling="static")`.

The answer key's request-level batching is `minillm/scheduler/static.py::StaticScheduler`;
`static_slot_waste` counts what `minillm/sim/metrics.py::slot_utilization` measures on a Trace.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class StaticBatchResult(NamedTuple):
    """What `padded_static_generate` returns (given — nothing to implement here)."""

    tokens: list[list[int]]      # each request's generated token ids, in input order
    num_steps: int               # forward passes the batch ran (prefill + decodes)
    wasted_row_steps: int        # rows computed for a request that had already finished


def static_slot_waste(output_lens: list[int], num_slots: int) -> dict:
    """Slot accounting of static batching, batches formed in arrival order.

    Requests are taken `num_slots` at a time, in the order given: requests 0 … S−1
    form the first batch, S … 2S−1 the second, and so on (the last batch may be
    partial). A batch runs until its *longest* member has produced all its tokens;
    a request with `n` output tokens is busy for exactly `n` iterations (the prefill
    iteration yields its first token, each decode iteration one more). Every slot
    of the batch is paid for on every iteration — also the slots of finished
    requests, and the empty slots of a partial batch.

    Return a dict with
      "iterations"       total iterations of all batches,
      "slot_iterations"  num_slots × iterations,
      "useful"           slot-iterations that produced a token (= sum of lengths),
      "idle_fraction"    1 − useful / slot_iterations.

    Example: [30, 40, 50, 60, 700, 80, 90, 100] with 8 slots → 700 iterations,
    5600 slot-iterations, 1150 useful, idle fraction 0.7946…
    """
    raise NotImplementedError("Your turn: one batch per num_slots requests; "
                              "each lasts as long as its longest member")


def left_pad(prompts: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad token-id prompts into one rectangular batch.

    Returns `(input_ids, attention_mask)`, both `torch.long` of shape [B, L] where L is
    the longest prompt: row b holds `L − len(prompts[b])` copies of `pad_token_id`,
    then the prompt; the mask is 0 on the pads and 1 on real tokens.

    Why *left*? Decoding appends one column on the right every step; with the pads on
    the left, every row's newest token is in the last column, so
    `logits[:, -1]` is the next-token distribution of every row at once.

    Example: [[5, 6, 7], [8]] with pad 0 → ids [[5, 6, 7], [0, 0, 8]],
    mask [[1, 1, 1], [0, 0, 1]].
    """
    raise NotImplementedError("Your turn: torch.full with the pad id, then copy each "
                              "prompt into the right end of its row")


@torch.inference_mode()
def padded_static_generate(model, prompts: list[list[int]], max_new_tokens,
                           pad_token_id: int = 0,
                           eos_token_id: int | None = None) -> StaticBatchResult:
    """Greedy static batching the way `model.generate(batch)` does it.

    `model`: a transformers `LlamaForCausalLM`; `prompts`: lists of token ids;
    `max_new_tokens`: one int for every request, or a list with one per request.

    1. `left_pad` the prompts; positions are 0, 1, … over each row's *real* tokens
       (`attention_mask.cumsum(-1) - 1`, clamped at 0 under the pads) — RoPE must not
       count the pads;
    2. prefill: `out = model(input_ids, attention_mask=mask, position_ids=positions,
       use_cache=True)`; the next token of every row is `out.logits[:, -1].argmax(-1)`;
    3. decode: feed the [B, 1] new tokens with the mask grown by one column of ones,
       the positions advanced by one, and `cache=out.cache` (transformers 5.x names
       the KV cache argument `cache=`);
    4. request b is finished after `max_new_tokens[b]` tokens, or right after it emits
       `eos_token_id` (kept in its output) when that is not None. A finished row
       **keeps running** — the batch is rectangular — but its tokens are thrown away:
       each such row in each step is one wasted row-step;
    5. stop when every request is finished.

    Return `StaticBatchResult(tokens, num_steps, wasted_row_steps)` where `num_steps`
    counts forward passes (the prefill included). With no EOS:
    num_steps = max(lengths) and wasted_row_steps = B · num_steps − sum(lengths).
    """
    raise NotImplementedError("Your turn: prefill the padded batch, then one decode "
                              "forward per step until every row is done")
