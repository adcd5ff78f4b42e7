"""Request → token ids, exactly as `LLM.generate` and `LLM.chat` tokenize.

The server tokenizes before the request reaches the engine loop, for two reasons: the
engine loop should spend its time stepping, not tokenizing; and a prompt that is empty
or longer than the context must get its 400 before any response header is sent. The
engine then receives `{"prompt_token_ids": [...]}` and counts exactly these tokens —
which is what `usage.prompt_tokens` reports.

`max_tokens` is settled here too. OpenAI's defaults: 16 for /v1/completions, "as many
as fit" for chat. A request that asks for more than fits in `max_model_len` is refused
(as OpenAI and vLLM do) rather than silently cut short.
"""

from __future__ import annotations

from dataclasses import dataclass

from minillm.serving.errors import APIError
from minillm.serving.protocol import ChatCompletionRequest, CompletionRequest

DEFAULT_COMPLETION_MAX_TOKENS = 16


@dataclass
class Prompt:
    token_ids: list[int]
    text: str | None
    max_tokens: int


class PromptBuilder:
    def __init__(self, tokenizer, max_model_len: int, vocab_size: int):
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.vocab_size = vocab_size

    def for_completion(self, request: CompletionRequest) -> Prompt:
        prompt = request.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise APIError(422, f"prompt holds {len(prompt)} prompts: minillm takes one "
                               "per request (send them as separate requests)", param="prompt",
                               code="unsupported_value")
            prompt = prompt[0]
        if isinstance(prompt, str):
            if not prompt:
                raise APIError(400, "prompt is empty: give at least one character",
                               param="prompt")
            token_ids, text = self._encode(prompt, add_special_tokens=True), prompt
        else:
            token_ids, text = list(prompt), None
            bad = [t for t in token_ids if not 0 <= t < self.vocab_size]
            if bad:
                raise APIError(400, f"prompt token id {bad[0]} is outside the vocabulary "
                               f"(0..{self.vocab_size - 1})", param="prompt")
        if not token_ids:
            raise APIError(400, "prompt has no tokens: give at least one", param="prompt")
        return self._with_max_tokens(token_ids, text, request.max_tokens,
                                     DEFAULT_COMPLETION_MAX_TOKENS, "max_tokens", "prompt")

    def for_chat(self, request: ChatCompletionRequest) -> Prompt:
        if not request.messages:
            raise APIError(400, "messages is empty: send at least one message",
                           param="messages")
        if self.tokenizer is None or not getattr(self.tokenizer, "chat_template", None):
            raise APIError(400, "this model has no chat template: use /v1/completions",
                           param="messages")
        conversation = [{"role": m.role, "content": m.text()} for m in request.messages]
        text = self.tokenizer.apply_chat_template(conversation, add_generation_prompt=True,
                                                  tokenize=False)
        token_ids = self._encode(text, add_special_tokens=False)
        limit, param = request.max_completion_tokens, "max_completion_tokens"
        if limit is None:
            limit, param = request.max_tokens, "max_tokens"
        return self._with_max_tokens(token_ids, text, limit, None, param, "messages")

    def _encode(self, text: str, add_special_tokens: bool) -> list[int]:
        if self.tokenizer is None:
            raise APIError(400, "this model has no tokenizer: send prompt as a list of "
                           "token ids", param="prompt")
        return list(self.tokenizer(text, add_special_tokens=add_special_tokens).input_ids)

    def _with_max_tokens(self, token_ids, text, asked, default, param, prompt_param) -> Prompt:
        room = self.max_model_len - len(token_ids)
        if room < 1:
            raise APIError(400, f"the prompt has {len(token_ids)} tokens but this model's "
                           f"context is {self.max_model_len} tokens: shorten the prompt",
                           param=prompt_param, code="context_length_exceeded")
        if asked is None:
            return Prompt(token_ids, text, room if default is None else min(default, room))
        if asked > room:
            raise APIError(400, f"this model's context is {self.max_model_len} tokens; you asked "
                           f"for {len(token_ids)} prompt + {asked} output tokens: lower "
                           f"{param} to at most {room} or shorten the prompt", param=param,
                           code="context_length_exceeded")
        return Prompt(token_ids, text, asked)
