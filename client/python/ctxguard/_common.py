"""What Client and AsyncClient share: request building, the retry policy, conversations."""

import json
import os
import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
from google.protobuf import message as _message

from ._stubs import admin_pb2, admin_pb2_grpc, budget_pb2, budget_pb2_grpc, common_pb2, \
    context_pb2, context_pb2_grpc
from .scope import Scope, parse_scope
from .usage import Usage

DEFAULT_TIMEOUT = 10.0
# Channel options: reconnect quickly after a server restart (gRPC's default backoff grows
# to two minutes), so that retried calls find the new server within their deadline.
CHANNEL_OPTIONS: List[Tuple[str, Any]] = [
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]

# RPC name -> (service, request class).
METHODS: Dict[str, Tuple[str, Any]] = {}
for _svc, _mod, _names in (
        ("budget", budget_pb2, ("SetBudget", "GetBudget", "CheckBudget", "Reserve", "Commit",
                                "Release", "RecordUsage", "CloseScope", "GetUsage", "ListScopes",
                                "GetUsageHistory", "WatchUsage", "ResolveApproval", "GetApproval", "ListApprovals")),
        ("context", context_pb2, ("CountTokens", "Compress", "Summarize", "GetArtifact",
                                  "ListArtifacts", "GetHistory", "SearchHistory",
                                  "DeleteSession", "ValidateContext",
                                  "GetCompressionStats")),
        ("admin", admin_pb2, ("CreateTenant", "GetTenant", "ListTenants", "CreateApiKey",
                              "ListApiKeys", "RevokeApiKey", "WhoAmI", "UpdateTenantSettings",
                              "Ping"))):
    for _n in _names:
        METHODS[_n] = (_svc, getattr(_mod, _n + "Request"))

# Calls that may be repeated after UNAVAILABLE without changing the outcome (proto docs):
# reads; Commit (idempotent by reservation id: a repeat with the same usage is `replayed`);
# Release, CloseScope, ResolveApproval (same decision: `replayed`); UpdateTenantSettings
# (replaces the settings whole). Conditional ones are in retryable().
ALWAYS_RETRY = frozenset({
    "GetBudget", "CheckBudget", "GetUsage", "ListScopes", "GetUsageHistory", "GetApproval", "ListApprovals",
    "CountTokens", "ValidateContext", "GetArtifact", "ListArtifacts", "GetHistory",
    "SearchHistory", "GetCompressionStats", "WhoAmI", "GetTenant", "ListTenants", "ListApiKeys", "Ping",
    "Commit", "Release", "CloseScope", "ResolveApproval", "UpdateTenantSettings"})


# UNAVAILABLE, and CANCELLED, which a shutting-down server answers to the calls it drops
# (this package never cancels a unary call itself).
RETRY_CODES = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED})


def retryable(method: str, req: Any) -> bool:
    """Whether `req` may be sent again after UNAVAILABLE."""
    if method in ALWAYS_RETRY:
        return True
    if method in ("Reserve", "RecordUsage"):  # a retry with the same key is `replayed`
        return bool(req.idempotency_key)
    if method == "SetBudget":  # replaces the settings whole; not with a version check
        return req.expected_version == 0
    if method == "Compress":  # stateless Compress changes nothing on the server
        return not req.session_id
    return False  # Summarize (may call an LLM), CreateTenant, CreateApiKey, RevokeApiKey


@dataclass
class RetryPolicy:
    """Retries of UNAVAILABLE for the calls retryable() allows: up to `max_attempts` calls,
    sleeping initial_backoff * 2**n (with jitter, at most max_backoff, at least the server's
    RetryInfo delay when it sends one) in between, all within the call's deadline."""

    max_attempts: int = 30
    initial_backoff: float = 0.05
    max_backoff: float = 1.0

    def backoff(self, attempt: int, hint: Optional[float] = None) -> float:
        d = min(self.max_backoff, self.initial_backoff * (2 ** attempt))
        d = d * random.uniform(0.5, 1.0)
        if hint:
            d = max(d, min(hint, self.max_backoff))
        return d


def new_idempotency_key() -> str:
    return "py-" + uuid.uuid4().hex


def env_target() -> str:
    t = os.environ.get("CTXGUARD_TARGET", "")
    if not t:
        raise ValueError("no target: pass Client(target) or set CTXGUARD_TARGET")
    return t


def env_key() -> str:
    return os.environ.get("CTXGUARD_KEY", "")


def credentials(tls: Union[bool, grpc.ChannelCredentials, None],
                root_certificates: Optional[bytes] = None) -> Optional[grpc.ChannelCredentials]:
    if tls is None or tls is False:
        return None
    if tls is True:
        return grpc.ssl_channel_credentials(root_certificates=root_certificates)
    return tls


