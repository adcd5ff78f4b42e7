"""The benchmark's workloads: seeded, written down, the same in every run.

Every number the bench prints comes from one of the workloads below, drawn with
`minillm.workload.make_workload` from a fixed seed — so two runs (or two machines)
measure exactly the same requests, and a ratio between two engines compares like with
like.

* `throughput_workload` — a burst of requests whose output lengths follow a capped
  Pareto law: most answers are short, a few are very long. That skew is what static
  batching (静态批处理) handles worst: a batch lasts as long as its longest member, so
  the short members' slots sit idle. EOS is ignored and `max_tokens` is each request's
  drawn length, so every engine generates exactly the same tokens.
* `chunked_workload` — decode streams that start at t = 0, and long prompts that
  arrive (Poisson) while they decode: the case chunked prefill (分块预填充) exists for.
* `peer_prompts`, `peer_output_lengths` — 64 real chat prompts (the chat template
  applied) with skewed output lengths, for the comparison against transformers and vLLM.
* `prefix_workload` — requests that all start with the same long system prompt, for
  prefix caching (前缀缓存).
* `speculative_prompts` — a task whose answer copies its prompt and one that does not,
  for prompt-lookup speculative decoding (投机解码).

Prompts are token ids. With a tokenizer they are cut from an English passage (so the
model reads text, not noise); without one (the tiny test Llama) they are seeded random
ids.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from minillm.workload import RequestSpec, fixed, lognormal, make_workload, pareto, uniform


@dataclass(frozen=True)
class ThroughputShape:
    """How the throughput workload is drawn (see `throughput_workload`)."""

    num_requests: int = 192
    prompt_median: int = 32          # lognormal prompt lengths, sigma 0.5
    prompt_cap: int = 128
    output_minimum: int = 4          # Pareto output lengths: P(X > x) = (minimum/x)^alpha
    output_alpha: float = 1.0        # alpha 1: half the answers ≤ 8 tokens, 1 in 32 hits the cap
    output_cap: int = 128


FULL_THROUGHPUT = ThroughputShape()
QUICK_THROUGHPUT = ThroughputShape(num_requests=12, prompt_median=16, prompt_cap=48,
                                   output_minimum=2, output_alpha=1.0, output_cap=24)


def throughput_workload(shape: ThroughputShape = FULL_THROUGHPUT, seed: int = 0) -> list[RequestSpec]:
    """A burst of `shape.num_requests` requests; output lengths heavy-tailed (Pareto).

    Why this many requests: in a burst, continuous batching cannot finish before the
    last-admitted long request does, so a short burst mostly measures that tail. With
    192 requests (12 static batches of 16) the queue stays full for most of the run,
    which is the regime a server lives in.

    `max_tokens` = the drawn output length and the bench sets `ignore_eos=True`, so a
    request generates exactly `output_len` tokens on every engine.
    """
    return make_workload(shape.num_requests,
                         lognormal(shape.prompt_median, 0.5, cap=shape.prompt_cap),
                         pareto(shape.output_minimum, shape.output_alpha, cap=shape.output_cap),
                         arrival="burst", max_tokens="output_len", seed=seed)


@dataclass(frozen=True)
class ChunkedShape:
    """Decode streams from t = 0, then long prompts arriving at `rate` per second."""

    num_streams: int = 8             # short prompts, long answers: they decode throughout
    stream_prompt: int = 32
    stream_output: int = 160
    num_long: int = 6                # long prompts, short answers: big prefills
    long_prompt_low: int = 768
    long_prompt_high: int = 1280
    long_output: int = 16
    long_rate: float = 1.0           # Poisson arrivals per second
    long_start: float = 0.5          # the first long prompt arrives this late


FULL_CHUNKED = ChunkedShape()
QUICK_CHUNKED = ChunkedShape(num_streams=3, stream_prompt=8, stream_output=24, num_long=3,
                             long_prompt_low=96, long_prompt_high=160, long_output=4,
                             long_rate=20.0, long_start=0.01)


def chunked_workload(shape: ChunkedShape = FULL_CHUNKED, seed: int = 0) -> list[RequestSpec]:
    """Streams (burst at t = 0) plus long prompts (Poisson from `long_start`)."""
    streams = make_workload(shape.num_streams, fixed(shape.stream_prompt),
                            fixed(shape.stream_output), arrival="burst",
                            max_tokens="output_len", seed=seed)
    longs = make_workload(shape.num_long, uniform(shape.long_prompt_low, shape.long_prompt_high),
                          fixed(shape.long_output), arrival="poisson", rate=shape.long_rate,
                          max_tokens="output_len", seed=seed + 1)
    streams = [replace(s, request_id=f"stream-{i}") for i, s in enumerate(streams)]
    longs = [replace(s, request_id=f"long-{i}", arrival_time=s.arrival_time + shape.long_start)
             for i, s in enumerate(longs)]
    return streams + longs


# --------------------------------------------------------------------- prompt tokens

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


# --------------------------------------------------------------------- peers

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


@dataclass(frozen=True)
class PeerShape:
    num_requests: int = 64
    output_median: int = 40          # lognormal output lengths: median, sigma, cap
    output_sigma: float = 1.0
    output_cap: int = 256


FULL_PEERS = PeerShape()
QUICK_PEERS = PeerShape(num_requests=6, output_median=4, output_sigma=0.8, output_cap=12)


def peer_output_lengths(shape: PeerShape = FULL_PEERS, seed: int = 0) -> list[int]:
    """Skewed (lognormal) output lengths, one per chat prompt."""
    specs = make_workload(shape.num_requests, fixed(1),
                          lognormal(shape.output_median, shape.output_sigma, cap=shape.output_cap),
                          max_tokens="output_len", seed=seed)
    return [s.output_len for s in specs]


def peer_prompts(tokenizer, shape: PeerShape = FULL_PEERS, vocab_size: int | None = None,
                 seed: int = 0) -> list[list[int]]:
    """The chat prompts as token ids (chat template applied), or random ids without
    a tokenizer (the tiny test model): lengths 16–48."""
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        rng = np.random.default_rng(seed)
        return [rng.integers(2, vocab_size, size=int(rng.integers(16, 49))).tolist()
                for _ in range(shape.num_requests)]
    prompts = []
    for question in chat_questions(shape.num_requests):
        text = tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                             add_generation_prompt=True, tokenize=False)
        prompts.append(list(tokenizer(text, add_special_tokens=False).input_ids))
    return prompts


# --------------------------------------------------------------------- prefix caching

@dataclass(frozen=True)
class PrefixShape:
    """Requests that all start with the same long system prompt (a support bot, a RAG
    template, a few-shot header), followed by each user's own short question."""

    num_requests: int = 48
    shared_prefix: int = 384         # tokens every prompt starts with (24 blocks of 16)
    question_median: int = 24        # the request's own part: lognormal, sigma 0.5
    question_cap: int = 64
    output_median: int = 24          # lognormal, sigma 0.5
    output_cap: int = 64


