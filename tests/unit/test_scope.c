/* test_scope.c - a scope's identity and depth (core/scope.h). */
#include <criterion/criterion.h>
#include <string.h>

#include "core/scope.h"

/* Scope ids from literals (each far shorter than CG_SCOPE_ID_MAX). */
#define ids_of(session, task, agent)                                                               \
    ((struct cg_scope_ids){.session_id = session, .task_id = task, .agent_id = agent})

Test(scope, level_is_the_depth_of_the_path)
{
    struct cg_scope_ids t = ids_of("", "", ""), s = ids_of("s", "", ""), k = ids_of("s", "t", ""),
                        a = ids_of("s", "t", "a");
    cr_assert_eq(cg_scope_level(&t), CG_LEVEL_TENANT);
    cr_assert_eq(cg_scope_level(&s), CG_LEVEL_SESSION);
    cr_assert_eq(cg_scope_level(&k), CG_LEVEL_TASK);
    cr_assert_eq(cg_scope_level(&a), CG_LEVEL_AGENT);
    cr_assert_eq(CG_LEVEL_TENANT, 1);
    cr_assert_eq(CG_LEVEL_AGENT, 4);
}

Test(scope, level_stops_at_the_first_empty_id)
{
    struct cg_scope_ids holes = ids_of("", "t", "a");
    cr_assert_eq(cg_scope_level(&holes), CG_LEVEL_TENANT);
    holes = ids_of("s", "", "a");
    cr_assert_eq(cg_scope_level(&holes), CG_LEVEL_SESSION);
}

Test(scope, prefix_cuts_the_path_after_a_level)
{
    struct cg_scope_ids a = ids_of("s", "t", "a"), p;
    memset(&p, 'x', sizeof p);
    cg_scope_prefix(&a, CG_LEVEL_TENANT, &p);
    struct cg_scope_ids tenant = ids_of("", "", "");
    cr_assert(cg_scope_equal(&p, &tenant));
    cr_assert_eq(cg_scope_level(&p), CG_LEVEL_TENANT);
    cg_scope_prefix(&a, CG_LEVEL_SESSION, &p);
    cr_assert_str_eq(p.session_id, "s");
    cr_assert_str_eq(p.task_id, "");
    cr_assert_str_eq(p.agent_id, "");
    cg_scope_prefix(&a, CG_LEVEL_TASK, &p);
    struct cg_scope_ids task = ids_of("s", "t", "");
    cr_assert(cg_scope_equal(&p, &task));
    cg_scope_prefix(&a, CG_LEVEL_AGENT, &p);
    cr_assert(cg_scope_equal(&p, &a));
    /* Every prefix of a path has the level it was cut at. */
    for (int level = CG_LEVEL_TENANT; level <= CG_LEVEL_AGENT; level++) {
        cg_scope_prefix(&a, level, &p);
        cr_assert_eq((int)cg_scope_level(&p), level);
    }
}

Test(scope, ids_set_copies_cuts_and_takes_null_as_empty)
{
    struct cg_scope_ids ids;
    memset(&ids, 'x', sizeof ids);
    cg_scope_ids_set(&ids, "s", NULL, "");
    cr_assert_str_eq(ids.session_id, "s");
    cr_assert_str_eq(ids.task_id, "");
    cr_assert_str_eq(ids.agent_id, "");
    char longer[CG_SCOPE_ID_MAX + 10];
    memset(longer, 'L', sizeof longer - 1);
    longer[sizeof longer - 1] = '\0';
    cg_scope_ids_set(&ids, "s", "t", longer);
    cr_assert_eq(strlen(ids.agent_id), CG_SCOPE_ID_MAX, "cut to the array, terminated");
    cr_assert_str_eq(ids.task_id, "t");
}

