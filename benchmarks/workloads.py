"""The prompt text every bench workload draws from: a passage and chat questions.

Each experiment module holds its own workload (its sizes, seeded with
`minillm.sim.workload.make_workload`), so two runs, or two machines, measure exactly the
same requests. What they share is here:

* `prompt_token_ids` — one prompt of exactly `prompt_len` ids per request. With a
  tokenizer they are cut from an English passage (so the model reads text, not
  noise); without one (the tiny test Llama) they are seeded random ids.
* `chat_questions`, `chat_prompt_ids` — distinct chat questions and their token ids
  through the model's chat template (the peers and the speculative experiments).
"""

from __future__ import annotations

import numpy as np

from minillm.sim.workload import RequestSpec

PASSAGE = """\
A small inference engine spends its day answering questions. Each question arrives as a
list of tokens, and the engine first reads all of them at once, filling its key and
value cache: that is the prefill. Then it writes the answer one token at a time, and
every new token needs one more pass through all thirty layers of the model: that is the
decode. Reading the weights from memory costs the same whether one answer or sixteen
answers are being written, so the engine groups many answers into one batch. A batch
that waits for its slowest member wastes the places of those who finished early; a batch
that lets new questions join at every step keeps every place busy. Long questions are
cut into chunks, so that a reader who waits for the next word of an answer is not kept
waiting behind a whole book. Memory for the cache is handed out in small blocks, like
pages in an operating system, so that nobody reserves room for an answer that never
comes. These are the ideas of this course, and the numbers in this benchmark measure
each of them on a real model, on this very machine, in one run.
"""


def prompt_token_ids(specs: list[RequestSpec], vocab_size: int, tokenizer=None,
                     seed: int = 0) -> list[list[int]]:
    """One prompt of exactly `spec.prompt_len` token ids per request.

    With a tokenizer: consecutive windows of the tokenized PASSAGE (repeated as often
    as needed), each request starting at a different offset. Without one: ids drawn
    uniformly from [2, vocab_size) with a seeded generator (0 and 1 are often BOS/EOS).
    """
    if tokenizer is not None:
        text = tokenizer(PASSAGE, add_special_tokens=False).input_ids
        longest = max((s.prompt_len for s in specs), default=0)
        repeats = 2 + (longest + len(specs) * 7) // max(len(text), 1)
        stream = text * repeats
        return [stream[(7 * i) % len(text):(7 * i) % len(text) + s.prompt_len]
                for i, s in enumerate(specs)]
    rng = np.random.default_rng(seed)
    return [rng.integers(2, vocab_size, size=s.prompt_len).tolist() for s in specs]


TOPICS = ("photosynthesis", "the French revolution", "black holes", "machine learning",
          "the water cycle", "volcanoes", "the stock market", "honey bees",
          "the printing press", "climate change", "the human heart", "chess openings",
          "the Roman empire", "electric cars", "coffee", "the moon landing")
QUESTIONS = ("Explain {} in simple terms.", "Write a short story about {}.",
             "List three surprising facts about {}.", "What are the pros and cons of {}?")


def chat_questions(num: int = 64) -> list[str]:
    """`num` distinct chat questions: every question form for every topic."""
    questions = [q.format(t) for t in TOPICS for q in QUESTIONS]
    if num > len(questions):
        raise ValueError(f"at most {len(questions)} distinct questions, asked for {num}")
    return questions[:num]


def chat_prompt_ids(tokenizer, question: str) -> list[int]:
    """One user message through the model's chat template, as token ids."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                         add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False).input_ids)
