"""Token usage from OpenAI and Anthropic responses: dicts or SDK objects alike."""

from dataclasses import dataclass
from typing import Any, Optional

from ._stubs import common_pb2

__all__ = ["Usage", "usage_from_openai", "usage_from_anthropic", "usage_from_response"]


@dataclass
class Usage:
    """Tokens one or more model calls spent, by kind (ctxguard's TokenUsage).

    input_tokens are prompt tokens at the full price (not read from or written to a prompt
    cache); cache_read_tokens and cache_write_tokens are counted apart from them."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0
    cost_micros: int = 0

    @property
    def total(self) -> int:
        return (self.input_tokens + self.output_tokens + self.cache_read_tokens
                + self.cache_write_tokens)

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.input_tokens + other.input_tokens,
                     self.output_tokens + other.output_tokens,
                     self.cache_read_tokens + other.cache_read_tokens,
                     self.cache_write_tokens + other.cache_write_tokens,
                     self.reasoning_tokens + other.reasoning_tokens,
                     self.cost_micros + other.cost_micros)

    def to_proto(self) -> "common_pb2.TokenUsage":
        return common_pb2.TokenUsage(
            input_tokens=self.input_tokens, output_tokens=self.output_tokens,
            cache_read_tokens=self.cache_read_tokens, cache_write_tokens=self.cache_write_tokens,
            reasoning_tokens=min(self.reasoning_tokens, self.output_tokens),
            cost_micros=self.cost_micros)

    @classmethod
    def from_proto(cls, msg: "common_pb2.TokenUsage") -> "Usage":
        return cls(msg.input_tokens, msg.output_tokens, msg.cache_read_tokens,
                   msg.cache_write_tokens, msg.reasoning_tokens, msg.cost_micros)


_MISSING = object()


def _get(obj: Any, name: str) -> Any:
    """obj[name] for a mapping, else getattr(obj, name); None when absent."""
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    value = getattr(obj, name, _MISSING)
    if value is _MISSING:
        getter = getattr(obj, "get", None)  # mapping-like objects
        if callable(getter):
            try:
                return getter(name)
            except Exception:  # noqa: BLE001
                return None
        return None
    return value


def _int(v: Any) -> int:
    if v is None:
        return 0
    if isinstance(v, bool):
        raise TypeError("a token count is an integer, not a bool")
    return int(v)


def _usage_of(response: Any) -> Any:
    """The `usage` part of a response, or the response itself when it is a usage."""
    u = _get(response, "usage")
    if u is not None:
        return u
    for k in ("prompt_tokens", "input_tokens", "completion_tokens", "output_tokens"):
        if _get(response, k) is not None:
            return response
    raise ValueError("no token usage in this response (no `usage`; streamed OpenAI "
                     "responses need stream_options={'include_usage': True})")


def usage_from_openai(response: Any) -> Usage:
    """Usage of an OpenAI Chat Completions or Responses API response (or its `usage`).

    Chat: prompt_tokens includes prompt_tokens_details.cached_tokens, so input =
    prompt - cached and cache_read = cached. Responses API: the same with input_tokens and
    input_tokens_details.cached_tokens. Reasoning tokens are part of the output."""
    u = _usage_of(response)
    prompt = _get(u, "prompt_tokens")
    if prompt is not None:
        cached = _int(_get(_get(u, "prompt_tokens_details"), "cached_tokens"))
        output = _int(_get(u, "completion_tokens"))
        reasoning = _int(_get(_get(u, "completion_tokens_details"), "reasoning_tokens"))
    else:
        prompt = _get(u, "input_tokens")
        if prompt is None and _get(u, "output_tokens") is None:
            raise ValueError("not an OpenAI usage: neither prompt_tokens nor input_tokens")
        cached = _int(_get(_get(u, "input_tokens_details"), "cached_tokens"))
        output = _int(_get(u, "output_tokens"))
        reasoning = _int(_get(_get(u, "output_tokens_details"), "reasoning_tokens"))
    prompt = _int(prompt)
    cached = min(cached, prompt)
    return Usage(input_tokens=prompt - cached, output_tokens=output, cache_read_tokens=cached,
                 reasoning_tokens=min(reasoning, output))


def usage_from_anthropic(response: Any) -> Usage:
    """Usage of an Anthropic Messages response (or its `usage`): input_tokens excludes the
    cache, which comes as cache_read_input_tokens and cache_creation_input_tokens."""
    u = _usage_of(response)
    if _get(u, "input_tokens") is None and _get(u, "output_tokens") is None:
        raise ValueError("not an Anthropic usage: no input_tokens or output_tokens")
    return Usage(input_tokens=_int(_get(u, "input_tokens")),
                 output_tokens=_int(_get(u, "output_tokens")),
                 cache_read_tokens=_int(_get(u, "cache_read_input_tokens")),
                 cache_write_tokens=_int(_get(u, "cache_creation_input_tokens")))


def detect_provider(response: Any) -> Optional[str]:
    """"openai", "anthropic", or None when the response carries no usage we know."""
    try:
        u = _usage_of(response)
    except ValueError:
        return None
    if _get(u, "prompt_tokens") is not None or _get(u, "completion_tokens") is not None:
        return "openai"
    if (_get(u, "cache_creation_input_tokens") is not None
            or _get(u, "cache_read_input_tokens") is not None
            or _get(response, "type") == "message" or _get(response, "stop_reason") is not None):
        return "anthropic"
    if (_get(u, "input_tokens_details") is not None or _get(u, "output_tokens_details") is not None
            or _get(response, "object") == "response"):
        return "openai"
    if _get(u, "input_tokens") is not None or _get(u, "output_tokens") is not None:
        # {input_tokens, output_tokens} alone reads the same either way (nothing cached).
        return "anthropic"
    return None


def usage_from_response(response: Any) -> Usage:
    """Usage of an OpenAI or Anthropic response, whichever it is."""
    if isinstance(response, Usage):
        return response
    kind = detect_provider(response)
    if kind == "openai":
        return usage_from_openai(response)
    if kind == "anthropic":
        return usage_from_anthropic(response)
    raise ValueError("cannot tell the provider of this response: no OpenAI or Anthropic usage")
