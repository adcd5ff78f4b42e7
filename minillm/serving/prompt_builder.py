"""Request → token ids, exactly as `LLM.generate` and `LLM.chat` tokenize, and max_tokens.

The server tokenizes before the request reaches the engine loop: the engine loop should
spend its time stepping, not tokenizing, and the tokens are what `usage.prompt_tokens`
reports. The engine then receives `{"prompt_token_ids": [...]}` and checks them (in the
vocabulary, not empty, short enough for the context) like any other prompt; its refusal
comes back as a 400 before any response header is sent.

`max_tokens` is settled here. OpenAI's defaults: 16 for /v1/completions, "as many as
fit" for chat. A request that asks for more than fits in `max_model_len` is refused (as
OpenAI and vLLM do) rather than silently cut short — that is the HTTP API's promise,
not the engine's (`LLM.generate` stops at the context instead, with "length").
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
    fields: dict          # the engine's parameter name → the request field that set it


class PromptBuilder:
    def __init__(self, tokenizer, max_model_len: int):
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len

    def for_completion(self, request: CompletionRequest) -> Prompt:
        prompt = request.prompt
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            if len(prompt) != 1:
                raise APIError(422, f"prompt holds {len(prompt)} prompts: minillm takes one "
                               "per request (send them as separate requests)", param="prompt",
                               code="unsupported_value")
            prompt = prompt[0]
        if isinstance(prompt, str):
            token_ids, text = self._encode(prompt, add_special_tokens=True), prompt
        else:
            token_ids, text = list(prompt), None
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
        """The request's max_tokens: asked, else the default capped by the room left; a
        prompt with no room left goes on to the engine, which says so."""
        room = self.max_model_len - len(token_ids)
        fields = {"max_tokens": param, "prompt": prompt_param}
        if asked is None:
            fit = room if default is None else min(default, room)
            return Prompt(token_ids, text, max(fit, 1), fields)
        if 0 < room < asked:
            raise APIError(400, f"this model's context is {self.max_model_len} tokens; you asked "
                           f"for {len(token_ids)} prompt + {asked} output tokens: lower "
                           f"{param} to at most {room} or shorten the prompt", param=param,
                           code="context_length_exceeded")
        return Prompt(token_ids, text, asked, fields)
