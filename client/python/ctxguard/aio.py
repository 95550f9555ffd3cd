"""AsyncClient: the asyncio (grpc.aio) client; the same methods as Client, awaited."""

import asyncio
import time
from typing import Any, Dict, AsyncIterator, List, Mapping, Optional, Sequence, Tuple, Union

import grpc
import grpc.aio

from . import _common
from . import recall as _recall
from ._common import CompressResult, RetryPolicy, TokenCount
from ._stubs import admin_pb2, budget_pb2, context_pb2
from .errors import from_rpc_error
from .guard import BackpressureHook, Guard
from .scope import ScopeLike
from .usage import Usage

__all__ = ["AsyncClient", "AsyncWatch"]

Messages = Union[Sequence[Mapping[str, Any]], str]


class AsyncWatch:
    """A WatchUsage stream: `async for event in watch`; cancel() ends it."""

    def __init__(self, call: Any) -> None:
        self._call = call

    async def __aiter__(self) -> AsyncIterator["budget_pb2.UsageEvent"]:
        try:
            async for ev in self._call:
                yield ev
        except asyncio.CancelledError:
            self._call.cancel()
            raise
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.CANCELLED:
                return
            raise from_rpc_error(e, "WatchUsage") from None

    def cancel(self) -> None:
        self._call.cancel()

    async def __aenter__(self) -> "AsyncWatch":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.cancel()


