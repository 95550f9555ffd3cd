/* store_internal.h - the facade's object and checks, shared by server/store/store*.c.
 * Private to the store. */
#ifndef CG_STORE_INTERNAL_H
#define CG_STORE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "store/store.h"
#include "store/store_pg.h"
#include "store/store_redis.h"

struct cg_store {
    struct cg_pg *pg;
    struct cg_redis *redis; /* NULL: cache disabled */
    int key_cache_ttl_s;
    int64_t deadline_mono_ms;
    struct cg_store_meters meters; /* the handles the options gave (counted per slot) */
    /* Whole-tenant cg_rows announcements that failed, sent with the next one
     * (store_events.c): tenant ids separated by 0x1e. */
    char announce_pending[64 * (CG_UUID_LEN + 1) - 1];
    size_t announce_len;
};

/* Copies a canonical UUID (either case) into out in lower case; false when s is not one. */
bool cg__store_normalize_uuid(const char *s, char out[CG_UUID_LEN + 1]);

/* Whether s is a UUID in canonical form already (8-4-4-4-12 lower-case hex digits); false
 * for NULL. */
bool cg__store_uuid_is_canonical(const char *s);

/* Whether the current call's deadline has passed. */
bool cg__store_deadline_passed(const struct cg_store *store);

/* Fills err with CG_DEADLINE_EXCEEDED and returns it. */
cg_status cg__store_deadline_exceeded(struct cg_err *err);

/* Code points of a UTF-8 string, -1 when it is not valid UTF-8. */
long cg__store_utf8_chars(const char *s);

/* Whether s is a key id as API keys use them (1..16 of [A-Za-z0-9_-]). */
bool cg__store_key_id_valid(const char *s);

/* Valid UTF-8, terminated within cap bytes (cap 0: a plain string), at most max_bytes
 * bytes and max_chars characters (0: no such limit). INVALID_ARGUMENT naming field. */
cg_status cg__store_check_text(const char *s, size_t cap, size_t max_bytes, long max_chars,
                               const char *field, struct cg_err *err);

/* Scope ids: each at most CG_SCOPE_ID_MAX bytes of UTF-8; a task needs a session and an
 * agent a task. prefix names the argument in messages ("scope", "parent"). */
cg_status cg__store_check_ids(const struct cg_scope_ids *ids, const char *prefix,
                              struct cg_err *err);

/* The common start of a call: the deadline, then the tenant id normalized into id
 * (CG_NOT_FOUND for one that is not a UUID). */
cg_status cg__store_open_call(struct cg_store *store, const char *tenant_id,
                              char id[CG_UUID_LEN + 1], struct cg_err *err);

/* The common start of a call about a page of tenants (the sweeper's retention): the
 * deadline, n in 1..CG_STORE_PAGE_MAX, then the ids (canonical, either case) as a uuid[]
 * literal "{id,id,...}" into *array (malloc'ed, the caller frees); an id that is not a
 * UUID is CG_INVALID_ARGUMENT naming tenant_ids[i]. */
cg_status cg__store_open_page(struct cg_store *store, const char (*tenant_ids)[CG_UUID_LEN + 1],
                              int n, char **array, struct cg_err *err);

#endif
