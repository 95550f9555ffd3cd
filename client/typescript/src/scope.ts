// Scopes: "session[/task[/agent]]" ("" or "-" is the tenant), as ctxguardctl writes them,
// or an object with the ids.
import type { Scope } from "../gen/ctxguard/v1/common.js";

/** A scope as a path string, `{sessionId, taskId, agentId}` or `{session, task, agent}`. */
export type ScopeLike =
  | string
  | { sessionId?: string; taskId?: string; agentId?: string }
  | { session?: string; task?: string; agent?: string };

const MAX_ID = 128;

/** The wire Scope for a path string or object. Throws TypeError when malformed. */
export function toScope(scope: ScopeLike | undefined | null): Scope {
  if (scope === undefined || scope === null) return { sessionId: "", taskId: "", agentId: "", tenant: false };
  if (typeof scope === "string") {
    if (scope === "" || scope === "-") return { sessionId: "", taskId: "", agentId: "", tenant: false };
    const parts = scope.split("/");
    if (parts.length > 3 || parts.some((p) => p.length === 0 || p.length > MAX_ID)) {
      throw new TypeError(
        `scope must be session[/task[/agent]] (ids of 1..${MAX_ID} characters) or "" for the tenant, not '${scope}'`,
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
  // Scope.tenant (the explicit tenant level) stays false: empty ids are the tenant already.
  return {
    sessionId: pick("sessionId", "session"),
    taskId: pick("taskId", "task"),
    agentId: pick("agentId", "agent"),
    tenant: false,
  };
}

/** The path string of a scope ("" for the tenant). */
export function scopePath(scope: ScopeLike | Scope | undefined | null): string {
  const s = toScope(scope as ScopeLike);
  return [s.sessionId, s.taskId, s.agentId].filter((x) => x !== "").join("/");
}
