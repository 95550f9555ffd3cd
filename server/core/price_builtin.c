/* price_builtin.c - the built-in price table (price.h): list prices in US dollars per
 * million tokens, standard tier (not batch, flex or priority), as the providers' own pages
 * gave them on the table's version date. Long-context surcharges (OpenAI above 272K input
 * tokens, Anthropic above 200K on older models) are not modelled: those requests are priced
 * at the base rate. The `prices` setting replaces any entry by name.
 *
 * Sources (read 2026-11-27; the stored copies are undated):
 * - Anthropic: platform.claude.com/docs/en/about-claude/pricing ("Model pricing": base
 *   input, 5-minute cache write, cache hit, output), the per-model overview pages under
 *   platform.claude.com/docs/.../models/, and the earlier docs.anthropic.com pricing page
 *   for the Claude 3.5, 3.7 and Sonnet 4 rows. cache_write is the 5-minute write.
 *   claude-sonnet-4-6, claude-sonnet-4-5 and claude-haiku-4-5: the overview pages give input
 *   and output; their cache prices follow the pricing page's multipliers (hit 0.1x,
 *   5-minute write 1.25x the input price).
 * - OpenAI: the per-model pages under developers.openai.com/api/docs/models/ (cache_write:
 *   the 30-minute retention write where the page lists one, else 1.25x input as the page
 *   states; gpt-5-mini has no separate write price: its input price).
 * - Google: the Gemini API pricing page was not available when the table was made, so no
 *   Gemini model is priced here: give them in `prices`.
 */
#include "core/price.h"

#include <stdio.h>
#include <string.h>

const char CG_PRICE_TABLE_VERSION[] = "2026-11-27";

static const struct {
    const char *model;
    double input, output, cache_read, cache_write;
} builtin[] = {
    /* Anthropic */
    {"claude-fable-5-1", 10.00, 50.00, 0.25, 12.50},
    {"claude-mythos-5-1", 10.00, 50.00, 0.25, 12.50},
    {"claude-fable-5", 10.00, 50.00, 1.00, 12.50},
    {"claude-mythos-5", 10.00, 50.00, 1.00, 12.50},
    {"claude-opus-5-5", 4.00, 20.00, 0.20, 5.00},
    {"claude-opus-5", 5.00, 25.00, 0.50, 6.25},
    {"claude-opus-4-8", 5.00, 25.00, 0.50, 6.25},
    {"claude-opus-4-7", 5.00, 25.00, 0.50, 6.25},
    {"claude-opus-4-6", 5.00, 25.00, 0.50, 6.25},
    {"claude-opus-4-5", 5.00, 25.00, 0.50, 6.25},
    {"claude-opus-4-1", 15.00, 75.00, 1.50, 18.75},
    {"claude-opus-4-0", 15.00, 75.00, 1.50, 18.75},
    {"claude-opus-4", 15.00, 75.00, 1.50, 18.75},
    {"claude-sonnet-5-5", 2.00, 10.00, 0.20, 2.50},
    {"claude-sonnet-5", 2.00, 10.00, 0.20, 2.50},
    {"claude-sonnet-4-6", 3.00, 15.00, 0.30, 3.75},
    {"claude-sonnet-4-5", 3.00, 15.00, 0.30, 3.75},
    {"claude-sonnet-4-0", 3.00, 15.00, 0.30, 3.75},
    {"claude-sonnet-4", 3.00, 15.00, 0.30, 3.75},
    {"claude-haiku-4-5", 1.00, 5.00, 0.10, 1.25},
    {"claude-3-7-sonnet", 3.00, 15.00, 0.30, 3.75},
    {"claude-3-7-sonnet-latest", 3.00, 15.00, 0.30, 3.75},
    {"claude-3-5-sonnet", 3.00, 15.00, 0.30, 3.75},
    {"claude-3-5-sonnet-latest", 3.00, 15.00, 0.30, 3.75},
    {"claude-3-5-haiku", 0.80, 4.00, 0.08, 1.00},
    {"claude-3-5-haiku-latest", 0.80, 4.00, 0.08, 1.00},
    /* OpenAI */
    {"gpt-6.2-sol", 2.00, 10.00, 0.10, 2.50},
    {"gpt-6-astra", 10.00, 50.00, 1.00, 12.50},
    {"gpt-6-luna", 0.10, 0.50, 0.01, 0.125},
    {"gpt-5.6-luna", 0.20, 1.20, 0.02, 0.25},
    {"gpt-5-mini", 0.25, 2.00, 0.025, 0.25},
};

void cg_price_builtin(struct cg_price_table *table)
{
    table->n = 0;
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++) {
        struct cg_price *p = &table->entries[table->n++];
        memset(p, 0, sizeof *p);
        snprintf(p->model, sizeof p->model, "%s", builtin[i].model);
        p->input = builtin[i].input;
        p->output = builtin[i].output;
        p->cache_read = builtin[i].cache_read;
        p->cache_write = builtin[i].cache_write;
    }
}
