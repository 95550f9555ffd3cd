"""Scopes: tenant -> session -> task -> agent, written as paths like the CLI's."""

from dataclasses import dataclass
from typing import Optional, Union

from ._stubs import common_pb2

__all__ = ["Scope", "ScopeLike", "TENANT", "parse_scope"]

ID_MAX = 128


@dataclass(frozen=True)
class Scope:
    """A scope inside the caller's tenant. All ids empty is the tenant itself; spending on
    it (check_budget, reserve, record_usage, guard) must say so with `tenant=True` (the
    `TENANT` constant, or the path `-`): the server refuses a spend with no scope, so that
    a forgotten scope never spends on the whole tenant."""

    session_id: str = ""
    task_id: str = ""
    agent_id: str = ""
    tenant: bool = False

    def __post_init__(self) -> None:
        if self.tenant and (self.session_id or self.task_id or self.agent_id):
            raise ValueError("Scope(tenant=True) names the whole tenant: it takes no ids")

    @property
    def path(self) -> str:
        """`session[/task[/agent]]`, or `-` for the tenant."""
        ids = [i for i in (self.session_id, self.task_id, self.agent_id) if i]
        return "/".join(ids) if ids else "-"

    @property
    def is_tenant(self) -> bool:
        return not self.session_id

    def child(self, child_id: str) -> "Scope":
        """The scope one level below this one."""
        if not self.session_id:
            return Scope(child_id)
        if not self.task_id:
            return Scope(self.session_id, child_id)
        if not self.agent_id:
            return Scope(self.session_id, self.task_id, child_id)
        raise ValueError("an agent scope has no children")

    def to_proto(self) -> "common_pb2.Scope":
        return common_pb2.Scope(session_id=self.session_id, task_id=self.task_id,
                                agent_id=self.agent_id, tenant=self.tenant)

    @classmethod
    def from_proto(cls, msg: "common_pb2.Scope") -> "Scope":
        return cls(msg.session_id, msg.task_id, msg.agent_id, msg.tenant)

    def __str__(self) -> str:
        return self.path


ScopeLike = Union[Scope, str, None]

#: The tenant level, named explicitly: what `check_budget`, `reserve`, `record_usage` and
#: `guard` take to spend on the whole tenant (the path `-` means the same).
TENANT = Scope(tenant=True)


def parse_scope(scope: ScopeLike) -> Scope:
    """A Scope from a path `session[/task[/agent]]`, a Scope, or a common_pb2.Scope.
    `-` is the tenant named explicitly (`TENANT`); "" and None are no scope, which reads
    (get_usage, get_budget, ...) take as the tenant and spends refuse (INVALID_ARGUMENT,
    reason SCOPE_REQUIRED). ValueError for a malformed path (as ctxguardctl's SCOPE)."""
    if isinstance(scope, Scope):
        return scope
    if scope is None:
        return Scope()
    if isinstance(scope, common_pb2.Scope):
        return Scope.from_proto(scope)
    if not isinstance(scope, str):
        raise TypeError(f"a scope is a path string or a Scope, not {type(scope).__name__}")
    if scope == "-":
        return TENANT
    if scope == "":
        return Scope()
    parts = scope.split("/")
    if len(parts) > 3 or any(not p or len(p) > ID_MAX for p in parts):
        raise ValueError(f"a scope must be session[/task[/agent]] (ids of 1..{ID_MAX} "
                         f"characters) or - for the tenant, not {scope!r}")
    return Scope(*parts)


def scope_proto(scope: ScopeLike) -> "common_pb2.Scope":
    return parse_scope(scope).to_proto()


def _opt(scope: Optional[Scope]) -> str:  # pragma: no cover - debugging aid
    return scope.path if scope else "-"
