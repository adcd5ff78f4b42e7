"""Lesson 02 — solutions: the slot-waste calculator and a padded static generate loop."""

from __future__ import annotations

from typing import NamedTuple

import torch


class StaticBatchResult(NamedTuple):
    tokens: list[list[int]]      # each request's generated token ids, in input order
    num_steps: int               # forward passes the batch ran (prefill + decodes)
    wasted_row_steps: int        # rows computed for a request that had already finished


def static_slot_waste(output_lens: list[int], num_slots: int) -> dict:
    """Slot accounting of static batching, batches formed in arrival order."""
    iterations = 0
    for start in range(0, len(output_lens), num_slots):
        batch = output_lens[start:start + num_slots]
        iterations += max(batch)              # the batch lives as long as its longest member
    slot_iterations = num_slots * iterations  # every slot is paid for every iteration
    useful = sum(output_lens)                 # one useful slot-iteration per generated token
    idle = 1 - useful / slot_iterations if slot_iterations else 0.0
    return {"iterations": iterations, "slot_iterations": slot_iterations,
            "useful": useful, "idle_fraction": idle}


def left_pad(prompts: list[list[int]], pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad prompts into input_ids [B, L] and attention_mask [B, L] (1 = real token)."""
    width = max(len(p) for p in prompts)
    input_ids = torch.full((len(prompts), width), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((len(prompts), width), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        if prompt:
            input_ids[row, width - len(prompt):] = torch.tensor(prompt, dtype=torch.long)
            attention_mask[row, width - len(prompt):] = 1
    return input_ids, attention_mask


@torch.inference_mode()
def padded_static_generate(model, prompts: list[list[int]], max_new_tokens,
                           pad_token_id: int = 0,
                           eos_token_id: int | None = None) -> StaticBatchResult:
    """Greedy decoding of one rectangular batch, run until its longest member is done."""
    batch = len(prompts)
    limits = [max_new_tokens] * batch if isinstance(max_new_tokens, int) else list(max_new_tokens)
    input_ids, mask = left_pad(prompts, pad_token_id)                  # [B, L], [B, L]
    positions = (mask.cumsum(-1) - 1).clamp(min=0)                     # [B, L]
    out = model(input_ids, attention_mask=mask, position_ids=positions, use_cache=True)
    tokens: list[list[int]] = [[] for _ in range(batch)]
    done = [False] * batch
    steps = wasted = 0
    while True:
        steps += 1
        next_ids = out.logits[:, -1].argmax(-1)                        # [B]
        for row in range(batch):
            if done[row]:
                wasted += 1                                            # computed for nothing
                continue
            token = int(next_ids[row])
            tokens[row].append(token)
            done[row] = len(tokens[row]) >= limits[row] or token == eos_token_id
        if all(done):
            return StaticBatchResult(tokens, steps, wasted)
        positions = positions[:, -1:] + 1                              # [B, 1]
        mask = torch.cat([mask, torch.ones((batch, 1), dtype=mask.dtype)], dim=1)
        out = model(next_ids[:, None], attention_mask=mask, position_ids=positions,
                    cache=out.cache, use_cache=True)
