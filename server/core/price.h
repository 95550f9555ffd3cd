/* price.h - the price table: what a model's tokens cost, by kind.
 *
 * Text form (the `prices` setting), entries separated by ';':
 *     MODEL=INPUT/OUTPUT[/CACHE_READ[/CACHE_WRITE]]
 * in US dollars per million tokens (decimals allowed), e.g.
 *     gpt-4o=2.5/10/1.25; claude-sonnet-4*=3/15/0.3/3.75
 * A MODEL ending in '*' matches every model name starting with what precedes it; an exact
 * name wins over a prefix, a longer prefix over a shorter one. Omitted cache prices are
 * the input price. Costs are in micros (1e-6 dollar): tokens x price, rounded half up.
 * Pure: no I/O, no globals; thread-safe once built (read-only).
 */
#ifndef CG_CORE_PRICE_H
#define CG_CORE_PRICE_H

#include <stdbool.h>
#include <stdint.h>

#include "base/status.h"

#define CG_PRICE_ENTRIES_MAX 256
#define CG_PRICE_MODEL_MAX 200
#define CG_PRICE_MAX_USD 1000000.0 /* per million tokens: beyond is a typo */

struct cg_price {
    char model[CG_PRICE_MODEL_MAX + 1];
    bool prefix;                                   /* the name ended in '*' */
    double input, output, cache_read, cache_write; /* USD per million tokens */
};

struct cg_price_table {
    struct cg_price entries[CG_PRICE_ENTRIES_MAX];
    int n;
};

/* Parses text into table (emptied first). On error err says which entry and what is wrong
 * ("prices: entry 2 ('gpt-4o=abc'): ...") and table is left empty. An empty or blank text
 * is an empty table. */
cg_status cg_price_parse(const char *text, struct cg_price_table *table,
                         struct cg_err *err) CG_MUST_CHECK;

/* The price for model, or NULL when the table has none (borrowed from table). */
const struct cg_price *cg_price_lookup(const struct cg_price_table *table, const char *model);

/* Micros for the given token counts (negative counts count as 0; saturates at INT64_MAX). */
int64_t cg_price_cost(const struct cg_price *price, int64_t input, int64_t output,
                      int64_t cache_read, int64_t cache_write);

#endif
