/* scope.h - a scope's identity and its depth: the one place that knows how the ids of a
 * scope (tenant > session > task > agent) name its level, its path and what a scope-bound
 * key reaches.
 *
 * A scope is named by its tenant (kept apart, as the tenant id of the call) and up to three
 * ids: "" ends the path, so the session level has only session_id set, an agent all three.
 * Pure: no I/O, no allocation, every function is thread-safe.
 */
#ifndef CG_CORE_SCOPE_H
#define CG_CORE_SCOPE_H

#include <stdbool.h>
#include <stddef.h>

/* Bytes of one id (session_id, task_id, agent_id), at most. */
#define CG_SCOPE_ID_MAX 128

/* ScopeLevel of common.proto: also the depth of a scope's path (its number of rows). */
typedef enum {
    CG_LEVEL_TENANT = 1,
    CG_LEVEL_SESSION = 2,
    CG_LEVEL_TASK = 3,
    CG_LEVEL_AGENT = 4,
} cg_level;

struct cg_scope_ids {
    char session_id[CG_SCOPE_ID_MAX + 1]; /* "" for the tenant level */
    char task_id[CG_SCOPE_ID_MAX + 1];    /* "" above the task level */
    char agent_id[CG_SCOPE_ID_MAX + 1];   /* "" above the agent level */
};

/* The level of the scope ids name (a cg_level, as an int so that it compares with counts),
 * which is the depth of its path: CG_LEVEL_TENANT (1) when session_id is "", ..
 * CG_LEVEL_AGENT (4) when agent_id is set. Reads only as far as the first "" (ids below an
 * empty one are ignored). */
int cg_scope_level(const struct cg_scope_ids *ids);

/* The ids of the level-th row (1 tenant .. 4 agent) of the path to ids into out (which may
 * not alias ids): ids cut after that level, the rest "". */
void cg_scope_prefix(const struct cg_scope_ids *ids, int level, struct cg_scope_ids *out);

/* Sets ids to (session, task, agent), each cut to CG_SCOPE_ID_MAX bytes (callers validate
 * lengths first; the cut only keeps the arrays terminated). NULL is "". No printf: it runs
 * on every budget call. */
void cg_scope_ids_set(struct cg_scope_ids *ids, const char *session, const char *task,
                      const char *agent);

/* Whether a and b name the same scope (of the same tenant). */
bool cg_scope_equal(const struct cg_scope_ids *a, const struct cg_scope_ids *b);

/* The scope's path as "session/task/agent" as far as ids go, or "tenant" for the tenant
 * level, into out (cut to cap - 1 bytes, always terminated when cap > 0). Returns the length
 * of the whole text (as snprintf). */
int cg_scope_path_text(const struct cg_scope_ids *ids, char *out, size_t cap);

/* Whether a key bound to (bound_session, bound_task) reaches the scope (session, task)
 * ("" = unbound / above that level): the unbound key reaches everything; a session-bound
 * key the session and what is under it; a task-bound key the task and its agents. The
 * tenant level and other sessions are outside every bound key. */
bool cg_scope_within(const char *bound_session, const char *bound_task, const char *session,
                     const char *task);

/* "tenant", "session", "task" or "agent"; "unknown level" otherwise. Static string. */
const char *cg_level_name(cg_level level);

#endif
