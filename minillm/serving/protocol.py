"""What a request may contain: OpenAI's fields, a few of vLLM's, each checked.

A benchmark client or SDK sends more fields than it needs (`n: 1`, `logprobs: null`,
`repetition_penalty: 1.0`, ...). The rule here:

* a field minillm implements is checked for its type here (400, `param` names it), and
  for its range where the engine takes it (`SamplingParams`, the engine's prompt
  checks: `errors.from_engine_error` names the field);
* a field minillm does not implement is accepted at its neutral value (`n: 1`,
  `stop: null`, `presence_penalty: 0`) and refused otherwise (422, says what to send);
* a field nobody defined is refused (400): a typo such as `max_token` must not be
  silently ignored while the request runs with the default.

Types are strict (`"max_tokens": "16"` or `true` is an error, not a conversion).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from minillm.serving.errors import APIError

StrictConfig = ConfigDict(extra="forbid", strict=True)


class StreamOptions(BaseModel):
    model_config = StrictConfig
    include_usage: bool = False           # one last chunk with the token counts
    continuous_usage_stats: bool = False  # vLLM: usage in every chunk (not implemented)


class SamplingRequest(BaseModel):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model_config = StrictConfig
    model: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None      # OpenAI's default is 1.0 (sampling)
    top_p: float | None = None
    top_k: int | None = None              # vLLM extension
    seed: int | None = None
    stop_token_ids: list[int] | None = None   # vLLM extension
    ignore_eos: bool = False              # vLLM extension: always run to max_tokens
    stream: bool = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool = False        # vLLM extension: token ids next to the text
    priority: int = 0                     # vLLM extension (with --scheduling-policy priority)
    user: str | None = None               # accepted, unused
    # accepted only at their neutral value
    n: int = 1
    stop: str | list[str] | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    min_tokens: int | None = None


class CompletionRequest(SamplingRequest):
    prompt: str | list[int] | list[str] | list[list[int]]
    echo: bool = False
    logprobs: int | None = None
    best_of: int | None = None
    suffix: str | None = None


class TextPart(BaseModel):
    model_config = StrictConfig
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    model_config = StrictConfig
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[TextPart]
    name: str | None = None

    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ChatCompletionRequest(SamplingRequest):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = None


# neutral value of every accepted-but-unimplemented field, and what to do instead
NEUTRAL = {
    "n": ((1,), "minillm returns one choice per request: send n=1 (or send n requests)"),
    "stop": ((None, [], ""), "stop strings are not supported: use stop_token_ids"),
    "presence_penalty": ((None, 0, 0.0), "penalties are not supported: send 0 or leave it out"),
    "frequency_penalty": ((None, 0, 0.0), "penalties are not supported: send 0 or leave it out"),
    "repetition_penalty": ((None, 1, 1.0), "repetition_penalty is not supported: send 1.0"),
    "logit_bias": ((None, {}), "logit_bias is not supported: leave it out"),
    "min_tokens": ((None, 0), "min_tokens is not supported: send 0 or leave it out"),
    "echo": ((False,), "echo is not supported: send false"),
    "logprobs": ((None, False, 0), "logprobs are not supported: leave them out"),
    "top_logprobs": ((None, 0), "logprobs are not supported: leave them out"),
    "best_of": ((None, 1), "best_of is not supported: send 1 or leave it out"),
    "suffix": ((None, ""), "suffix (insertion) is not supported: leave it out"),
}


def check_supported(request: SamplingRequest) -> None:
    """422 for a field set to a value minillm does not implement."""
    for name, (neutral, advice) in NEUTRAL.items():
        if name in type(request).model_fields:
            value = getattr(request, name)
            if not any(value == v and type(value) is type(v) for v in neutral):
                raise APIError(422, f"{name}={value!r}: {advice}", param=name,
                               code="unsupported_value")
    options = request.stream_options
    if options is not None and not request.stream:
        raise APIError(400, "stream_options is only allowed with stream=true",
                       param="stream_options")
    if options is not None and options.continuous_usage_stats:
        raise APIError(422, "stream_options.continuous_usage_stats is not supported: "
                       "use include_usage", param="stream_options.continuous_usage_stats",
                       code="unsupported_value")
