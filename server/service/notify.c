/* notify.c - notification channels and the notifier's pass (notify.h). */
#include "service/notify.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "base/arena.h"
#include "base/clock.h"
#include "base/crypto.h"
#include "base/log.h"
#include "core/notify.h"
#include "service/op_err.h"

#define MOD "notify"

cg_status cg_notify_channel_create(const struct cg_svc_env *env, const struct cg_op *op,
                                   const struct cg_channel *in, const struct cg_audit *audit,
                                   struct cg_channel *out)
{
    struct cg_channel c = *in;
    c.secret[0] = '\0';
    if (c.kind == 1) {
        uint8_t raw[CG_NOTIFY_SECRET_BYTES];
        char enc[4 * ((CG_NOTIFY_SECRET_BYTES + 2) / 3) + 1];
        if (cg_random_bytes(raw, sizeof raw) != CG_OK)
            return cg_err_set(op->err, CG_UNAVAILABLE, "no random bytes for a signing secret");
        cg_base64url_encode(raw, sizeof raw, enc);
        snprintf(c.secret, sizeof c.secret, "whsec_%s", enc);
    }
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st =
        cg_store_channel_create(env->store, op->principal->tenant_id, &c, audit, out, &serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

cg_status cg_notify_channel_list(const struct cg_svc_env *env, const struct cg_op *op,
                                 struct cg_channel **rows, int *count)
{
    *count = 0;
    if ((*rows = cg_arena_calloc(op->arena, CG_CHANNELS_MAX, sizeof **rows)) == NULL)
        return cg_op_oom(op);
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_channel_list(env->store, op->principal->tenant_id, *rows,
                                         CG_CHANNELS_MAX, count, &serr);
    if (st != CG_OK)
        return cg_op_store_error(op, &serr);
    for (int i = 0; i < *count; i++)
        (*rows)[i].secret[0] = '\0';
    return CG_OK;
}

cg_status cg_notify_channel_delete(const struct cg_svc_env *env, const struct cg_op *op,
                                   const char *channel_id, const struct cg_audit *audit,
                                   struct cg_channel *out, int64_t *dropped)
{
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_channel_delete(env->store, op->principal->tenant_id, channel_id, audit,
                                           out, dropped, &serr);
    out->secret[0] = '\0';
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

cg_status cg_notify_delivery_list(const struct cg_svc_env *env, const struct cg_op *op, int state,
                                  const char *channel_id, const struct cg_delivery_cursor *after,
                                  int limit, struct cg_delivery **rows, int *count, bool *more,
                                  struct cg_delivery_cursor *next)
{
    *count = 0;
    *more = false;
    if ((*rows = cg_arena_calloc(op->arena, (size_t)limit, sizeof **rows)) == NULL)
        return cg_op_oom(op);
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_delivery_list(env->store, op->principal->tenant_id, state, channel_id,
                                          after, limit, *rows, count, more, next, &serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

cg_status cg_notify_delivery_redrive(const struct cg_svc_env *env, const struct cg_op *op,
                                     const char *const *ids, int n, bool all_dead,
                                     const char *channel_id, const struct cg_audit *audit,
                                     int64_t *count)
{
    struct cg_err serr;
    cg_err_clear(&serr);
    cg_status st = cg_store_delivery_redrive(env->store, op->principal->tenant_id, ids, n, all_dead,
                                             channel_id, audit, count, &serr);
    return st == CG_OK ? CG_OK : cg_op_store_error(op, &serr);
}

/* ------------------------------------------------------------------ the notifier --- */

/* Sends one claimed delivery; returns whether a 2xx came, with out saying why not. */
static bool send_one(struct cg_webhook *client, const struct cg_outbox_item *it,
                     struct cg_webhook_result *out)
{
    char delivery[64], attempt[48], signature[CG_NOTIFY_SIGNATURE_MAX + 32];
    snprintf(delivery, sizeof delivery, "Ctxguard-Delivery-Id: %s", it->delivery_id);
    snprintf(attempt, sizeof attempt, "Ctxguard-Delivery-Attempt: %d", it->attempts);
    const char *headers[3] = {delivery, attempt, NULL};
    int n = 2;
    if (it->kind == 1) {
        char sig[CG_NOTIFY_SIGNATURE_MAX];
        if (cg_notify_signature(it->secret, cg_wall_ms() / 1000, it->body, it->body_len, sig) !=
            CG_OK) {
            memset(out, 0, sizeof *out);
            snprintf(out->error, sizeof out->error, "out of memory while signing");
            return false;
        }
        snprintf(signature, sizeof signature, "Ctxguard-Signature: %s", sig);
        headers[n++] = signature;
    }
    return cg_webhook_post(client, it->url, it->body, it->body_len, headers, n, out);
}

bool cg_notify_pass(const struct cg_svc_env *env, struct cg_webhook *client,
                    struct cg_notify_pass_result *out)
{
    memset(out, 0, sizeof *out);
    const struct cg_config *cfg = env->config;
    /* A claim outlives its attempts (each may take the timeout) and their settling. */
    int64_t lease_ms = 2 * cfg->notify_timeout_ms * CG_NOTIFY_CLAIM + 1000;
    struct cg_outbox_item items[CG_NOTIFY_CLAIM];
    for (int round = 0; round < CG_NOTIFY_PASS_MAX / CG_NOTIFY_CLAIM; round++) {
        int count = 0;
        struct cg_err err;
        cg_err_clear(&err);
        if (cg_store_outbox_claim(env->store, lease_ms, CG_NOTIFY_CLAIM, items, &count, &err) !=
            CG_OK) {
            cg_log(CG_LOG_WARN, MOD, NULL, "claiming deliveries failed: %s", cg_err_text(&err));
            return false;
        }
        for (int i = 0; i < count; i++) {
            const struct cg_outbox_item *it = &items[i];
            struct cg_webhook_result r;
            bool ok = send_one(client, it, &r);
            int64_t retry = -1;
            if (ok)
                out->delivered++;
            else if (it->attempts < cfg->notify_max_attempts) {
                uint64_t random = (uint64_t)cg_mono_ms(); /* when the kernel gives none */
                if (cg_random_bytes(&random, sizeof random) != CG_OK)
                    random ^= (uint64_t)it->attempts << 32;
                retry = cg_notify_retry_ms(it->attempts, cfg->notify_backoff_base_ms,
                                           cfg->notify_backoff_max_ms, random);
                out->retried++;
            } else {
                out->dead++;
                cg_log(CG_LOG_WARN, MOD, NULL,
                       "delivery %s of tenant %s is dead after %d attempts: %s (status %d)",
                       it->delivery_id, it->tenant_id, it->attempts, r.error, r.status);
            }
            cg_err_clear(&err);
            if (cg_store_outbox_settle(env->store, it, ok, r.status, ok ? "" : r.error, retry,
                                       &err) != CG_OK)
                cg_log(CG_LOG_WARN, MOD, NULL,
                       "settling delivery %s failed (its lease runs out and it is sent "
                       "again): %s",
                       it->delivery_id, cg_err_text(&err));
        }
        cg_outbox_items_free(items, count);
        if (count < CG_NOTIFY_CLAIM)
            break;
    }
    return true;
}
