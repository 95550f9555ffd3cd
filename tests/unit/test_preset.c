/* test_preset.c - the presets' table and the budgets they give per level. */
#include <criterion/criterion.h>

#include "core/preset.h"

Test(preset, table_matches_the_design)
{
    const struct cg_preset *g = cg_preset_get(CG_PRESET_GENERAL);
    const struct cg_preset *d = cg_preset_get(CG_PRESET_DEBUGGING);
    const struct cg_preset *l = cg_preset_get(CG_PRESET_LONG_RUNNING);
    cr_assert(g && d && l);
    cr_assert_eq(g->window_messages, 30);
    cr_assert_eq(g->primers, 2);
    cr_assert_eq(g->recents, 10);
    cr_assert_eq(d->window_messages, 100);
    cr_assert_eq(d->primers, 5);
    cr_assert_eq(d->recents, 30);
    cr_assert_eq(l->window_messages, 75);
    cr_assert_eq(l->primers, 3);
    cr_assert_eq(l->recents, 20);
}

Test(preset, budgets_by_level)
{
    cr_assert_eq(cg_preset_budget(cg_preset_get(CG_PRESET_GENERAL), 4), 25000);
    cr_assert_eq(cg_preset_budget(cg_preset_get(CG_PRESET_DEBUGGING), 4), 75000);
    cr_assert_eq(cg_preset_budget(cg_preset_get(CG_PRESET_LONG_RUNNING), 3), 300000);
    cr_assert_eq(cg_preset_budget(cg_preset_get(CG_PRESET_LONG_RUNNING), 4), 0);
    cr_assert_eq(cg_preset_budget(cg_preset_get(CG_PRESET_GENERAL), 3), 0);
    for (int level = 1; level <= 2; level++)
        for (int id = 1; id <= 3; id++)
            cr_assert_eq(cg_preset_budget(cg_preset_get(id), level), 0);
    cr_assert_eq(cg_preset_budget(NULL, 4), 0);
}

Test(preset, lookups_reject_unknowns)
{
    cr_assert_null(cg_preset_get(0));
    cr_assert_null(cg_preset_get(4));
    cr_assert_null(cg_preset_get(-1));
    cr_assert_null(cg_preset_by_name("General"));
    cr_assert_null(cg_preset_by_name(NULL));
    cr_assert_eq(cg_preset_by_name("long_running")->id, CG_PRESET_LONG_RUNNING);
}