FULL_PREFIX = PrefixShape()
QUICK_PREFIX = PrefixShape(num_requests=8, shared_prefix=48, question_median=8,
                           question_cap=16, output_median=4, output_cap=8)


def prefix_workload(shape: PrefixShape = FULL_PREFIX, seed: int = 0) -> list[RequestSpec]:
    """A burst of requests whose prompts are `shared_prefix` + their own question.

    `prompt_len` counts both parts; `prefix_prompts` builds the token ids.
    """
    specs = make_workload(shape.num_requests,
                          lognormal(shape.question_median, 0.5, cap=shape.question_cap),
                          lognormal(shape.output_median, 0.5, cap=shape.output_cap),
                          arrival="burst", max_tokens="output_len", seed=seed)
    return [replace(s, prompt_len=shape.shared_prefix + s.prompt_len) for s in specs]


def prefix_prompts(specs: list[RequestSpec], shape: PrefixShape, vocab_size: int,
                   tokenizer=None, seed: int = 0) -> list[list[int]]:
    """Token ids: the same first `shape.shared_prefix` ids in every prompt, then a
    different question per request (text windows with a tokenizer, random ids without)."""
    questions = [replace(s, prompt_len=s.prompt_len - shape.shared_prefix) for s in specs]
    header = RequestSpec("header", shape.shared_prefix, 1, 1)
    if tokenizer is not None:
        shared = prompt_token_ids([header], vocab_size, tokenizer, seed)[0]
        # start the questions elsewhere in the passage, so they differ from the header
        own = prompt_token_ids([header] + questions, vocab_size, tokenizer, seed)[1:]
    else:
        rng = np.random.default_rng(seed + 1)
        shared = rng.integers(2, vocab_size, size=shape.shared_prefix).tolist()
        own = prompt_token_ids(questions, vocab_size, None, seed)
    return [shared + q for q in own]


# --------------------------------------------------------------------- speculative decoding

@dataclass(frozen=True)
class SpeculativeShape:
    """Two tasks for prompt-lookup speculation: one whose answer copies the prompt, one
    that does not (where the guesses mostly fail and only cost time)."""

    num_requests: int = 8            # per task
    copy_passage: int = 96           # tokens of text the copy task asks to repeat
    copy_output: int = 96
    free_output: int = 64
    max_num_seqs: int = 4            # speculation pays when decode is memory-bound: small batches
    num_speculative_tokens: int = 4


FULL_SPECULATIVE = SpeculativeShape()
QUICK_SPECULATIVE = SpeculativeShape(num_requests=3, copy_passage=16, copy_output=8,
                                     free_output=6, max_num_seqs=2, num_speculative_tokens=3)

COPY_INSTRUCTION = "Repeat the following text exactly, word for word:\n\n{}"


def speculative_prompts(shape: SpeculativeShape, vocab_size: int, tokenizer=None,
                        seed: int = 0) -> dict[str, tuple[list[list[int]], int]]:
    """{"copy": (prompts, max_tokens), "free-form": (prompts, max_tokens)}.

    With a chat tokenizer, "copy" asks the model to repeat a window of the passage and
    "free-form" asks the peer benchmark's open questions. Without one (the tiny test
    model) both are seeded random ids; "copy" then holds its text twice, so the
    proposer still finds matches."""
    windows = [RequestSpec(f"copy-{i}", shape.copy_passage, 1, 1) for i in range(shape.num_requests)]
    texts = prompt_token_ids(windows, vocab_size, tokenizer, seed)
    if tokenizer is None or not getattr(tokenizer, "chat_template", None):
        rng = np.random.default_rng(seed + 2)
        free = [rng.integers(2, vocab_size, size=24).tolist() for _ in range(shape.num_requests)]
        return {"copy": ([t + t for t in texts], shape.copy_output),
                "free-form": (free, shape.free_output)}

    def chat(question: str) -> list[int]:
        text = tokenizer.apply_chat_template([{"role": "user", "content": question}],
                                             add_generation_prompt=True, tokenize=False)
        return list(tokenizer(text, add_special_tokens=False).input_ids)

    copy = [chat(COPY_INSTRUCTION.format(tokenizer.decode(t))) for t in texts]
    free = [chat(q) for q in chat_questions(shape.num_requests)]
    return {"copy": (copy, shape.copy_output), "free-form": (free, shape.free_output)}
