/* test_price.c - the price table: parsing, matching, pricing. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/price.h"

static struct cg_price_table table;

Test(price, parses_entries_and_defaults_cache_prices_to_input, .timeout = 10)
{
    struct cg_err err;
    cr_assert_eq(
        cg_price_parse(" gpt-4o = 2.5/10/1.25 ; claude-sonnet-4*=3/15/0.3/3.75;;", &table, &err),
        CG_OK, "%s", err.msg);
    cr_assert_eq(table.n, 2);
    const struct cg_price *p = cg_price_lookup(&table, "gpt-4o");
    cr_assert_not_null(p);
    cr_assert_float_eq(p->input, 2.5, 1e-12);
    cr_assert_float_eq(p->cache_read, 1.25, 1e-12);
    cr_assert_float_eq(p->cache_write, 2.5, 1e-12, "omitted: the input price");
    cr_assert_null(cg_price_lookup(&table, "gpt-4o-mini"), "exact names match exactly");
    cr_assert_not_null(cg_price_lookup(&table, "claude-sonnet-4-20250514"));
    cr_assert_eq(cg_price_parse("", &table, &err), CG_OK);
    cr_assert_eq(table.n, 0);
}

Test(price, exact_beats_prefix_and_longer_prefix_wins, .timeout = 10)
{
    struct cg_err err;
    cr_assert_eq(cg_price_parse("gpt-*=1/1; gpt-4o*=2/2; gpt-4o-mini=3/3", &table, &err), CG_OK,
                 "%s", err.msg);
    cr_assert_float_eq(cg_price_lookup(&table, "gpt-4o-mini")->input, 3, 1e-12);
    cr_assert_float_eq(cg_price_lookup(&table, "gpt-4o-2024")->input, 2, 1e-12);
    cr_assert_float_eq(cg_price_lookup(&table, "gpt-3.5")->input, 1, 1e-12);
    cr_assert_null(cg_price_lookup(&table, "llama"));
    cr_assert_eq(cg_price_parse("*=0.5/1", &table, &err), CG_OK, "a catch-all");
    cr_assert_not_null(cg_price_lookup(&table, "anything"));
}

Test(price, cost_is_tokens_times_dollars_per_million_in_micros, .timeout = 10)
{
    struct cg_err err;
    cr_assert_eq(cg_price_parse("m=2.5/10/0.25/3.75", &table, &err), CG_OK);
    const struct cg_price *p = cg_price_lookup(&table, "m");
    /* 1,000 input at $2.50/M = $0.0025 = 2,500 micros; 100 output at $10/M = 1,000 */
    cr_assert_eq(cg_price_cost(p, 1000, 100, 0, 0), 3500);
    cr_assert_eq(cg_price_cost(p, 0, 0, 4000, 1000), 1000 + 3750);
    cr_assert_eq(cg_price_cost(p, 1, 0, 0, 0), 3, "2.5 rounds half up");
    cr_assert_eq(cg_price_cost(p, -5, 0, 0, 0), 0);
    cr_assert_eq(cg_price_cost(p, INT64_MAX, INT64_MAX, 0, 0), INT64_MAX, "saturates");
}

Test(price, bad_entries_name_the_entry, .timeout = 10)
{
    const char *bad[] = {"gpt-4o",  "gpt-4o=1",     "=1/2",    "a=1/2/3/4/5", "a=-1/2", "a=1e3/2",
                         "a=nan/1", "a=1/2; a=3/4", "a b=1/2", "a=2000000/1", "a=1/x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct cg_err err;
        memset(&err, 0, sizeof err);
        cr_expect_eq(cg_price_parse(bad[i], &table, &err), CG_CONFIG, "'%s' accepted", bad[i]);
        cr_expect(strncmp(err.msg, "prices: entry", 13) == 0, "%s: %s", bad[i], err.msg);
        cr_expect_eq(table.n, 0);
    }
}

