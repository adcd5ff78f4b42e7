"""OpenAI-style errors: every refusal says what was wrong and what to change.

    HTTP 400  {"error": {"message": "max_tokens must be >= 1, got 0",
                         "type": "invalid_request_error", "param": "max_tokens",
                         "code": null}}

Status codes: 400 bad value or malformed request, 401 missing/wrong API key, 404 unknown
model or path, 413 body too large, 422 a feature minillm does not implement, 503 queue
full (with Retry-After) or shutting down. A refused request never runs a step, so it
cannot disturb anybody else's.

Who checks what, once: the HTTP layer checks the request's shape (`protocol.py`: types,
unknown and unimplemented fields); `SamplingParams` checks the sampling values and the
engine checks tokens and lengths (`minillm/engine/`). Their errors carry the parameter
they refused (`InvalidValue.param`), which `from_engine_error` turns into the request's
field name.
"""

from __future__ import annotations

from fastapi.responses import JSONResponse

ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error",
               404: "not_found_error", 413: "invalid_request_error",
               422: "invalid_request_error", 500: "server_error", 503: "service_unavailable"}


class APIError(Exception):
    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, headers: dict | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.code, self.headers = code, headers

    def body(self) -> dict:
        return error_body(self.status, self.message, self.param, self.code)

    def response(self) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers)


def error_body(status: int, message: str, param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": ERROR_TYPES.get(status, "server_error"),
                      "param": param, "code": code}}


def from_validation_error(error, model_cls) -> APIError:
    """A pydantic ValidationError → one 400 that names the first offending field."""
    first = error.errors()[0]
    param = ".".join(str(part) for part in first["loc"]) or None
    kind = first["type"]
    if kind == "extra_forbidden":
        fields = ", ".join(sorted(model_cls.model_fields))
        return APIError(400, f"unknown field {param!r}: minillm does not accept it; remove it "
                        f"(accepted fields: {fields})", param=param, code="unknown_field")
    if kind == "missing":
        return APIError(400, f"{param} is required", param=param, code="missing_field")
    got = first.get("input")
    return APIError(400, f"{param}: {first['msg'].lower()}, got {got!r}", param=param)


def from_engine_error(error: Exception, fields: dict | None = None) -> APIError:
    """A ValueError/TypeError from SamplingParams or the engine → a 400 naming the
    request's field: `fields` maps the engine's parameter names to the request's (a
    chat's prompt is its "messages"; its max_tokens may be "max_completion_tokens")."""
    param = getattr(error, "param", None)
    if param is not None:
        param = param.split("[")[0]                      # stop_token_ids[2] → stop_token_ids
        names = fields or {}
        if param == "prompt_token_ids":                  # a token-id prompt is the "prompt"
            param = "prompt"
        param = names.get(param, param)                  # ... which a chat calls "messages"
    return APIError(400, str(error), param=param, code=getattr(error, "code", None))
