"""Typed errors instead of grpc.RpcError.

Every error is a CtxguardError with `code` (grpc.StatusCode), `reason` (the ErrorInfo reason,
or one derived from the status code when the server sent no details), `metadata` (ErrorInfo
metadata, {} without details), `message` (the status message), `field` (the offending
field: BadRequest's first violation, else parsed from a `field 'x'` message), `retry_delay`
(seconds, from RetryInfo) and `has_details` (whether a google.rpc.Status was decoded).
"""

import re
from typing import Any, Dict, List, Optional, Tuple, Type

import grpc

from . import _stubs

__all__ = [
    "CtxguardError", "InvalidArgument", "NotFound", "ScopeNotFound", "ReservationNotFound",
    "ApprovalNotFound", "BudgetExhausted", "ApprovalRequired", "Unavailable",
    "DeadlineExceeded", "Unauthenticated", "PermissionDenied", "FailedPrecondition",
    "ReservationExpired", "MessageTooLarge", "Conflict", "Internal", "from_rpc_error",
]

DOMAIN = "ctxguard"


class CtxguardError(Exception):
    """Base of every error this package raises for a failed call."""

    def __init__(self, message: str, *, code: Optional[grpc.StatusCode] = None,
                 reason: str = "", metadata: Optional[Dict[str, str]] = None,
                 field: str = "", retry_delay: Optional[float] = None,
                 field_violations: Optional[List[Tuple[str, str]]] = None,
                 has_details: bool = False, method: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.reason = reason
        self.metadata: Dict[str, str] = dict(metadata or {})
        self.field = field
        self.retry_delay = retry_delay
        self.field_violations: List[Tuple[str, str]] = list(field_violations or [])
        self.has_details = has_details
        self.method = method

    def __str__(self) -> str:
        code = self.code.name if self.code is not None else "ERROR"
        reason = f" [{self.reason}]" if self.reason else ""
        return f"{code}{reason}: {self.message}"


class InvalidArgument(CtxguardError):
    """The request was malformed; `field` names the field when known."""


class NotFound(CtxguardError):
    """Something named by the request does not exist (or is another tenant's)."""


class ScopeNotFound(NotFound):
    """The scope (or one of its ancestors) does not exist."""


class ReservationNotFound(NotFound):
    """The reservation does not exist."""


class ApprovalNotFound(NotFound):
    """The approval does not exist."""


class BudgetExhausted(CtxguardError):
    """A HARD limit refused the request (Reserve's RESOURCE_EXHAUSTED)."""


class ApprovalRequired(CtxguardError):
    """An APPROVAL budget needs an operator's decision first; wait for `approval_id`
    (Client.wait_for_approval) and try again. Reserve answers this as an OK reply with
    decision REQUIRE_APPROVAL, so `code` is None and `response` holds that reply."""

    def __init__(self, message: str, *, approval_id: str, response: Any = None,
                 **kw: Any) -> None:
        super().__init__(message, reason=kw.pop("reason", "APPROVAL_REQUIRED"), **kw)
        self.approval_id = approval_id
        self.response = response


class Unavailable(CtxguardError):
    """The server or its store cannot be reached; safe calls were already retried."""


class DeadlineExceeded(CtxguardError):
    """The call's deadline passed first."""


class Unauthenticated(CtxguardError):
    """No, a wrong or a revoked API key."""


class PermissionDenied(CtxguardError):
    """The key is of the wrong kind for this service."""


class FailedPrecondition(CtxguardError):
    """The state does not allow the call (closed scope, settled reservation, ...)."""


class ReservationExpired(FailedPrecondition):
    """The reservation expired or was released before the Commit."""


class MessageTooLarge(CtxguardError):
    """The request is over the server's size limit."""


class Conflict(CtxguardError):
    """ABORTED or ALREADY_EXISTS: a version or idempotency-key conflict."""


class Internal(CtxguardError):
    """The server failed."""


_BY_REASON: Dict[str, Type[CtxguardError]] = {
    "BUDGET_EXHAUSTED": BudgetExhausted,
    "SCOPE_NOT_FOUND": ScopeNotFound,
    "RESERVATION_NOT_FOUND": ReservationNotFound,
    "RESERVATION_EXPIRED": ReservationExpired,
    "APPROVAL_NOT_FOUND": ApprovalNotFound,
    "INVALID_ARGUMENT": InvalidArgument,
    "MESSAGE_TOO_LARGE": MessageTooLarge,
    "UNAUTHENTICATED": Unauthenticated,
    "PERMISSION_DENIED": PermissionDenied,
    "STORE_UNAVAILABLE": Unavailable,
    "UNAVAILABLE": Unavailable,
    "DEADLINE_EXCEEDED": DeadlineExceeded,
    "INTERNAL": Internal,
}

_BY_CODE: Dict[grpc.StatusCode, Type[CtxguardError]] = {
    grpc.StatusCode.INVALID_ARGUMENT: InvalidArgument,
    grpc.StatusCode.NOT_FOUND: NotFound,
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    # This package never cancels a unary call itself: CANCELLED comes from a server that
    # shut down (it cancels the calls it will not serve), so it is the server going away.
    grpc.StatusCode.CANCELLED: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.PERMISSION_DENIED: PermissionDenied,
    grpc.StatusCode.FAILED_PRECONDITION: FailedPrecondition,
    grpc.StatusCode.ABORTED: Conflict,
    grpc.StatusCode.ALREADY_EXISTS: Conflict,
    grpc.StatusCode.INTERNAL: Internal,
}

_REASON_OF = {InvalidArgument: "INVALID_ARGUMENT", ScopeNotFound: "SCOPE_NOT_FOUND",
              ReservationNotFound: "RESERVATION_NOT_FOUND",
              ApprovalNotFound: "APPROVAL_NOT_FOUND", BudgetExhausted: "BUDGET_EXHAUSTED",
              Unavailable: "UNAVAILABLE", DeadlineExceeded: "DEADLINE_EXCEEDED",
              Unauthenticated: "UNAUTHENTICATED", PermissionDenied: "PERMISSION_DENIED",
              MessageTooLarge: "MESSAGE_TOO_LARGE", Internal: "INTERNAL",
              ReservationExpired: "RESERVATION_EXPIRED"}

# RPCs whose NOT_FOUND is about a scope (they take one), a reservation or an approval.
_SCOPE_METHODS = {"SetBudget", "GetBudget", "CheckBudget", "Reserve", "RecordUsage",
                  "CloseScope", "GetUsage", "ListScopes", "GetUsageHistory", "WatchUsage",
                  "ListApprovals"}
_RESERVATION_METHODS = {"Commit", "Release"}
_APPROVAL_METHODS = {"ResolveApproval", "GetApproval"}

_FIELD_RX = re.compile(r"field '([^']+)'")
_PATH = r"[A-Za-z_]\w*(?:\[\d+\])*(?:\.[A-Za-z_]\w*(?:\[\d+\])*)*"
# "settings.limit: must be ...", "settings.warning_ratio must be ...", "x is required".
_PATH_FIELD_RX = re.compile(r"^(" + _PATH + r")(?::| (?:must|is|has|may|cannot|needs)\b)")


def _trailing(err: grpc.RpcError, key: str) -> Optional[bytes]:
    md = None
    try:
        md = err.trailing_metadata()  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - an RpcError without call details
        return None
    for k, v in md or ():
        if k == key:
            return v if isinstance(v, bytes) else str(v).encode()
    return None


def _decode_details(raw: Optional[bytes]) -> Dict[str, Any]:
    """ErrorInfo / BadRequest / RetryInfo of a grpc-status-details-bin value."""
    out: Dict[str, Any] = {}
    if not raw or _stubs.status_pb2 is None or _stubs.error_details_pb2 is None:
        return out
    ed = _stubs.error_details_pb2
    try:
        st = _stubs.status_pb2.Status.FromString(raw)
    except Exception:  # noqa: BLE001 - not a google.rpc.Status: ignore the details
        return out
    out["status_message"] = st.message
    for anym in st.details:
        kind = anym.type_url.rsplit("/", 1)[-1]
        try:
            if kind == "google.rpc.ErrorInfo":
                info = ed.ErrorInfo.FromString(anym.value)
                if info.domain in ("", DOMAIN) and "reason" not in out:
                    out["reason"] = info.reason
                    out["metadata"] = dict(info.metadata)
            elif kind == "google.rpc.BadRequest":
                br = ed.BadRequest.FromString(anym.value)
                out.setdefault("violations", []).extend(
                    (v.field, v.description) for v in br.field_violations)
            elif kind == "google.rpc.RetryInfo":
                ri = ed.RetryInfo.FromString(anym.value)
                out["retry_delay"] = ri.retry_delay.seconds + ri.retry_delay.nanos / 1e9
        except Exception:  # noqa: BLE001 - a malformed detail is skipped, not fatal
            continue
    return out


def _fallback_class(code: grpc.StatusCode, method: str, message: str) -> Type[CtxguardError]:
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        low = message.lower()
        too_large = any(w in low for w in ("size", "too large", "max_message", "bytes"))
        if method in ("Reserve", "SetBudget") and not too_large:
            return BudgetExhausted
        return MessageTooLarge if too_large else CtxguardError
    if code == grpc.StatusCode.NOT_FOUND:
        low = message.lower()
        if method in _RESERVATION_METHODS or "reservation" in low:
            return ReservationNotFound
        if method in _APPROVAL_METHODS or "approval_id" in low:
            return ApprovalNotFound
        if method in _SCOPE_METHODS:
            return ScopeNotFound
        return NotFound
    if code == grpc.StatusCode.FAILED_PRECONDITION and method == "Commit" and (
            "expired" in message.lower() or "released" in message.lower()):
        return ReservationExpired
    return _BY_CODE.get(code, CtxguardError)


def from_rpc_error(err: grpc.RpcError, method: str = "") -> CtxguardError:
    """The typed error for a failed call of `method` (the RPC's name, e.g. "Reserve")."""
    code = err.code() if hasattr(err, "code") else None  # type: ignore[attr-defined]
    message = (err.details() if hasattr(err, "details") else "") or ""  # type: ignore
    det = _decode_details(_trailing(err, "grpc-status-details-bin"))
    reason = det.get("reason", "")
    cls: Optional[Type[CtxguardError]] = _BY_REASON.get(reason) if reason else None
    if cls is None and code is not None:
        cls = _fallback_class(code, method, message)
    if cls is None:
        cls = CtxguardError
    violations = det.get("violations", [])
    field = violations[0][0] if violations else det.get("metadata", {}).get("field", "")
    if not field and cls is InvalidArgument:
        m = _FIELD_RX.search(message) or _PATH_FIELD_RX.search(message)
        field = m.group(1) if m else ""
    if not reason:
        reason = _REASON_OF.get(cls, code.name if code is not None else "")
    e = cls(message, code=code, reason=reason, metadata=det.get("metadata"), field=field,
            retry_delay=det.get("retry_delay"), field_violations=violations,
            has_details=bool(det), method=method)
    return e
