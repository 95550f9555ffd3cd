/* preset.h - the use-case presets of DESIGN.md §4 (general, debugging, long_running): the
 * compression defaults and the budget a scope gets when SetBudget gives no limit.
 *
 * Pure constant data and lookups; thread-safe.
 */
#ifndef CG_CORE_PRESET_H
#define CG_CORE_PRESET_H

#include <stdint.h>

/* Numbered as UseCasePreset in common.proto, so the rpc layer can cast. */
typedef enum {
    CG_PRESET_GENERAL = 1,
    CG_PRESET_DEBUGGING = 2,
    CG_PRESET_LONG_RUNNING = 3,
} cg_preset_id;

struct cg_preset {
    cg_preset_id id;
    const char *name;            /* "general", "debugging", "long_running" */
    int window_messages;         /* sliding window size */
    int primers;                 /* first messages always kept */
    int recents;                 /* last messages always kept */
    int64_t agent_budget_tokens; /* an agent's limit when none is given; 0: none */
    int64_t task_budget_tokens;  /* a task's limit when none is given; 0: none */
};

/* The preset with this id, or NULL when there is none. Borrowed, static. */
const struct cg_preset *cg_preset_get(int id);

/* The preset with this name (exact, lower case), or NULL. Borrowed, static. */
const struct cg_preset *cg_preset_by_name(const char *name);

/* The limit the preset gives a scope of this level (1 tenant .. 4 agent); 0 when it gives
 * that level none. */
int64_t cg_preset_budget(const struct cg_preset *preset, int level);

#endif
