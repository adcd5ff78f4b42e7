"""Choosing the next token from the logits: greedy, temperature, top-k, top-p.

The model gives one row of logits per sequence that samples this step. Each row is
turned into a token by its own request's `SamplingParams`:

* temperature 0 → greedy: the argmax;
* otherwise divide by the temperature, keep the `top_k` most likely tokens, keep the
  smallest set whose probability reaches `top_p` (nucleus), renormalise, draw.

**Reproducibility.** Every draw uses a generator seeded from the request's seed and the
index of the token being drawn. A request therefore gets the same tokens whatever else
shares its batch, and after a preemption by recompute it draws exactly what it would
have drawn anyway. Requests without a seed get one derived from the engine seed and
their request id (`sampling_params.request_seed`).

**Any temperature > 0 works.** The logits are shifted so the largest is 0 *before* the
division, in float64: a temperature of 1e-300 then gives 0 for the top token and −inf
for the rest — exactly greedy — instead of inf − inf = nan.
"""

from __future__ import annotations

import torch

from minillm.sampling_params import SamplingParams


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to -inf) what top-k and top-p exclude. logits [V] (already / temperature)."""
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # drop a token if the tokens before it already reach top_p (the first always stays)
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(0, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


class Sampler:
    def __call__(self, logits: torch.Tensor, params: list[SamplingParams],
                 seeds: list[int], token_indices: list[int]) -> list:
        """logits [S, V] → one token id per row (or the Exception that row raised).

        seeds[i] and token_indices[i] (how many tokens row i's request generated so
        far) make every draw reproducible. A row that fails does not stop the others.
        """
        tokens = greedy(logits).tolist()                  # greedy for every row first
        for row, p in enumerate(params):
            if p.greedy:
                continue
            try:
                tokens[row] = sample_row(logits[row], p, seeds[row], token_indices[row])
            except Exception as err:                       # noqa: BLE001 — reported per row
                tokens[row] = err
        return tokens


def greedy(logits: torch.Tensor) -> torch.Tensor:
    """The most likely token of each row: logits [S, V] → [S]; ties go to the lowest id.

    `max(dim).indices` is the argmax — PyTorch documents both as returning the first
    maximal index — and on the CPU it is faster than `argmax` over a 49,152-wide
    vocabulary (docs/performance.md)."""
    return logits.max(dim=-1).indices


def sample_row(logits: torch.Tensor, p: SamplingParams, seed: int, index: int) -> int:
    """Draw one token from logits [V] by `p`; the draw is fixed by (seed, index)."""
    shifted = logits.double() - logits.max().double()          # [V], max 0: no overflow
    scaled = filter_logits(shifted / p.temperature, p.top_k, p.top_p)
    probs = scaled.softmax(-1).cpu()
    generator = torch.Generator().manual_seed((seed * 7919 + index) % (2**63))
    return int(torch.multinomial(probs, 1, generator=generator))
