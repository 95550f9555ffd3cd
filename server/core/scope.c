/* scope.c - a scope's identity and depth (scope.h). */
#include "core/scope.h"

#include <stdio.h>
#include <string.h>

int cg_scope_level(const struct cg_scope_ids *ids)
{
    if (ids->session_id[0] == '\0')
        return CG_LEVEL_TENANT;
    if (ids->task_id[0] == '\0')
        return CG_LEVEL_SESSION;
    if (ids->agent_id[0] == '\0')
        return CG_LEVEL_TASK;
    return CG_LEVEL_AGENT;
}

void cg_scope_prefix(const struct cg_scope_ids *ids, int level, struct cg_scope_ids *out)
{
    memset(out, 0, sizeof *out);
    if (level >= CG_LEVEL_SESSION)
        memcpy(out->session_id, ids->session_id, sizeof out->session_id);
    if (level >= CG_LEVEL_TASK)
        memcpy(out->task_id, ids->task_id, sizeof out->task_id);
    if (level >= CG_LEVEL_AGENT)
        memcpy(out->agent_id, ids->agent_id, sizeof out->agent_id);
}

static void id_set(char dst[CG_SCOPE_ID_MAX + 1], const char *src)
{
    size_t n = src != NULL ? strnlen(src, CG_SCOPE_ID_MAX) : 0;
    memcpy(dst, src != NULL ? src : "", n);
    dst[n] = '\0';
}

void cg_scope_ids_set(struct cg_scope_ids *ids, const char *session, const char *task,
                      const char *agent)
{
    id_set(ids->session_id, session);
    id_set(ids->task_id, task);
    id_set(ids->agent_id, agent);
}

bool cg_scope_equal(const struct cg_scope_ids *a, const struct cg_scope_ids *b)
{
    return strcmp(a->session_id, b->session_id) == 0 && strcmp(a->task_id, b->task_id) == 0 &&
           strcmp(a->agent_id, b->agent_id) == 0;
}

int cg_scope_path_text(const struct cg_scope_ids *ids, char *out, size_t cap)
{
    switch (cg_scope_level(ids)) {
    case CG_LEVEL_TENANT:
        return snprintf(out, cap, "tenant");
    case CG_LEVEL_SESSION:
        return snprintf(out, cap, "%s", ids->session_id);
    case CG_LEVEL_TASK:
        return snprintf(out, cap, "%s/%s", ids->session_id, ids->task_id);
    case CG_LEVEL_AGENT:
        break;
    }
    return snprintf(out, cap, "%s/%s/%s", ids->session_id, ids->task_id, ids->agent_id);
}

bool cg_scope_within(const char *bound_session, const char *bound_task, const char *session,
                     const char *task)
{
    if (bound_session[0] == '\0')
        return true;
    if (strcmp(bound_session, session) != 0)
        return false;
    return bound_task[0] == '\0' || strcmp(bound_task, task) == 0;
}

const char *cg_level_name(cg_level level)
{
    switch (level) {
    case CG_LEVEL_TENANT:
        return "tenant";
    case CG_LEVEL_SESSION:
        return "session";
    case CG_LEVEL_TASK:
        return "task";
    case CG_LEVEL_AGENT:
        return "agent";
    }
    return "unknown level";
}
