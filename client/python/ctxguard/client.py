"""Client: the blocking client of BudgetService, ContextService and AdminService."""

import time
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc

from . import _common
from . import recall as _recall
from ._common import CompressResult, RetryPolicy, TokenCount
from ._stubs import admin_pb2, budget_pb2, context_pb2
from .errors import from_rpc_error
from .guard import BackpressureHook, Guard
from .scope import ScopeLike
from .usage import Usage

__all__ = ["Client", "Watch"]

Messages = Union[Sequence[Mapping[str, Any]], str]


class Watch:
    """A WatchUsage stream: iterate for UsageEvent messages; cancel() (or leaving a `with`
    block) ends it. Errors are raised typed (Unavailable when the server went away)."""

    def __init__(self, call: Any) -> None:
        self._call = call

    def __iter__(self) -> Iterator["budget_pb2.UsageEvent"]:
        try:
            for ev in self._call:
                yield ev
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED:
                return
            raise from_rpc_error(e, "WatchUsage") from None

    def cancel(self) -> None:
        self._call.cancel()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cancel()


class Client:
    """A blocking ctxguard client.

    target: "host:port" (default $CTXGUARD_TARGET); api_key: a tenant key (default
    $CTXGUARD_KEY, as ctxguardctl and the TypeScript client); admin_key: for AdminService calls (default: api_key);
    timeout: the default deadline of every call in seconds (retries included); tls: False,
    True (system roots or root_certificates) or grpc.ChannelCredentials; retry: RetryPolicy
    for UNAVAILABLE on calls that are safe to repeat."""

    is_async = False

    def __init__(self, target: Optional[str] = None, api_key: Optional[str] = None, *,
                 admin_key: Optional[str] = None, timeout: float = _common.DEFAULT_TIMEOUT,
                 tls: Union[bool, grpc.ChannelCredentials] = False,
                 root_certificates: Optional[bytes] = None,
                 retry: Optional[RetryPolicy] = None,
                 options: Sequence[Tuple[str, Any]] = ()) -> None:
        self.target: str
        self.api_key: str
        self.admin_key: Optional[str]
        self.timeout: float
        self.retry: RetryPolicy
        self._stubs: Dict[str, Any]
        _common.connect(self, grpc, target, api_key, admin_key, timeout, tls, root_certificates,
                        retry, options)

    # -- plumbing

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _metadata(self, service: str) -> Tuple[Tuple[str, str], ...]:
        key = self.admin_key if service == "admin" and self.admin_key else self.api_key
        return (("authorization", f"Bearer {key}"),) if key else ()

    def _unary(self, method: str, req: Any, timeout: Optional[float] = None) -> Any:
        """One unary call with its deadline, retried on UNAVAILABLE when that is safe."""
        service = _common.METHODS[method][0]
        fn = getattr(self._stubs[service], method)
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        may_retry = _common.retryable(method, req)
        attempt = 0
        while True:
            left = max(deadline - time.monotonic(), 0.001)
            try:
                return fn(req, timeout=left, metadata=self._metadata(service))
            except grpc.RpcError as e:
                err = from_rpc_error(e, method)
            if (may_retry and err.code in _common.RETRY_CODES
                    and attempt + 1 < self.retry.max_attempts):
                pause = self.retry.backoff(attempt, err.retry_delay)
                if time.monotonic() + pause < deadline - 0.01:
                    time.sleep(pause)
                    attempt += 1
                    continue
            raise err

    def call(self, method: str, request: Any = None, *, timeout: Optional[float] = None,
             **fields: Any) -> Any:
        """Any unary RPC by name ("Reserve", "GetHistory", ...) with a request message or
        its fields (scopes as paths, enums by name, sub-messages as dicts)."""
        if request is None:
            request = _common.request(method, **fields)
        return self._unary(method, request, timeout)

    # -- BudgetService

    def set_budget(self, scope: ScopeLike, limit_tokens: int = 0, *,
                   expected_version: int = 0, timeout: Optional[float] = None,
                   **settings: Any) -> "budget_pb2.SetBudgetResponse":
        """Creates or replaces a scope's budget. settings: BudgetSettings fields, e.g.
        mode="HARD"|"SOFT"|"APPROVAL", backpressure_tiers=[(0.9, 750)], warning_ratio=0.8."""
        req = _common.request("SetBudget", scope=scope, expected_version=expected_version)
        req.settings.CopyFrom(_common.budget_settings(limit_tokens, **settings))
        return self._unary("SetBudget", req, timeout)

    def get_budget(self, scope: ScopeLike = None, *,
                   timeout: Optional[float] = None) -> "budget_pb2.GetBudgetResponse":
        return self._unary("GetBudget", _common.request("GetBudget", scope=scope), timeout)

    def check_budget(self, scope: ScopeLike, estimated_tokens: int = 0, *, model: str = "",
                     timeout: Optional[float] = None,
                     **fields: Any) -> "budget_pb2.CheckBudgetResponse":
        """fields: estimated_output_tokens, delay_mode="RETURN_ONLY", dry_run=True."""
        return self._unary("CheckBudget", _common.request(
            "CheckBudget", scope=scope, estimated_tokens=estimated_tokens, model=model,
            **fields), timeout)

    def reserve(self, scope: ScopeLike, tokens: int, *, model: str = "",
                idempotency_key: Optional[str] = None, timeout: Optional[float] = None,
                **fields: Any) -> "budget_pb2.ReserveResponse":
        """The raw Reserve (guard() is the convenient form). An idempotency key is made
        when none is given, so that a retry never holds twice. fields: ttl_ms,
        estimated_output_tokens, estimate_id, delay_mode."""
        return self._unary("Reserve", _common.request(
            "Reserve", scope=scope, tokens=tokens, model=model,
            idempotency_key=idempotency_key or _common.new_idempotency_key(), **fields),
            timeout)

    def commit(self, reservation_id: str, usage: Union[Usage, Mapping[str, int]], *,
               model: str = "", timeout: Optional[float] = None,
               **fields: Any) -> "budget_pb2.CommitResponse":
        """fields: estimate_id, provider_input_tokens, record_if_expired."""
        return self._unary("Commit", _common.request(
            "Commit", reservation_id=reservation_id, usage=usage, model=model, **fields),
            timeout)

    def release(self, reservation_id: str, *,
                timeout: Optional[float] = None) -> "budget_pb2.ReleaseResponse":
        return self._unary("Release", _common.request("Release", reservation_id=reservation_id),
                           timeout)

    def record_usage(self, scope: ScopeLike, usage: Union[Usage, Mapping[str, int]], *,
                     model: str = "", idempotency_key: Optional[str] = None,
                     timeout: Optional[float] = None,
                     **fields: Any) -> "budget_pb2.RecordUsageResponse":
        """Spend without a reservation; an idempotency key is made when none is given."""
        return self._unary("RecordUsage", _common.request(
            "RecordUsage", scope=scope, usage=usage, model=model,
            idempotency_key=idempotency_key or _common.new_idempotency_key(), **fields),
            timeout)

    def close_scope(self, scope: ScopeLike, *,
                    timeout: Optional[float] = None) -> "budget_pb2.CloseScopeResponse":
        return self._unary("CloseScope", _common.request("CloseScope", scope=scope), timeout)

    def get_usage(self, scope: ScopeLike = None, *, depth: int = 0,
                  timeout: Optional[float] = None,
                  **fields: Any) -> "budget_pb2.GetUsageResponse":
        """fields: max_children, include_closed, include_by_model."""
        return self._unary("GetUsage", _common.request("GetUsage", scope=scope, depth=depth,
                                                       **fields), timeout)

    def list_scopes(self, parent: ScopeLike = None, *, timeout: Optional[float] = None,
                    **fields: Any) -> "budget_pb2.ListScopesResponse":
        """fields: level, include_closed, order, page_size, page_token."""
        return self._unary("ListScopes", _common.request("ListScopes", parent=parent, **fields),
                           timeout)

    def usage_history(self, scope: ScopeLike = None, *, timeout: Optional[float] = None,
                      **fields: Any) -> "budget_pb2.GetUsageHistoryResponse":
        """Spend over time: fields from_unix_ms, to_unix_ms, step_seconds (0s: the last
        hour by minute)."""
        return self._unary("GetUsageHistory",
                           _common.request("GetUsageHistory", scope=scope, **fields), timeout)

    def resolve_approval(self, approval_id: str, approve: bool = True, *,
                         granted_tokens: int = 0, decided_by: str = "", note: str = "",
                         timeout: Optional[float] = None
                         ) -> "budget_pb2.ResolveApprovalResponse":
        return self._unary("ResolveApproval", _common.request(
            "ResolveApproval", approval_id=approval_id,
            decision="APPROVED" if approve else "DENIED", granted_tokens=granted_tokens,
            decided_by=decided_by, note=note), timeout)

    def get_approval(self, approval_id: str, *,
                     timeout: Optional[float] = None) -> "budget_pb2.Approval":
        return self._unary("GetApproval", _common.request(
            "GetApproval", approval_id=approval_id), timeout).approval

    def list_approvals(self, scope: ScopeLike = None, *, timeout: Optional[float] = None,
                       **fields: Any) -> "budget_pb2.ListApprovalsResponse":
        """fields: include_descendants, states=["PENDING"], page_size, page_token."""
        return self._unary("ListApprovals", _common.request("ListApprovals", scope=scope,
                                                            **fields), timeout)

    def watch(self, scope: ScopeLike = None, include_descendants: bool = False, *,
              timeout: Optional[float] = None, **fields: Any) -> Watch:
        """WatchUsage as an iterator of UsageEvent. timeout: the whole stream's deadline
        (None: until cancelled). fields: event_types, send_snapshot, approval_id,
        heartbeat_interval_ms, min_update_interval_ms, resume_from_unix_ms (after a
        disconnection: the stored events since then come first; pass the last event's
        occurred_at_unix_ms minus a margin, e.g. 2000 ms; repeats are possible)."""
        req = _common.request("WatchUsage", scope=scope,
                              include_descendants=include_descendants, **fields)
        call = self._stubs["budget"].WatchUsage(req, timeout=timeout,
                                                metadata=self._metadata("budget"))
        return Watch(call)

    def wait_for_approval(self, approval_id: str, timeout: float) -> "budget_pb2.Approval":
        """Blocks until the approval is decided (or expires); returns it. DeadlineExceeded
        when `timeout` seconds pass first."""
        for ev in self.watch(approval_id=approval_id, timeout=timeout):
            if ev.type == budget_pb2.USAGE_EVENT_TYPE_APPROVAL_DECIDED:
                return ev.approval
        return self.get_approval(approval_id)

    def guard(self, scope: ScopeLike, estimated_tokens: int, *, model: str = "",
              estimated_output_tokens: int = 0, ttl_ms: int = 0, delay: str = "server",
              on_backpressure: Optional[BackpressureHook] = None, estimate_id: str = "",
              timeout: Optional[float] = None) -> Guard:
        """See Guard: `with client.guard("s/t/a", 2000, model="gpt-4o") as g: ...`."""
        return Guard(self, scope, estimated_tokens, model=model,
                     estimated_output_tokens=estimated_output_tokens, ttl_ms=ttl_ms,
                     delay=delay, on_backpressure=on_backpressure, estimate_id=estimate_id,
                     timeout=timeout)

    # -- ContextService

    def count_tokens(self, messages: Optional[Messages] = None, model: str = "", *,
                     tools: Optional[Sequence[Any]] = None, format: str = "openai",
                     system: Any = None, text: str = "", timeout: Optional[float] = None,
                     **fields: Any) -> TokenCount:
        """Counts message dicts (OpenAI chat by default; format="anthropic", "responses" or
        "gemini", with system= for their top-level system prompt) with the model's tokenizer;
        text is counted bare and added."""
        req = _common.count_request(messages, model, format=format, system=system,
                                    tools=tools, text=text, fields=fields)
        return _common.token_count(self._unary("CountTokens", req, timeout))

    def compress_messages(self, messages: Messages, model: str, *,
                          format: str = "openai", system: Any = None,
                          tools: Optional[Sequence[Any]] = None,
                          policy: Optional[Mapping[str, Any]] = None,
                          timeout: Optional[float] = None, **fields: Any) -> CompressResult:
        """Compresses a conversation for `model`; the messages come back as dicts in the
        format they were sent in. policy: CompressionPolicy fields (e.g. target_ratio,
        strategy="TRIMMING"); fields: context_window_tokens, session_id, force, dry_run,
        summarizer, ..."""
        req = _common.compress_request(messages, model, format=format, system=system,
                                       tools=tools, policy=policy, fields=fields)
        return _common.compress_result(self._unary("Compress", req, timeout))

    def compress(self, request: "context_pb2.CompressRequest", *,
                 timeout: Optional[float] = None) -> "context_pb2.CompressResponse":
        return self._unary("Compress", request, timeout)

    def summarize(self, messages: Optional[Messages] = None, *, format: str = "openai",
                  system: Any = None, timeout: Optional[float] = None,
                  **fields: Any) -> "context_pb2.SummarizeResponse":
        """fields: session_id, target_tokens, focus, language, summarizer, model, ..."""
        req = _common.request("Summarize", **fields)
        if messages is not None:
            req.conversation.CopyFrom(_common.conversation(messages, format=format,
                                                           system=system))
        return self._unary("Summarize", req, timeout)

    def validate_context(self, messages: Messages, model: str = "", *,
                         format: str = "openai", system: Any = None,
                         tools: Optional[Sequence[Any]] = None, timeout: Optional[float] = None,
                         **fields: Any) -> "context_pb2.ValidateContextResponse":
        req = _common.request("ValidateContext", model=model, **fields)
        req.conversation.CopyFrom(_common.conversation(messages, format=format, system=system,
                                                       tools=tools))
        return self._unary("ValidateContext", req, timeout)

    def get_artifact(self, artifact_id: str, *, offset: int = 0, length: int = 0,
                     timeout: Optional[float] = None) -> "context_pb2.GetArtifactResponse":
        return self._unary("GetArtifact", _common.request(
            "GetArtifact", artifact_id=artifact_id, offset=offset, length=length), timeout)

    def list_artifacts(self, session_id: str, *, timeout: Optional[float] = None,
                       **fields: Any) -> "context_pb2.ListArtifactsResponse":
        return self._unary("ListArtifacts", _common.request(
            "ListArtifacts", session_id=session_id, **fields), timeout)

    def get_history(self, session_id: str, *, timeout: Optional[float] = None,
                    **fields: Any) -> "context_pb2.GetHistoryResponse":
        return self._unary("GetHistory", _common.request(
            "GetHistory", session_id=session_id, **fields), timeout)

    def search_history(self, session_id: str, query: str, *, timeout: Optional[float] = None,
                       **fields: Any) -> "context_pb2.SearchHistoryResponse":
        return self._unary("SearchHistory", _common.request(
            "SearchHistory", session_id=session_id, query=query, **fields), timeout)

    def delete_session(self, session_id: str, *, timeout: Optional[float] = None
                       ) -> "context_pb2.DeleteSessionResponse":
        """Deletes a session whole (an operator or admin key)."""
        return self._unary("DeleteSession", _common.request(
            "DeleteSession", session_id=session_id), timeout)

    def recall(self, session_id: str, arguments: Any, *,
               timeout: Optional[float] = None) -> str:
        """Runs the ctxguard_recall tool (see ctxguard.recall) for this session."""
        return _recall.run(self, session_id, arguments, timeout=timeout)

    def get_compression_stats(self, session_id: str = "", *, timeout: Optional[float] = None,
                              **fields: Any) -> "context_pb2.GetCompressionStatsResponse":
        return self._unary("GetCompressionStats", _common.request(
            "GetCompressionStats", session_id=session_id, **fields), timeout)

    # -- AdminService (admin_key, or api_key when it is the admin key; WhoAmI: any key)

    def who_am_i(self, *, timeout: Optional[float] = None) -> "admin_pb2.WhoAmIResponse":
        return self._unary("WhoAmI", admin_pb2.WhoAmIRequest(), timeout)

    def create_tenant(self, name: str, *, time_zone: str = "", timeout: Optional[float] = None,
                      **fields: Any) -> "admin_pb2.Tenant":
        return self._unary("CreateTenant", _common.request(
            "CreateTenant", name=name, time_zone=time_zone, **fields), timeout).tenant

    def get_tenant(self, tenant_id: str, *, timeout: Optional[float] = None) -> "admin_pb2.Tenant":
        return self._unary("GetTenant", _common.request("GetTenant", tenant_id=tenant_id),
                           timeout).tenant

    def list_tenants(self, *, timeout: Optional[float] = None,
                     **fields: Any) -> "admin_pb2.ListTenantsResponse":
        return self._unary("ListTenants", _common.request("ListTenants", **fields), timeout)

    def update_tenant_settings(self, tenant_id: str, settings: Mapping[str, Any], *,
                               timeout: Optional[float] = None) -> "admin_pb2.Tenant":
        return self._unary("UpdateTenantSettings", _common.request(
            "UpdateTenantSettings", tenant_id=tenant_id, settings=settings), timeout).tenant

    def create_api_key(self, tenant_id: str = "", name: str = "", *, role: Any = None,
                       scope: Any = None, ttl_ms: int = 0,
                       timeout: Optional[float] = None) -> "admin_pb2.CreateApiKeyResponse":
        """A new key (its secret is in the answer, once). role: "agent" (the default),
        "viewer", "operator" or "admin"; scope: bind it to "session" or "session/task";
        ttl_ms: expire it. tenant_id may be "" with a tenant key (its own tenant)."""
        return self._unary("CreateApiKey", _common.request(
            "CreateApiKey", tenant_id=tenant_id, name=name, role=role, scope=scope,
            ttl_ms=ttl_ms), timeout)

    def list_api_keys(self, tenant_id: str, *,
                      timeout: Optional[float] = None) -> List["admin_pb2.ApiKey"]:
        return list(self._unary("ListApiKeys", _common.request(
            "ListApiKeys", tenant_id=tenant_id), timeout).keys)

    def revoke_api_key(self, tenant_id: str, key_id: str, *,
                       timeout: Optional[float] = None) -> "admin_pb2.ApiKey":
        return self._unary("RevokeApiKey", _common.request(
            "RevokeApiKey", tenant_id=tenant_id, key_id=key_id), timeout).key

    def ping(self, delay_ms: int = 0, payload: bytes = b"", *,
             timeout: Optional[float] = None) -> "admin_pb2.PingResponse":
        return self._unary("Ping", _common.request("Ping", delay_ms=delay_ms, payload=payload),
                           timeout)


