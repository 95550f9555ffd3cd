"""guard(): reserve before a model call, commit what it spent after, release on failure."""

import asyncio
import functools
import inspect
import sys
import time
from typing import Any, Callable, Optional, TypeVar, cast

from . import _common
from ._stubs import budget_pb2
from .errors import ApprovalRequired, CtxguardError
from .scope import Scope, ScopeLike, parse_scope
from .usage import Usage, usage_from_response

__all__ = ["Guard", "GuardHandle", "BackpressureHook"]

F = TypeVar("F", bound=Callable[..., Any])
# (delay the server asks for in seconds, the Reserve answer) -> seconds to sleep (None: as
# asked). Called with delay="client" before sleeping, also when the delay is 0.
BackpressureHook = Callable[[float, "budget_pb2.ReserveResponse"], Optional[float]]


class GuardHandle:
    """What the guarded block gets: the reservation, and where it records what it spent."""

    def __init__(self, guard: "Guard") -> None:
        self.scope: Scope = guard.scope
        self.estimated_tokens = guard.estimated_tokens
        self.response: Optional[budget_pb2.ReserveResponse] = None
        self.commit_response: Optional[budget_pb2.CommitResponse] = None
        self.slept_seconds = 0.0
        self.model = guard.model
        self._usage: Optional[Usage] = None
        self._release = False

    @property
    def reservation(self) -> "budget_pb2.Reservation":
        assert self.response is not None
        return self.response.reservation

    @property
    def reservation_id(self) -> str:
        return self.reservation.reservation_id

    @property
    def decision(self) -> str:
        """ALLOW or ALLOW_WITH_WARNING."""
        assert self.response is not None
        return budget_pb2.Decision.Name(self.response.decision).replace("DECISION_", "")

    @property
    def backpressure_delay_ms(self) -> int:
        return self.response.backpressure_delay_ms if self.response is not None else 0

    @property
    def usage(self) -> Optional[Usage]:
        """What was recorded so far (None: nothing)."""
        return self._usage

    def record(self, input_tokens: int = 0, output_tokens: int = 0, cache_read_tokens: int = 0,
               cache_write_tokens: int = 0, *, reasoning_tokens: int = 0, cost_micros: int = 0,
               model: Optional[str] = None) -> Usage:
        """Adds one call's actual usage (several calls in one block add up). Returns the
        total so far; committed when the block ends without an exception."""
        u = Usage(input_tokens, output_tokens, cache_read_tokens, cache_write_tokens,
                  reasoning_tokens, cost_micros)
        for k, v in vars(u).items():
            if v < 0:
                raise ValueError(f"{k} must be >= 0, not {v}")
        self._usage = u if self._usage is None else self._usage + u
        if model:
            self.model = model
        return self._usage

    def record_usage(self, usage: Usage) -> Usage:
        return self.record(usage.input_tokens, usage.output_tokens, usage.cache_read_tokens,
                           usage.cache_write_tokens, reasoning_tokens=usage.reasoning_tokens,
                           cost_micros=usage.cost_micros)

    def commit_from(self, response: Any) -> Usage:
        """Records the usage of an OpenAI (Chat Completions or Responses) or Anthropic
        response, dict or SDK object; the provider is detected. Takes the model from it."""
        u = self.record_usage(usage_from_response(response))
        model = response.get("model") if isinstance(response, dict) else getattr(
            response, "model", None)
        if isinstance(model, str) and model:
            self.model = model
        return u

    def release(self) -> None:
        """Releases instead of committing when the block ends (the call was not made)."""
        self._release = True