Test(scope, equal_compares_every_id)
{
    struct cg_scope_ids a = ids_of("s", "t", "a"), b = ids_of("s", "t", "a");
    cr_assert(cg_scope_equal(&a, &b));
    b = ids_of("s", "t", "b");
    cr_assert_not(cg_scope_equal(&a, &b));
    b = ids_of("s", "u", "a");
    cr_assert_not(cg_scope_equal(&a, &b));
    b = ids_of("r", "t", "a");
    cr_assert_not(cg_scope_equal(&a, &b));
    b = ids_of("s", "t", "");
    cr_assert_not(cg_scope_equal(&a, &b), "an agent is not its task");
}

Test(scope, path_text_names_the_scope_as_errors_do)
{
    char buf[64];
    struct cg_scope_ids ids = ids_of("", "", "");
    cr_assert_eq(cg_scope_path_text(&ids, buf, sizeof buf), 6);
    cr_assert_str_eq(buf, "tenant");
    ids = ids_of("s1", "", "");
    cg_scope_path_text(&ids, buf, sizeof buf);
    cr_assert_str_eq(buf, "s1");
    ids = ids_of("s1", "t1", "");
    cg_scope_path_text(&ids, buf, sizeof buf);
    cr_assert_str_eq(buf, "s1/t1");
    ids = ids_of("s1", "t1", "a1");
    cr_assert_eq(cg_scope_path_text(&ids, buf, sizeof buf), 8);
    cr_assert_str_eq(buf, "s1/t1/a1");
    /* Cut to the room given, still terminated; the return says how long it would be. */
    cr_assert_eq(cg_scope_path_text(&ids, buf, 4), 8);
    cr_assert_str_eq(buf, "s1/");
}

Test(scope, path_text_of_the_longest_ids_fits_its_bound)
{
    struct cg_scope_ids ids;
    memset(ids.session_id, 's', CG_SCOPE_ID_MAX);
    memset(ids.task_id, 't', CG_SCOPE_ID_MAX);
    memset(ids.agent_id, 'a', CG_SCOPE_ID_MAX);
    ids.session_id[CG_SCOPE_ID_MAX] = ids.task_id[CG_SCOPE_ID_MAX] = ids.agent_id[CG_SCOPE_ID_MAX] =
        '\0';
    char buf[3 * CG_SCOPE_ID_MAX + 3];
    cr_assert_eq(cg_scope_path_text(&ids, buf, sizeof buf), 3 * CG_SCOPE_ID_MAX + 2);
    cr_assert_eq(strlen(buf), 3 * CG_SCOPE_ID_MAX + 2);
}

Test(scope, within_is_the_subtree_of_a_bound_key)
{
    cr_assert(cg_scope_within("", "", "", ""), "unbound reaches the tenant level");
    cr_assert(cg_scope_within("", "", "s1", "t1"));
    cr_assert(cg_scope_within("s1", "", "s1", ""));
    cr_assert(cg_scope_within("s1", "", "s1", "t9"));
    cr_assert_not(cg_scope_within("s1", "", "s2", ""));
    cr_assert_not(cg_scope_within("s1", "", "", ""), "bound keys never reach the tenant level");
    cr_assert(cg_scope_within("s1", "t1", "s1", "t1"));
    cr_assert_not(cg_scope_within("s1", "t1", "s1", ""), "a task key does not reach its session");
    cr_assert_not(cg_scope_within("s1", "t1", "s1", "t2"));
    cr_assert_not(cg_scope_within("s1", "t1", "s2", "t1"));
}

Test(scope, level_names)
{
    cr_assert_str_eq(cg_level_name(CG_LEVEL_TENANT), "tenant");
    cr_assert_str_eq(cg_level_name(CG_LEVEL_SESSION), "session");
    cr_assert_str_eq(cg_level_name(CG_LEVEL_TASK), "task");
    cr_assert_str_eq(cg_level_name(CG_LEVEL_AGENT), "agent");
    cr_assert_str_eq(cg_level_name((cg_level)0), "unknown level");
}
