// Scopes: "session[/task[/agent]]" as ctxguardctl writes them, "-" (TENANT) for the tenant
// named explicitly, or an object with the ids (or {tenant: true}). "" and undefined are no
// scope: reads take them as the tenant, spends (checkBudget, reserve, recordUsage, guard)
// are refused by the server (INVALID_ARGUMENT, reason SCOPE_REQUIRED), so that a forgotten
// scope never spends on the whole tenant.
import type { Scope } from "../gen/ctxguard/v1/common.js";

/** A scope as a path string, `{sessionId, taskId, agentId}`, `{session, task, agent}` or `{tenant: true}`. */
export type ScopeLike =
  | string
  | { sessionId?: string; taskId?: string; agentId?: string; tenant?: boolean }
  | { session?: string; task?: string; agent?: string; tenant?: boolean };

/** The tenant level, named explicitly: what a spend takes to count on the whole tenant. */
export const TENANT = "-";

const MAX_ID = 128;

/** The wire Scope for a path string or object. Throws TypeError when malformed. */
export function toScope(scope: ScopeLike | undefined | null): Scope {
  if (scope === undefined || scope === null || scope === "") return { sessionId: "", taskId: "", agentId: "", tenant: false };
  if (typeof scope === "string") {
    if (scope === TENANT) return { sessionId: "", taskId: "", agentId: "", tenant: true };
    const parts = scope.split("/");
    if (parts.length > 3 || parts.some((p) => p.length === 0 || p.length > MAX_ID)) {
      throw new TypeError(
        `scope must be session[/task[/agent]] (ids of 1..${MAX_ID} characters) or "-" for the tenant, not '${scope}'`,
      );
    }
    return { sessionId: parts[0] ?? "", taskId: parts[1] ?? "", agentId: parts[2] ?? "", tenant: false };
  }
  if (typeof scope !== "object") throw new TypeError(`scope must be a string or an object, not ${typeof scope}`);
  const o = scope as Record<string, unknown>;
  const pick = (a: string, b: string): string => {
    const v = o[a] ?? o[b] ?? "";
    if (typeof v !== "string") throw new TypeError(`scope.${a} must be a string`);
    return v;
  };
  const tenant = o.tenant ?? false;
  if (typeof tenant !== "boolean") throw new TypeError("scope.tenant must be a boolean");
  return {
    sessionId: pick("sessionId", "session"),
    taskId: pick("taskId", "task"),
    agentId: pick("agentId", "agent"),
    tenant,
  };
}

/** The path string of a scope ("" for the tenant). */
export function scopePath(scope: ScopeLike | Scope | undefined | null): string {
  const s = toScope(scope as ScopeLike);
  return [s.sessionId, s.taskId, s.agentId].filter((x) => x !== "").join("/");
}
