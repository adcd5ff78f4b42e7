"""Speculative decoding without a draft model: prompt lookup (n-gram) proposals.

A decode step costs about the same for 1 token or for a few: the weights are read once
either way (lesson 01). So *guess* the next `k` tokens cheaply, run the real token and
the `k` guesses through the model in ONE forward, and keep the guesses the model agrees
with:

    context   … the cat sat on the mat . the cat
    proposal  the last 2 tokens "the cat" appeared before → guess what followed: "sat on"
    forward   positions of [cat, sat, on]  → model's own greedy picks [sat, on, a]
    verify    "sat" ✓  "on" ✓  → accept both, plus the model's pick after them ("a")
              3 tokens from one forward instead of 1

**Where guesses come from.** Prompt lookup: find the most recent earlier occurrence of
the sequence's last `n` tokens (n from `prompt_lookup_max` down to `prompt_lookup_min`)
and propose the tokens that followed it. No second model needed; it shines when the
output copies from the input (summaries, code edits, extraction, chat with quotes).

**Why the output is unchanged.** A guess is accepted only if it equals the token the
model itself would pick there (greedy), and each position's logits see exactly the
tokens before it. The output is the same token list as plain greedy decoding; only the
number of forward passes changes. minillm speculates for greedy requests only: keeping
a *sampled* distribution exact needs rejection sampling, which this lesson leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class NgramProposer:
    num_speculative_tokens: int = 4
    prompt_lookup_max: int = 4
    prompt_lookup_min: int = 1

    def __post_init__(self) -> None:
        if self.num_speculative_tokens < 1:
            raise ValueError("num_speculative_tokens must be >= 1")
        if not 1 <= self.prompt_lookup_min <= self.prompt_lookup_max:
            raise ValueError("need 1 <= prompt_lookup_min <= prompt_lookup_max")

    def propose(self, token_ids: list[int], limit: int | None = None) -> list[int]:
        """Up to `num_speculative_tokens` (and `limit`) guesses for what follows `token_ids`."""
        k = self.num_speculative_tokens if limit is None else min(limit, self.num_speculative_tokens)
        if k <= 0:
            return []
        for n in range(min(self.prompt_lookup_max, len(token_ids) - 1), self.prompt_lookup_min - 1, -1):
            pattern = token_ids[-n:]
            # the most recent earlier occurrence, not the suffix itself
            for start in range(len(token_ids) - n - 1, -1, -1):
                if token_ids[start:start + n] == pattern:
                    follow = token_ids[start + n:start + n + k]
                    if follow:
                        return follow
        return []


def accept_drafts(drafts: list[int], targets: list[int]) -> list[int]:
    """Tokens to append: the drafts the model agrees with, then the model's own next pick.

    targets[i] is the model's greedy token at the position of drafts[i] (targets has
    one more entry: the pick after the last draft).
    """
    accepted = 0
    while accepted < len(drafts) and drafts[accepted] == targets[accepted]:
        accepted += 1
    return drafts[:accepted] + [targets[accepted]]


def propose_drafts(proposer, seq, max_model_len: int) -> list[int]:
    """This step's guesses for `seq`: only a greedy sequence that is decoding speculates,
    and never past its `max_tokens` or the context length."""
    if proposer is None or not (seq.params.greedy and seq.num_uncomputed_tokens == 1
                                and seq.num_output_tokens):
        return []
    room = min(seq.params.max_tokens - seq.num_output_tokens, max_model_len - seq.num_tokens) - 1
    return list(proposer.propose(seq.all_token_ids, room))


def verify_drafts(row, produced: list[int]) -> list[int]:
    """After the forward: the tokens `row`'s sequence gains, and its computed count advanced.

    Without guesses that is `produced` (one token, or none mid-prompt). With d guesses the
    row ran d + 1 positions; K/V are kept for the real token and the guesses the model
    agreed with; the slots of rejected guesses are simply written again next step.
    """
    seq = row.seq
    drafts, seq.draft_token_ids = seq.draft_token_ids, []
    if not drafts:
        seq.num_computed_tokens += row.num_new_tokens
        return produced
    new_tokens = accept_drafts(drafts, produced)
    accepted = len(new_tokens) - 1
    seq.num_computed_tokens += row.num_new_tokens - len(drafts) + accepted
    seq.num_draft_proposed += len(drafts)
    seq.num_draft_accepted += accepted
    return new_tokens