Test(price, a_name_matches_its_dated_snapshots_only, .timeout = 10)
{
    struct cg_err err;
    cr_assert_eq(cg_price_parse("claude-opus-4=15/75; claude-opus-4-5=5/25; gpt-4o=2.5/10;"
                                " gemini-x=1/2; claude-*=9/9",
                                &table, &err),
                 CG_OK, "%s", err.msg);
    const struct {
        const char *model;
        double input; /* 0: no price */
    } cases[] = {
        {"claude-opus-4", 15},
        {"claude-opus-4-20250514", 15},
        {"claude-opus-4-5", 5},
        {"claude-opus-4-5-20251101", 5},
        {"claude-opus-4-9", 9},     /* another model: the prefix's price, not opus 4's */
        {"claude-opus-4-1-2025", 9}, /* not a date */
        {"gpt-4o-2024-08-06", 2.5},
        {"gpt-4o@2024-08-06", 2.5},
        {"gpt-4o-2024-8-6", 0},
        {"gpt-4o-mini", 0},
        {"gpt-4o-mini-2024-07-18", 0},
        {"gemini-x-001", 1},
        {"gemini-x-0001", 0},
        {"gemini-x-preview", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct cg_price *p = cg_price_lookup(&table, cases[i].model);
        if (cases[i].input == 0)
            cr_assert_null(p, "%s", cases[i].model);
        else
            cr_assert(p != NULL && p->input == cases[i].input, "%s: %g", cases[i].model,
                      p ? p->input : -1.0);
    }
}

Test(price, the_builtin_table_prices_common_models_and_the_setting_goes_over_it,
     .timeout = 10)
{
    struct cg_err err;
    cg_price_builtin(&table);
    cr_assert_gt(table.n, 20);
    cr_assert_str_eq(CG_PRICE_TABLE_VERSION, "2026-11-27");
    /* Every entry is sane: a model name, output at least input, cache reads cheaper. */
    for (int i = 0; i < table.n; i++) {
        const struct cg_price *p = &table.entries[i];
        cr_assert(p->model[0] != '\0' && !p->prefix);
        cr_assert(p->input > 0 && p->output >= p->input, "%s", p->model);
        cr_assert(p->cache_read > 0 && p->cache_read < p->input, "%s", p->model);
        cr_assert(p->cache_write >= p->input, "%s", p->model);
        for (int j = 0; j < i; j++)
            cr_assert_str_neq(p->model, table.entries[j].model, "listed twice");
    }
    const struct cg_price *p = cg_price_lookup(&table, "claude-sonnet-4-5-20250929");
    cr_assert(p != NULL && p->input == 3.0 && p->cache_read == 0.3 && p->cache_write == 3.75);
    /* 1M in, 1M out, 1M cache read, 1M cache write of that model: 3 + 15 + 0.3 + 3.75 $. */
    cr_assert_eq(cg_price_cost(p, 1000000, 1000000, 1000000, 1000000), 22050000);
    cr_assert_null(cg_price_lookup(&table, "llama-3"));

    static struct cg_price_table given;
    cr_assert_eq(cg_price_parse("claude-sonnet-4-5=1/2; llama-*=0.1/0.2", &given, &err), CG_OK);
    int before = table.n;
    cr_assert_eq(cg_price_merge(&table, &given, &err), CG_OK);
    cr_assert_eq(table.n, before + 1, "one replaced, one added");
    cr_assert_float_eq(cg_price_lookup(&table, "claude-sonnet-4-5-20250929")->input, 1, 1e-12);
    cr_assert_float_eq(cg_price_lookup(&table, "llama-3")->input, 0.1, 1e-12);
    /* Past the table's size: refused, naming the setting. */
    given.n = CG_PRICE_ENTRIES_MAX;
    for (int i = 0; i < given.n; i++)
        snprintf(given.entries[i].model, sizeof given.entries[i].model, "m%d", i);
    cr_assert_eq(cg_price_merge(&table, &given, &err), CG_CONFIG);
    cr_assert(strstr(err.msg, "prices") != NULL);
}