def connect(client: Any, channels: Any, target: Optional[str], api_key: Optional[str],
            admin_key: Optional[str], timeout: float,
            tls: Union[bool, grpc.ChannelCredentials], root_certificates: Optional[bytes],
            retry: Optional["RetryPolicy"], options: Sequence[Tuple[str, Any]]) -> None:
    """Sets up a Client or AsyncClient (their constructors' arguments): its settings, its
    channel from `channels` (the module grpc or grpc.aio: the same channel constructors) and
    a stub per service."""
    client.target = target or env_target()
    client.api_key = api_key if api_key is not None else env_key()
    client.admin_key = admin_key
    client.timeout = timeout
    client.retry = retry or RetryPolicy()
    opts = list(CHANNEL_OPTIONS) + list(options)
    creds = credentials(tls, root_certificates)
    client._channel = (channels.secure_channel(client.target, creds, options=opts) if creds
                       else channels.insecure_channel(client.target, options=opts))
    client._stubs = {"budget": budget_pb2_grpc.BudgetServiceStub(client._channel),
                     "context": context_pb2_grpc.ContextServiceStub(client._channel),
                     "admin": admin_pb2_grpc.AdminServiceStub(client._channel)}


# ------------------------------------------------------------------ requests --------

def _enum_value(fd: Any, value: Any) -> int:
    """An enum field's number from an int, a full name, or a short name ("HARD")."""
    if isinstance(value, int):
        return value
    if not isinstance(value, str):
        raise TypeError(f"{fd.name}: an enum value is an int or a name, not {value!r}")
    names = fd.enum_type.values_by_name
    want = value.upper()
    if want in names:
        return names[want].number
    for name, v in names.items():
        if name.endswith("_" + want):
            return v.number
    raise ValueError(f"{fd.name}: unknown value {value!r} "
                     f"(one of {', '.join(sorted(names))})")


def _is_repeated(fd: Any) -> bool:
    # FieldDescriptor.label is deprecated in recent protobuf releases (is_repeated replaces
    # it); protobuf 3.21 has only label.
    rep = getattr(fd, "is_repeated", None)
    if isinstance(rep, bool):
        return rep
    return bool(fd.label == fd.LABEL_REPEATED)


def fill(msg: _message.Message, fields: Mapping[str, Any]) -> _message.Message:
    """Sets fields of a proto message from Python values: scopes as paths or Scope, enums by
    name, sub-messages as dicts or messages, TokenUsage as Usage. Unknown names fail."""
    desc = msg.DESCRIPTOR
    for name, value in fields.items():
        if value is None:
            continue
        fd = desc.fields_by_name.get(name)
        if fd is None:
            raise TypeError(f"{desc.name} has no field {name!r}")
        repeated = _is_repeated(fd)
        if fd.message_type is not None and not repeated:
            sub = getattr(msg, name)
            if fd.message_type.full_name == "ctxguard.v1.Scope":
                sub.CopyFrom(parse_scope(value).to_proto())
            elif isinstance(value, Usage):
                sub.CopyFrom(value.to_proto())
            elif isinstance(value, _message.Message):
                sub.CopyFrom(value)
            elif isinstance(value, Mapping):
                fill(sub, value)
            else:
                raise TypeError(f"{desc.name}.{name}: a message or a dict, not {value!r}")
            continue
        if repeated:
            target = getattr(msg, name)
            del target[:]
            for item in value:
                if fd.message_type is not None:
                    if isinstance(item, _message.Message):
                        target.add().CopyFrom(item)
                    elif isinstance(item, Mapping):
                        fill(target.add(), item)
                    elif isinstance(item, (tuple, list)):
                        sub_names = [f.name for f in fd.message_type.fields]
                        fill(target.add(), dict(zip(sub_names, item)))
                    else:
                        raise TypeError(f"{desc.name}.{name}: items are messages or dicts")
                elif fd.enum_type is not None:
                    target.append(_enum_value(fd, item))
                else:
                    target.append(item)
            continue
        if fd.enum_type is not None:
            value = _enum_value(fd, value)
        setattr(msg, name, value)
    return msg


def request(method: str, **fields: Any) -> Any:
    return fill(METHODS[method][1](), fields)


def budget_settings(limit_tokens: int = 0, **settings: Any) -> "budget_pb2.BudgetSettings":
    """BudgetSettings; backpressure_tiers as [(threshold_ratio, delay_ms), ...] or dicts."""
    return fill(budget_pb2.BudgetSettings(), dict(settings, limit_tokens=limit_tokens))


# ------------------------------------------------------------- conversations -------

# Each JSON format: the Conversation field, the request body's key for the messages and the
# key of its top-level system prompt (None: the format keeps it in a message).
_FORMATS = {
    "openai": ("openai_json", "messages", None),
    "anthropic": ("anthropic_json", "messages", "system"),
    "responses": ("responses_json", "input", "instructions"),
    "gemini": ("gemini_json", "contents", "systemInstruction"),
}


