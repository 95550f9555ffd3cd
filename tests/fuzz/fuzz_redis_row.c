/* fuzz_redis_row.c - the text of a cached budget row as Redis hands it back
 * (cg_redis_row_decode): anything may be in Redis, so a row that decodes must have every
 * field within its bounds, and encoding it again must give text that decodes to the same
 * row. */
#include <stdint.h>
#include <string.h>

#include "store/store_redis.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cg_budget_row row;
    memset(&row, 0, sizeof row);
    int64_t gen = -1;
    if (!cg_redis_row_decode((const char *)data, size, &row, &gen))
        return 0;
    if (row.level < 1 || row.level > 4 || row.ntiers < 0 || row.ntiers > CG_TIERS_STORE_MAX ||
        row.row_version < 1 || gen < 0 || row.mode < 1 || row.mode > 3 ||
        row.on_store_failure < 1 || row.on_store_failure > 3 || row.used_tokens < 0 ||
        row.reserved_tokens < 0 || memchr(row.description, '\0', sizeof row.description) == NULL)
        __builtin_trap();
    char text[CG_REDIS_ROW_TEXT_MAX];
    size_t len = cg_redis_row_encode(&row, gen, text, sizeof text);
    struct cg_budget_row again;
    memset(&again, 0, sizeof again);
    int64_t gen2 = -1;
    if (len > 0 && (!cg_redis_row_decode(text, len, &again, &gen2) || gen2 != gen ||
                    again.row_version != row.row_version || again.used_tokens != row.used_tokens ||
                    strcmp(again.description, row.description) != 0))
        __builtin_trap();
    return 0;
}
