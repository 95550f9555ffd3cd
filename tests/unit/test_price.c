/* test_price.c - the price table: parsing, matching, pricing. */
#include <criterion/criterion.h>
#include <stdint.h>
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
