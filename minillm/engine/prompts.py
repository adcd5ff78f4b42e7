"""A prompt as a user gives it → the token ids the engine runs, with every check.

Three shapes are accepted, as in vLLM: a string (tokenized by the model's tokenizer),
`{"prompt": text}`, and `{"prompt_token_ids": [...]}` (optionally with the text beside it
under "prompt", which is then only reported back). Every id must lie inside the model's
vocabulary — also the ids a tokenizer produced: a tokenizer of another model is refused
here, not found out by an IndexError deep in the forward pass.
"""

from __future__ import annotations

from minillm.engine.checks import InvalidValue, check_int_list


def prompt_token_ids(prompt, tokenizer, vocab_size: int) -> tuple[str | None, list[int]]:
    """(text or None, token ids) of one prompt; ValueError/TypeError say what to change."""
    text = None
    if isinstance(prompt, dict):
        unknown = sorted(set(prompt) - {"prompt", "prompt_token_ids"})
        if unknown:
            raise ValueError(f"a prompt dict has the keys 'prompt' and/or "
                             f"'prompt_token_ids'; got unknown keys {unknown}")
        text = prompt.get("prompt")
        if text is not None and not isinstance(text, str):
            raise TypeError(f"'prompt' must be a str, got {type(text).__name__}")
        if "prompt_token_ids" in prompt:
            token_ids = check_in_vocab(check_int_list("prompt_token_ids", prompt["prompt_token_ids"]),
                                       vocab_size, "prompt_token_ids")
        elif text is not None:
            token_ids = encode(text, tokenizer, vocab_size)
        else:
            raise ValueError("a prompt dict needs 'prompt' (text) or 'prompt_token_ids'")
    elif isinstance(prompt, str):
        text, token_ids = prompt, encode(prompt, tokenizer, vocab_size)
    else:
        raise TypeError("a prompt is a str, {'prompt': text} or {'prompt_token_ids': "
                        f"[...]}}, got {type(prompt).__name__}")
    if not token_ids:
        raise InvalidValue("prompt has no tokens: give at least one token id", "prompt")
    return text, token_ids


def encode(text: str, tokenizer, vocab_size: int) -> list[int]:
    if not text:
        raise InvalidValue("prompt is empty: give at least one character", "prompt")
    if tokenizer is None:
        raise ValueError("this model has no tokenizer: pass {'prompt_token_ids': [...]} "
                         "instead of text")
    ids = list(tokenizer(text).input_ids)
    if any(not 0 <= t < vocab_size for t in ids):
        raise InvalidValue(f"the tokenizer gave ids outside the model's vocabulary "
                           f"(0..{vocab_size - 1}): it does not belong to this model", "prompt")
    return ids


def check_in_vocab(ids: list[int], vocab_size: int, name: str) -> list[int]:
    """`ids` unchanged if every one is a token of the vocabulary; else an InvalidValue."""
    for i, t in enumerate(ids):
        if not 0 <= t < vocab_size:
            raise InvalidValue(f"{name}[{i}] = {t} is outside the vocabulary "
                               f"(0..{vocab_size - 1})", name)
    return ids