class AsyncClient:
    """An asyncio ctxguard client (grpc.aio); arguments as Client's. Create it inside the
    event loop that uses it; `async with AsyncClient(...) as c:` closes it."""

    is_async = True

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
        _common.connect(self, grpc.aio, target, api_key, admin_key, timeout, tls, root_certificates,
                        retry, options)

    async def close(self) -> None:
        await self._channel.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def _metadata(self, service: str) -> Tuple[Tuple[str, str], ...]:
        key = self.admin_key if service == "admin" and self.admin_key else self.api_key
        return (("authorization", f"Bearer {key}"),) if key else ()

    async def _unary(self, method: str, req: Any, timeout: Optional[float] = None) -> Any:
        service = _common.METHODS[method][0]
        fn = getattr(self._stubs[service], method)
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        may_retry = _common.retryable(method, req)
        attempt = 0
        while True:
            left = max(deadline - time.monotonic(), 0.001)
            try:
                return await fn(req, timeout=left, metadata=self._metadata(service))
            except grpc.RpcError as e:
                err = from_rpc_error(e, method)
            if (may_retry and err.code in _common.RETRY_CODES
                    and attempt + 1 < self.retry.max_attempts):
                pause = self.retry.backoff(attempt, err.retry_delay)
                if time.monotonic() + pause < deadline - 0.01:
                    await asyncio.sleep(pause)
                    attempt += 1
                    continue
            raise err

    async def call(self, method: str, request: Any = None, *, timeout: Optional[float] = None,
                   **fields: Any) -> Any:
        """Any unary RPC by name, as Client.call."""
        if request is None:
            request = _common.request(method, **fields)
        return await self._unary(method, request, timeout)

    # -- BudgetService

    async def set_budget(self, scope: ScopeLike, limit_tokens: int = 0, *,
                   expected_version: int = 0, timeout: Optional[float] = None,
                   **settings: Any) -> "budget_pb2.SetBudgetResponse":
        """Creates or replaces a scope's budget. settings: BudgetSettings fields, e.g.
        mode="HARD"|"SOFT"|"APPROVAL", backpressure_tiers=[(0.9, 750)], warning_ratio=0.8."""
        req = _common.request("SetBudget", scope=scope, expected_version=expected_version)
        req.settings.CopyFrom(_common.budget_settings(limit_tokens, **settings))
        return await self._unary("SetBudget", req, timeout)

    async def get_budget(self, scope: ScopeLike = None, *,
                   timeout: Optional[float] = None) -> "budget_pb2.GetBudgetResponse":
        return await self._unary("GetBudget", _common.request("GetBudget", scope=scope), timeout)

    async def check_budget(self, scope: ScopeLike, estimated_tokens: int = 0, *, model: str = "",
                     timeout: Optional[float] = None,
                     **fields: Any) -> "budget_pb2.CheckBudgetResponse":
        """fields: estimated_output_tokens, delay_mode="RETURN_ONLY", dry_run=True."""
        return await self._unary("CheckBudget", _common.request(
            "CheckBudget", scope=scope, estimated_tokens=estimated_tokens, model=model,
            **fields), timeout)

    async def reserve(self, scope: ScopeLike, tokens: int, *, model: str = "",
                idempotency_key: Optional[str] = None, timeout: Optional[float] = None,
                **fields: Any) -> "budget_pb2.ReserveResponse":
        """The raw Reserve (guard() is the convenient form). An idempotency key is made
        when none is given, so that a retry never holds twice. fields: ttl_ms,
        estimated_output_tokens, estimate_id, delay_mode."""
        return await self._unary("Reserve", _common.request(
            "Reserve", scope=scope, tokens=tokens, model=model,
            idempotency_key=idempotency_key or _common.new_idempotency_key(), **fields),
            timeout)

    async def commit(self, reservation_id: str, usage: Union[Usage, Mapping[str, int]], *,
               model: str = "", timeout: Optional[float] = None,
               **fields: Any) -> "budget_pb2.CommitResponse":
        """fields: estimate_id, provider_input_tokens, record_if_expired."""
        return await self._unary("Commit", _common.request(
            "Commit", reservation_id=reservation_id, usage=usage, model=model, **fields),
            timeout)

    async def release(self, reservation_id: str, *,
                timeout: Optional[float] = None) -> "budget_pb2.ReleaseResponse":
        return await self._unary("Release", _common.request("Release", reservation_id=reservation_id),
                           timeout)

    async def record_usage(self, scope: ScopeLike, usage: Union[Usage, Mapping[str, int]], *,
                     model: str = "", idempotency_key: Optional[str] = None,
                     timeout: Optional[float] = None,
                     **fields: Any) -> "budget_pb2.RecordUsageResponse":
        """Spend without a reservation; an idempotency key is made when none is given."""
        return await self._unary("RecordUsage", _common.request(
            "RecordUsage", scope=scope, usage=usage, model=model,
            idempotency_key=idempotency_key or _common.new_idempotency_key(), **fields),
            timeout)

    async def close_scope(self, scope: ScopeLike, *,
                    timeout: Optional[float] = None) -> "budget_pb2.CloseScopeResponse":
        return await self._unary("CloseScope", _common.request("CloseScope", scope=scope), timeout)

    async def get_usage(self, scope: ScopeLike = None, *, depth: int = 0,
                  timeout: Optional[float] = None,
                  **fields: Any) -> "budget_pb2.GetUsageResponse":
        """fields: max_children, include_closed, include_by_model."""
        return await self._unary("GetUsage", _common.request("GetUsage", scope=scope, depth=depth,
                                                       **fields), timeout)

    async def list_scopes(self, parent: ScopeLike = None, *, timeout: Optional[float] = None,
                    **fields: Any) -> "budget_pb2.ListScopesResponse":
        """fields: level, include_closed, order, page_size, page_token."""
        return await self._unary("ListScopes", _common.request("ListScopes", parent=parent, **fields),
                           timeout)

    async def usage_history(self, scope: ScopeLike = None, *, timeout: Optional[float] = None,
                            **fields: Any) -> "budget_pb2.GetUsageHistoryResponse":
        """Spend over time: fields from_unix_ms, to_unix_ms, step_seconds (0s: the last
        hour by minute)."""
        return await self._unary("GetUsageHistory",
                                 _common.request("GetUsageHistory", scope=scope, **fields),
                                 timeout)

    async def resolve_approval(self, approval_id: str, approve: bool = True, *,
                         granted_tokens: int = 0, decided_by: str = "", note: str = "",
                         timeout: Optional[float] = None
                         ) -> "budget_pb2.ResolveApprovalResponse":
        return await self._unary("ResolveApproval", _common.request(
            "ResolveApproval", approval_id=approval_id,
            decision="APPROVED" if approve else "DENIED", granted_tokens=granted_tokens,
            decided_by=decided_by, note=note), timeout)

    async def get_approval(self, approval_id: str, *,
                     timeout: Optional[float] = None) -> "budget_pb2.Approval":
        return (await self._unary("GetApproval", _common.request(
            "GetApproval", approval_id=approval_id), timeout)).approval

    async def list_approvals(self, scope: ScopeLike = None, *, timeout: Optional[float] = None,
                       **fields: Any) -> "budget_pb2.ListApprovalsResponse":
        """fields: include_descendants, states=["PENDING"], page_size, page_token."""
        return await self._unary("ListApprovals", _common.request("ListApprovals", scope=scope,
                                                            **fields), timeout)

    def watch(self, scope: ScopeLike = None, include_descendants: bool = False, *,
              timeout: Optional[float] = None, **fields: Any) -> AsyncWatch:
        """WatchUsage as an async iterator of UsageEvent (see Client.watch)."""
        req = _common.request("WatchUsage", scope=scope,
                              include_descendants=include_descendants, **fields)
        call = self._stubs["budget"].WatchUsage(req, timeout=timeout,
                                                metadata=self._metadata("budget"))
        return AsyncWatch(call)

    async def wait_for_approval(self, approval_id: str,
                                timeout: float) -> "budget_pb2.Approval":
        """Waits until the approval is decided (or expires); returns it."""
        async for ev in self.watch(approval_id=approval_id, timeout=timeout):
            if ev.type == budget_pb2.USAGE_EVENT_TYPE_APPROVAL_DECIDED:
                return ev.approval
        return await self.get_approval(approval_id)

    def guard(self, scope: ScopeLike, estimated_tokens: int, *, model: str = "",
              estimated_output_tokens: int = 0, ttl_ms: int = 0, delay: str = "server",
              on_backpressure: Optional[BackpressureHook] = None, estimate_id: str = "",
              timeout: Optional[float] = None) -> Guard:
        """See Guard: `async with client.guard("s/t/a", 2000, model="gpt-4o") as g: ...`."""
        return Guard(self, scope, estimated_tokens, model=model,
                     estimated_output_tokens=estimated_output_tokens, ttl_ms=ttl_ms,
                     delay=delay, on_backpressure=on_backpressure, estimate_id=estimate_id,
                     timeout=timeout)

    # -- ContextService

    async def count_tokens(self, messages: Optional[Messages] = None, model: str = "", *,
                     tools: Optional[Sequence[Any]] = None, format: str = "openai",
                     system: Any = None, text: str = "", timeout: Optional[float] = None,
                     **fields: Any) -> TokenCount:
        """Counts OpenAI-format message dicts (or Anthropic ones with format="anthropic" and
        system=) with the model's tokenizer; text is counted bare and added."""
        req = _common.count_request(messages, model, format=format, system=system,
                                    tools=tools, text=text, fields=fields)
        return _common.token_count(await self._unary("CountTokens", req, timeout))

    async def compress_messages(self, messages: Messages, model: str, *,
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
        return _common.compress_result(await self._unary("Compress", req, timeout))

    async def compress(self, request: "context_pb2.CompressRequest", *,
                 timeout: Optional[float] = None) -> "context_pb2.CompressResponse":
        return await self._unary("Compress", request, timeout)

    async def summarize(self, messages: Optional[Messages] = None, *, format: str = "openai",
                  system: Any = None, timeout: Optional[float] = None,
                  **fields: Any) -> "context_pb2.SummarizeResponse":
        """fields: session_id, target_tokens, focus, language, summarizer, model, ..."""
        req = _common.request("Summarize", **fields)
        if messages is not None:
            req.conversation.CopyFrom(_common.conversation(messages, format=format,
                                                           system=system))
        return await self._unary("Summarize", req, timeout)

    async def validate_context(self, messages: Messages, model: str = "", *,
                         format: str = "openai", system: Any = None,
                         tools: Optional[Sequence[Any]] = None, timeout: Optional[float] = None,
                         **fields: Any) -> "context_pb2.ValidateContextResponse":
        req = _common.request("ValidateContext", model=model, **fields)
        req.conversation.CopyFrom(_common.conversation(messages, format=format, system=system,
                                                       tools=tools))
        return await self._unary("ValidateContext", req, timeout)

    async def get_artifact(self, artifact_id: str, *, offset: int = 0, length: int = 0,
                     timeout: Optional[float] = None) -> "context_pb2.GetArtifactResponse":
        return await self._unary("GetArtifact", _common.request(
            "GetArtifact", artifact_id=artifact_id, offset=offset, length=length), timeout)

    async def list_artifacts(self, session_id: str, *, timeout: Optional[float] = None,
                       **fields: Any) -> "context_pb2.ListArtifactsResponse":
        return await self._unary("ListArtifacts", _common.request(
            "ListArtifacts", session_id=session_id, **fields), timeout)

    async def get_history(self, session_id: str, *, timeout: Optional[float] = None,
                    **fields: Any) -> "context_pb2.GetHistoryResponse":
        return await self._unary("GetHistory", _common.request(
            "GetHistory", session_id=session_id, **fields), timeout)

    async def search_history(self, session_id: str, query: str, *,
                             timeout: Optional[float] = None,
                             **fields: Any) -> "context_pb2.SearchHistoryResponse":
        return await self._unary("SearchHistory", _common.request(
            "SearchHistory", session_id=session_id, query=query, **fields), timeout)

    async def delete_session(self, session_id: str, *, timeout: Optional[float] = None
                             ) -> "context_pb2.DeleteSessionResponse":
        """Deletes a session whole (an operator or admin key)."""
        return await self._unary("DeleteSession", _common.request(
            "DeleteSession", session_id=session_id), timeout)

    async def recall(self, session_id: str, arguments: Any, *,
                     timeout: Optional[float] = None) -> str:
        """Runs the ctxguard_recall tool (see ctxguard.recall) for this session."""
        return await _recall.run_async(self, session_id, arguments, timeout=timeout)

    async def get_compression_stats(self, session_id: str = "", *, timeout: Optional[float] = None,
                              **fields: Any) -> "context_pb2.GetCompressionStatsResponse":
        return await self._unary("GetCompressionStats", _common.request(
            "GetCompressionStats", session_id=session_id, **fields), timeout)

    # -- AdminService (admin_key, or api_key when it is the admin key; WhoAmI: any key)

    async def who_am_i(self, *, timeout: Optional[float] = None) -> "admin_pb2.WhoAmIResponse":
        return await self._unary("WhoAmI", admin_pb2.WhoAmIRequest(), timeout)

    async def create_tenant(self, name: str, *, time_zone: str = "", timeout: Optional[float] = None,
                      **fields: Any) -> "admin_pb2.Tenant":
        return (await self._unary("CreateTenant", _common.request(
            "CreateTenant", name=name, time_zone=time_zone, **fields), timeout)).tenant

    async def get_tenant(self, tenant_id: str, *, timeout: Optional[float] = None) -> "admin_pb2.Tenant":
        return (await self._unary("GetTenant", _common.request("GetTenant", tenant_id=tenant_id),
                           timeout)).tenant

    async def list_tenants(self, *, timeout: Optional[float] = None,
                     **fields: Any) -> "admin_pb2.ListTenantsResponse":
        return await self._unary("ListTenants", _common.request("ListTenants", **fields), timeout)

    async def update_tenant_settings(self, tenant_id: str, settings: Mapping[str, Any], *,
                               timeout: Optional[float] = None) -> "admin_pb2.Tenant":
        return (await self._unary("UpdateTenantSettings", _common.request(
            "UpdateTenantSettings", tenant_id=tenant_id, settings=settings), timeout)).tenant

    async def create_api_key(self, tenant_id: str = "", name: str = "", *, role: Any = None,
                             scope: Any = None, ttl_ms: int = 0,
                             timeout: Optional[float] = None
                             ) -> "admin_pb2.CreateApiKeyResponse":
        """As Client.create_api_key."""
        return await self._unary("CreateApiKey", _common.request(
            "CreateApiKey", tenant_id=tenant_id, name=name, role=role, scope=scope,
            ttl_ms=ttl_ms), timeout)

    async def list_api_keys(self, tenant_id: str, *,
                      timeout: Optional[float] = None) -> List["admin_pb2.ApiKey"]:
        return list((await self._unary("ListApiKeys", _common.request(
            "ListApiKeys", tenant_id=tenant_id), timeout)).keys)

    async def revoke_api_key(self, tenant_id: str, key_id: str, *,
                       timeout: Optional[float] = None) -> "admin_pb2.ApiKey":
        return (await self._unary("RevokeApiKey", _common.request(
            "RevokeApiKey", tenant_id=tenant_id, key_id=key_id), timeout)).key

    async def ping(self, delay_ms: int = 0, payload: bytes = b"", *,
             timeout: Optional[float] = None) -> "admin_pb2.PingResponse":
        return await self._unary("Ping", _common.request("Ping", delay_ms=delay_ms, payload=payload),
                           timeout)


