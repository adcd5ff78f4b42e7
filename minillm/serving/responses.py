"""OpenAI's response shapes, streamed as server-sent events (服务器推送事件, SSE).

A streamed response is one HTTP response that stays open; each event is a line
`data: <json>` followed by a blank line, and the last one is `data: [DONE]`:

    data: {"id":"cmpl-7","object":"text_completion","choices":[{"index":0,"text":" Paris",...}]}

    data: {"id":"cmpl-7",...,"choices":[{"index":0,"text":".","finish_reason":"stop"}]}

    data: {"id":"cmpl-7",...,"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":2,...}}

    data: [DONE]

Chat chunks carry a `delta` instead of `text`: the first one `{"role": "assistant",
"content": ""}`, then `{"content": "..."}`. The usage chunk comes only when the client
asked with `stream_options: {"include_usage": true}`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

DONE = "data: [DONE]\n\n"


def sse(payload: dict) -> str:
    """One server-sent event carrying `payload` as compact JSON."""
    return f"data: {json.dumps(payload, separators=(',', ':'), ensure_ascii=False)}\n\n"


def text_delta(sent: str, text: str, finished: bool) -> str:
    """The part of the decoded `text` that the client has not been sent yet.

    A byte-level tokenizer can split one character (an emoji, a Chinese character)
    across tokens; decoding half of it gives U+FFFD '�'. While the request runs, a
    trailing '�' is held back: the next token usually completes the character. Once the
    request finished, everything left goes out.
    """
    new = text[len(sent):]
    return new if finished else new.rstrip("\ufffd")


@dataclass
class ResponseShape:
    """Everything a response needs besides the tokens: which endpoint, which request."""

    chat: bool
    request_id: str
    model: str
    created: int
    prompt_token_ids: list[int]
    return_token_ids: bool = False
    include_usage: bool = False

    @property
    def id(self) -> str:
        return ("chatcmpl-" if self.chat else "cmpl-") + self.request_id

    def usage(self, num_output_tokens: int) -> dict:
        prompt = len(self.prompt_token_ids)
        return {"prompt_tokens": prompt, "completion_tokens": num_output_tokens,
                "total_tokens": prompt + num_output_tokens}

    def _envelope(self, chunk: bool) -> dict:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat \
            else "text_completion"
        return {"id": self.id, "object": kind, "created": self.created, "model": self.model}

    def full(self, text: str, token_ids: list[int], finish_reason: str | None) -> dict:
        """The whole answer (stream=false)."""
        choice = ({"index": 0, "message": {"role": "assistant", "content": text}} if self.chat
                  else {"index": 0, "text": text})
        choice.update(logprobs=None, finish_reason=finish_reason)
        body = {**self._envelope(chunk=False), "choices": [choice],
                "usage": self.usage(len(token_ids))}
        self._add_token_ids(body, choice, token_ids)
        return body

    def chunk(self, text: str, new_token_ids: list[int], finish_reason: str | None,
              first: bool) -> dict:
        """One streamed piece: the new text (and, if asked, the new token ids)."""
        if self.chat:
            delta = ({"role": "assistant", "content": text} if first
                     else {"content": text} if text else {})
            choice = {"index": 0, "delta": delta}
        else:
            choice = {"index": 0, "text": text}
        choice.update(logprobs=None, finish_reason=finish_reason)
        body = {**self._envelope(chunk=True), "choices": [choice]}
        if self.include_usage:
            body["usage"] = None
        self._add_token_ids(body, choice, new_token_ids, with_prompt=first)
        return body

    def usage_chunk(self, num_output_tokens: int) -> dict:
        return {**self._envelope(chunk=True), "choices": [],
                "usage": self.usage(num_output_tokens)}

    def _add_token_ids(self, body, choice, token_ids, with_prompt: bool = True) -> None:
        """vLLM's `return_token_ids` extension: the exact tokens next to the text."""
        if not self.return_token_ids:
            return
        choice["token_ids"] = list(token_ids)
        if with_prompt:
            (body if self.chat else choice)["prompt_token_ids"] = list(self.prompt_token_ids)
