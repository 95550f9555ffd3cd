"""ctxguard: the Python client of the ctxguard service (token budgets, reservations,
backpressure, approvals, token counting and context compression for LLM agents).

    from ctxguard import Client
    client = Client("127.0.0.1:50051", api_key="cgk_...")
    with client.guard("run1/plan/writer", 3000, model="gpt-4o") as g:
        response = openai_client.chat.completions.create(...)
        g.commit_from(response)
"""

from typing import Any, Union

from ._common import CompressResult, RetryPolicy, TokenCount
from ._stubs import admin_pb2, budget_pb2, common_pb2, context_pb2
from .aio import AsyncClient, AsyncWatch
from .client import Client, Watch
from .errors import (ApprovalNotFound, ApprovalRequired, BudgetExhausted, Conflict,
                     CtxguardError, DeadlineExceeded, FailedPrecondition, Internal,
                     InvalidArgument, MessageTooLarge, NotFound, PermissionDenied,
                     ReservationExpired, ReservationNotFound, ScopeNotFound, Unauthenticated,
                     Unavailable, from_rpc_error)
from .guard import Guard, GuardHandle
from .recall import RECALL_TOOL_NAME, recall_tool
from .scope import TENANT, Scope, ScopeLike, parse_scope
from .usage import Usage, usage_from_anthropic, usage_from_openai, usage_from_response

__version__ = "0.1.0"

__all__ = [
    "Client", "AsyncClient", "Watch", "AsyncWatch", "Guard", "GuardHandle", "Scope",
    "ScopeLike", "TENANT", "parse_scope", "Usage", "usage_from_openai", "usage_from_anthropic", "usage_from_response",
    "TokenCount", "CompressResult", "RetryPolicy", "CtxguardError", "InvalidArgument",
    "NotFound", "ScopeNotFound", "ReservationNotFound", "ApprovalNotFound", "BudgetExhausted",
    "ApprovalRequired", "Unavailable", "DeadlineExceeded", "Unauthenticated",
    "PermissionDenied", "FailedPrecondition", "ReservationExpired", "MessageTooLarge",
    "Conflict", "Internal", "from_rpc_error", "admin_pb2", "budget_pb2", "common_pb2",
    "context_pb2", "guard", "RECALL_TOOL_NAME", "recall_tool",
]


def guard(scope: ScopeLike, estimated_tokens: int, *, client: Union[Client, AsyncClient],
          **options: Any) -> Guard:
    """client.guard(scope, estimated_tokens, **options) as a function."""
    return client.guard(scope, estimated_tokens, **options)
