/* preset.c - the presets' table (DESIGN.md §4). */
#include "core/preset.h"

#include <stddef.h>
#include <string.h>

static const struct cg_preset PRESETS[] = {
    {CG_PRESET_GENERAL, "general", 30, 2, 10, 25000, 0},
    {CG_PRESET_DEBUGGING, "debugging", 100, 5, 30, 75000, 0},
    {CG_PRESET_LONG_RUNNING, "long_running", 75, 3, 20, 0, 300000},
};

const struct cg_preset *cg_preset_get(int id)
{
    for (size_t i = 0; i < sizeof PRESETS / sizeof *PRESETS; i++)
        if ((int)PRESETS[i].id == id)
            return &PRESETS[i];
    return NULL;
}

const struct cg_preset *cg_preset_by_name(const char *name)
{
    if (name == NULL)
        return NULL;
    for (size_t i = 0; i < sizeof PRESETS / sizeof *PRESETS; i++)
        if (strcmp(PRESETS[i].name, name) == 0)
            return &PRESETS[i];
    return NULL;
}

int64_t cg_preset_budget(const struct cg_preset *preset, int level)
{
    if (preset == NULL)
        return 0;
    if (level == 4)
        return preset->agent_budget_tokens;
    if (level == 3)
        return preset->task_budget_tokens;
    return 0;
}