class Guard:
    """Reserve `estimated_tokens` on `scope` on entry; on a clean exit Commit the recorded
    usage (or, when nothing was recorded, the estimate: estimated_tokens -
    estimated_output_tokens as input and estimated_output_tokens as output); on an exception
    Release and re-raise. A sync context manager with Client, an async one with AsyncClient
    (and with Client, whose calls then run in a thread), and a decorator (sync or async
    functions; the return value's usage is committed when it has one, see commit_from).

    delay="server" (default): the server holds the Reserve reply for the backpressure delay
    (the call's timeout must exceed it). delay="client": Reserve answers at once
    (RETURN_ONLY) and the guard sleeps backpressure_delay_ms itself, or what
    on_backpressure(delay_s, response) returns instead.

    REQUIRE_APPROVAL raises ApprovalRequired (approval_id); a HARD refusal BudgetExhausted."""

    def __init__(self, client: Any, scope: ScopeLike, estimated_tokens: int, *,
                 model: str = "", estimated_output_tokens: int = 0, ttl_ms: int = 0,
                 delay: str = "server", on_backpressure: Optional[BackpressureHook] = None,
                 estimate_id: str = "", idempotency_key: Optional[str] = None,
                 timeout: Optional[float] = None, record_if_expired: bool = True) -> None:
        if delay not in ("server", "client"):
            raise ValueError(f"delay must be 'server' or 'client', not {delay!r}")
        if estimated_tokens < 1:
            raise ValueError("estimated_tokens must be >= 1")
        self.client = client
        self.scope = parse_scope(scope)
        self.estimated_tokens = estimated_tokens
        self.model = model
        self.estimated_output_tokens = estimated_output_tokens
        self.ttl_ms = ttl_ms
        self.delay = delay
        self.on_backpressure = on_backpressure
        self.estimate_id = estimate_id
        self.idempotency_key = idempotency_key
        self.timeout = timeout
        self.record_if_expired = record_if_expired
        self.handle: Optional[GuardHandle] = None

    def _copy(self) -> "Guard":
        return Guard(self.client, self.scope, self.estimated_tokens, model=self.model,
                     estimated_output_tokens=self.estimated_output_tokens, ttl_ms=self.ttl_ms,
                     delay=self.delay, on_backpressure=self.on_backpressure,
                     estimate_id=self.estimate_id, timeout=self.timeout,
                     record_if_expired=self.record_if_expired)

    # -- the steps, shared by sync and async

    def _reserve_request(self) -> Any:
        mode = "RETURN_ONLY" if self.delay == "client" else "HOLD"
        return _common.request(
            "Reserve", scope=self.scope, tokens=self.estimated_tokens, model=self.model,
            estimated_output_tokens=self.estimated_output_tokens, ttl_ms=self.ttl_ms,
            estimate_id=self.estimate_id, delay_mode=mode,
            idempotency_key=self.idempotency_key or _common.new_idempotency_key())

    def _accept(self, resp: Any) -> float:
        """Checks the Reserve answer; returns how long to sleep before the call."""
        if resp.decision == budget_pb2.DECISION_REQUIRE_APPROVAL:
            reasons = "; ".join(r.message for r in resp.reasons)
            raise ApprovalRequired(
                f"scope {self.scope.path} needs approval {resp.approval_id}"
                + (f": {reasons}" if reasons else ""), approval_id=resp.approval_id,
                response=resp, method="Reserve")
        handle = GuardHandle(self)
        handle.response = resp
        self.handle = handle
        if self.delay != "client":
            return 0.0
        wait = resp.backpressure_delay_ms / 1000.0
        if self.on_backpressure is not None:
            chosen = self.on_backpressure(wait, resp)
            if chosen is not None:
                wait = max(0.0, float(chosen))
        handle.slept_seconds = wait
        return wait

    def _commit_request(self) -> Optional[Any]:
        """The Commit to send, or None to Release (released, or nothing was spent)."""
        h = self.handle
        assert h is not None
        if h._release:
            return None
        usage = h.usage
        if usage is None:
            out = min(self.estimated_output_tokens, self.estimated_tokens)
            usage = Usage(input_tokens=self.estimated_tokens - out, output_tokens=out)
        if usage.total < 1:
            return None
        return _common.request("Commit", reservation_id=h.reservation_id, usage=usage,
                               model=h.model or None, record_if_expired=self.record_if_expired)

    # -- sync

    def __enter__(self) -> GuardHandle:
        if getattr(self.client, "is_async", False):
            raise TypeError("an AsyncClient's guard is entered with `async with`")
        self.handle = None
        resp = self.client._unary("Reserve", self._reserve_request(), self.timeout)
        wait = self._accept(resp)
        if wait > 0:
            try:
                time.sleep(wait)
            except BaseException:  # interrupted: give the hold back before leaving
                self.__exit__(*sys.exc_info())
                raise
        assert self.handle is not None
        return self.handle

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        h = self.handle
        if h is None:
            return None
        req = None if exc_type is not None else self._commit_request()
        if req is None:
            try:
                self.client._unary("Release", _common.request(
                    "Release", reservation_id=h.reservation_id), self.timeout)
            except CtxguardError:
                if exc_type is None:
                    raise
                # The original exception matters more; the hold expires by its TTL.
            return None
        h.commit_response = self.client._unary("Commit", req, self.timeout)
        return None

    # -- async

    async def __aenter__(self) -> GuardHandle:
        self.handle = None
        req = self._reserve_request()
        if getattr(self.client, "is_async", False):
            resp = await self.client._unary("Reserve", req, self.timeout)
        else:
            loop = asyncio.get_running_loop()
            resp = await loop.run_in_executor(
                None, functools.partial(self.client._unary, "Reserve", req, self.timeout))
        wait = self._accept(resp)
        if wait > 0:
            try:
                await asyncio.sleep(wait)
            except BaseException:  # cancelled: give the hold back before leaving
                await self.__aexit__(*sys.exc_info())
                raise
        assert self.handle is not None
        return self.handle

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        h = self.handle
        if h is None:
            return None
        req = None if exc_type is not None else self._commit_request()
        method = "Commit"
        if req is None:
            method = "Release"
            req = _common.request("Release", reservation_id=h.reservation_id)
        try:
            if getattr(self.client, "is_async", False):
                resp = await self.client._unary(method, req, self.timeout)
            else:
                loop = asyncio.get_running_loop()
                resp = await loop.run_in_executor(
                    None, functools.partial(self.client._unary, method, req, self.timeout))
        except CtxguardError:
            if method == "Release" and exc_type is not None:
                return None
            raise
        if method == "Commit":
            h.commit_response = resp
        return None

    # -- decorator

    def __call__(self, fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                g = self._copy()
                async with g as handle:
                    result = await fn(*args, **kwargs)
                    _record_result(handle, result)
                    return result
            return cast(F, awrapper)

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            g = self._copy()
            with g as handle:
                result = fn(*args, **kwargs)
                _record_result(handle, result)
                return result
        return cast(F, wrapper)


def _record_result(handle: GuardHandle, result: Any) -> None:
    try:
        handle.commit_from(result)
    except (ValueError, TypeError):
        pass  # no usage in the result: the estimate is committed