def conversation(messages: Union[Sequence[Mapping[str, Any]], str], *, format: str = "openai",
                 system: Any = None, tools: Optional[Sequence[Any]] = None,
                 extra: Optional[Mapping[str, Any]] = None) -> "common_pb2.Conversation":
    """A Conversation from message dicts in a provider's format: "openai" (Chat Completions
    messages), "anthropic" (Messages), "responses" (Responses API input items) or "gemini"
    (contents). Sent as a request body ({"messages": [...]}, {"input": [...]} or
    {"contents": [...]} with "tools" and the system prompt: Anthropic "system", Responses
    "instructions", Gemini "systemInstruction", a str given there being made its one text
    part); the server answers in the same shape. A str is sent as it is."""
    fmt = format.lower()
    if fmt not in _FORMATS:
        raise ValueError(f"format must be one of {', '.join(_FORMATS)}, not {format!r}")
    field_name, key, system_key = _FORMATS[fmt]
    if system is not None and system_key is None:
        raise ValueError("system= is not for format='openai' (it puts the system prompt in a "
                         "message)")
    if isinstance(messages, str):
        text = messages
    else:
        obj: Dict[str, Any] = dict(extra or {})
        obj[key] = list(messages)
        if system is not None:
            if fmt == "gemini" and isinstance(system, str):
                system = {"parts": [{"text": system}]}
            obj[system_key] = system
        if tools:
            obj["tools"] = [t if isinstance(t, Mapping) else _tool_dict(t) for t in tools]
        text = json.dumps(obj, ensure_ascii=False)
    return common_pb2.Conversation(**{field_name: text})


def _tool_dict(t: Any) -> Dict[str, Any]:
    raise TypeError(f"a tool is a dict in the provider's format, not {type(t).__name__}")


@dataclass
class TokenCount:
    """CountTokens' answer, plainly."""

    total_tokens: int
    message_tokens: List[int]
    method: str  # EXACT, ESTIMATED or CALIBRATED
    encoding: str  # e.g. O200K_BASE; "" when estimated
    error_bound_tokens: int
    estimate_id: str
    context_window_tokens: int
    response: Any = field(repr=False, default=None)


def token_count(r: "context_pb2.CountTokensResponse") -> TokenCount:
    return TokenCount(
        total_tokens=r.total_tokens, message_tokens=list(r.message_tokens),
        method=context_pb2.TokenCountMethod.Name(r.method).replace("TOKEN_COUNT_METHOD_", ""),
        encoding=context_pb2.TokenEncoding.Name(r.encoding).replace("TOKEN_ENCODING_", "")
        if r.encoding else "",
        error_bound_tokens=r.error_bound_tokens, estimate_id=r.estimate_id,
        context_window_tokens=r.context_window_tokens, response=r)


@dataclass
class CompressResult:
    """Compress's answer: the messages as dicts in the format they were sent in (Responses:
    the input items; Gemini: the contents), the system prompt when the answer has one apart
    (Anthropic system, Responses instructions, Gemini systemInstruction), the report
    (CompressionReport) and the raw answer."""

    messages: List[Dict[str, Any]]
    report: Any
    system: Any = None
    tokens_before: int = 0
    tokens_after: int = 0
    trim_boundary: int = 0
    response: Any = field(repr=False, default=None)


def compress_result(r: "context_pb2.CompressResponse") -> CompressResult:
    which = r.conversation.WhichOneof("content")
    fmt = next((f for f, spec in _FORMATS.items() if spec[0] == which), None)
    if fmt is None:
        raise ValueError(f"Compress answered a {which or 'empty'} conversation, not JSON")
    _, key, system_key = _FORMATS[fmt]
    data = json.loads(getattr(r.conversation, which))
    system = None
    if isinstance(data, str):  # a Responses input given as one string
        data = [{"role": "user", "content": data}]
    elif isinstance(data, dict):
        if system_key is not None:
            system = data.get(system_key)
            if system is None and fmt == "gemini":
                system = data.get("system_instruction")
        data = data.get(key, [])
    return CompressResult(messages=data, report=r.report, system=system,
                          tokens_before=r.report.tokens_before,
                          tokens_after=r.report.tokens_after, trim_boundary=r.trim_boundary,
                          response=r)


def compress_request(messages: Any, model: str, *, format: str, system: Any,
                     tools: Optional[Sequence[Any]], policy: Any,
                     fields: Dict[str, Any]) -> Any:
    req = request("Compress", model=model, **fields)
    req.conversation.CopyFrom(conversation(messages, format=format, system=system, tools=tools))
    if policy is not None:
        if isinstance(policy, Mapping):
            fill(req.policy, policy)
        else:
            req.policy.CopyFrom(policy)
    return req


def count_request(messages: Any, model: str, *, format: str, system: Any,
                  tools: Optional[Sequence[Any]], text: str, fields: Dict[str, Any]) -> Any:
    req = request("CountTokens", model=model, text=text, **fields)
    if messages is not None:
        req.conversation.CopyFrom(conversation(messages, format=format, system=system,
                                               tools=tools))
    return req


def as_scope(scope: Any) -> Scope:
    return parse_scope(scope)


def iter_nonempty(xs: Optional[Iterable[Any]]) -> List[Any]:
    return list(xs or [])
