"""Reference decoding with transformers itself — the oracle minillm is checked against."""

from __future__ import annotations

import torch


@torch.inference_mode()
def hf_greedy(model, prompt_ids: list[int], max_new_tokens: int):
    """Batch-1 greedy decoding that never stops early and never masks EOS.

    Returns (tokens, gaps): gaps[i] is the top-1 minus top-2 logit at step i, so a test
    can tell a real mismatch from a numerical near-tie.
    """
    out = model(torch.tensor([prompt_ids]), use_cache=True)
    tokens, gaps = [], []
    for _ in range(max_new_tokens):
        logits = out.logits[0, -1].float()
        top2 = torch.topk(logits, 2).values
        token = int(logits.argmax())
        tokens.append(token)
        gaps.append(float(top2[0] - top2[1]))
        out = model(torch.tensor([[token]]), cache=out.cache, use_cache=True)
    return tokens, gaps


def compare_with_ties(got: list[int], want: list[int], gaps: list[float], tol: float = 1e-3):
    """'equal', 'near-tie' (first difference at a top-2 gap < tol) or 'mismatch'."""
    for i, (a, b) in enumerate(zip(got, want)):
        if a != b:
            return "near-tie" if gaps[i] < tol else "mismatch"
    return "equal" if len(got) == len(want) else "mismatch"


def chat_prompt_ids(tokenizer, questions: list[str]) -> list[list[int]]:
    """Each question as a one-turn chat prompt (the model's template), as token ids."""
    prompts = []
    for q in questions:
        text = tokenizer.apply_chat_template([{"role": "user", "content": q}],
                                             add_generation_prompt=True, tokenize=False)
        prompts.append(tokenizer(text, add_special_tokens=False).input_ids)
    return prompts
