/* price.h - the price table: what a model's tokens cost, by kind.
 *
 * Text form (the `prices` setting), entries separated by ';':
 *     MODEL=INPUT/OUTPUT[/CACHE_READ[/CACHE_WRITE]]
 * in US dollars per million tokens (decimals allowed), e.g.
 *     gpt-4o=2.5/10/1.25; claude-sonnet-4*=3/15/0.3/3.75
 * A MODEL ending in '*' matches every model name starting with what precedes it; a MODEL
 * without it matches that name and its dated snapshots (the name, '-' or '@', then
 * YYYY-MM-DD, YYYYMMDD or NNN: gpt-4o-2024-08-06, claude-sonnet-4-5-20250929,
 * gemini-2.0-flash-001). An
 * exact or snapshot match wins over a prefix, a longer prefix over a shorter one. Omitted
 * cache prices are the input price. Costs are in micros (1e-6 dollar): tokens x price,
 * rounded half up.
 *
 * The built-in table (price_builtin.c, version CG_PRICE_TABLE_VERSION) holds the providers'
 * published list prices of the common models; the `prices` setting replaces entries of the
 * same name and adds others (cg_price_merge).
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

/* The version (a date) of the built-in table: the day its prices were read from the
 * providers' pages. */
extern const char CG_PRICE_TABLE_VERSION[];

/* Fills table with the built-in prices. */
void cg_price_builtin(struct cg_price_table *table);

/* Adds the entries of overrides to table: one of the same model name and kind replaces it,
 * others are appended. CG_CONFIG when the table would hold more than CG_PRICE_ENTRIES_MAX. */
cg_status cg_price_merge(struct cg_price_table *table, const struct cg_price_table *overrides,
                         struct cg_err *err) CG_MUST_CHECK;

/* The price for model, or NULL when the table has none (borrowed from table). */
const struct cg_price *cg_price_lookup(const struct cg_price_table *table, const char *model);

/* Micros for the given token counts (negative counts count as 0; saturates at INT64_MAX). */
int64_t cg_price_cost(const struct cg_price *price, int64_t input, int64_t output,
                      int64_t cache_read, int64_t cache_write);

#endif
