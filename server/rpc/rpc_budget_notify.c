/* rpc_budget_notify.c - BudgetService: notification channels and their deliveries.
 *
 * validate (naming the field) -> one service call (service/notify.h) -> reply. Keys bound
 * to a scope are refused: channels and deliveries are the tenant's.
 */
#include "rpc/rpc_budget.h"
#include "service/notify.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ctxguard/v1/budget.pb-c.h"

#define PAGE_DEFAULT 100
#define TOKEN_MAX 80

/* Channels are the tenant's: a key bound to a scope may not see or change them. */
static cg_status tenant_wide(struct cg_rpc_call *call)
{
    if (call->principal.scope_session_id[0] != '\0')
        return cg_err_set(&call->err, CG_PERMISSION_DENIED,
                          "notification channels belong to the whole tenant: a key bound to "
                          "a scope may not use them");
    return CG_OK;
}

static Ctxguard__V1__NotificationChannel *channel_out(struct cg_rpc_call *call,
                                                      const struct cg_channel *c)
{
    Ctxguard__V1__NotificationChannel *m =
        NEW(call, Ctxguard__V1__NotificationChannel, ctxguard__v1__notification_channel__init);
    if (m == NULL)
        return NULL;
    char hint[CG_NOTIFY_URL_HINT_MAX];
    struct cg_err ignored;
    if (cg_notify_url_check(c->url, "url", hint, sizeof hint, &ignored) != CG_OK)
        hint[0] = '\0';
    if ((m->channel_id = cg_arena_strdup(call->arena, c->channel_id)) == NULL ||
        (m->url_hint = cg_arena_strdup(call->arena, hint)) == NULL ||
        (m->description = cg_arena_strdup(call->arena, c->description)) == NULL)
        return NULL;
    m->kind = (Ctxguard__V1__NotificationChannelKind)c->kind;
    if (c->n_event_types > 0) {
        m->event_types =
            cg_arena_calloc(call->arena, (size_t)c->n_event_types, sizeof *m->event_types);
        if (m->event_types == NULL)
            return NULL;
        for (int i = 0; i < c->n_event_types; i++)
            m->event_types[i] = (Ctxguard__V1__UsageEventType)c->event_types[i];
        m->n_event_types = (size_t)c->n_event_types;
    }
    if (c->session_id[0] != '\0') {
        Ctxguard__V1__Scope *s = NEW(call, Ctxguard__V1__Scope, ctxguard__v1__scope__init);
        if (s == NULL || (s->session_id = cg_arena_strdup(call->arena, c->session_id)) == NULL ||
            (s->task_id = cg_arena_strdup(call->arena, c->task_id)) == NULL)
            return NULL;
        m->scope_prefix = s;
    }
    m->created_at_unix_ms = c->created_at_ms;
    return m;
}

cg_status cg_rpc_budget_create_notification_channel(struct cg_rpc_call *call,
                                                    const struct cg_rpc_env *env,
                                                    const ProtobufCMessage *request,
                                                    ProtobufCMessage **response)
{
    const Ctxguard__V1__CreateNotificationChannelRequest *req =
        (const Ctxguard__V1__CreateNotificationChannelRequest *)request;
    cg_status st = tenant_wide(call);
    if (st != CG_OK)
        return st;
    struct cg_channel *in = cg_arena_calloc(call->arena, 1, sizeof *in);
    if (in == NULL)
        return OOM(call);
    if (req->kind != CTXGUARD__V1__NOTIFICATION_CHANNEL_KIND__NOTIFICATION_CHANNEL_KIND_WEBHOOK &&
        req->kind != CTXGUARD__V1__NOTIFICATION_CHANNEL_KIND__NOTIFICATION_CHANNEL_KIND_SLACK)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'kind' must be NOTIFICATION_CHANNEL_KIND_WEBHOOK or "
                          "NOTIFICATION_CHANNEL_KIND_SLACK");
    in->kind = (int)req->kind;
    char hint[CG_NOTIFY_URL_HINT_MAX];
    if ((st = cg_notify_url_check(req->url, "url", hint, sizeof hint, &call->err)) != CG_OK)
        return st;
    snprintf(in->url, sizeof in->url, "%s", req->url);
    if (req->n_event_types > CG_NOTIFY_EVENT_TYPES_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'event_types' holds at most %d types", CG_NOTIFY_EVENT_TYPES_MAX);
    for (size_t i = 0; i < req->n_event_types; i++) {
        int t = (int)req->event_types[i];
        if (!cg_notify_event_type_ok(t))
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'event_types[%zu]': %d is not sent to channels (SNAPSHOT, "
                              "USAGE_CHANGED and HEARTBEAT are not; unknown values neither)",
                              i, t);
        in->event_types[in->n_event_types++] = t;
    }
    if (req->scope_prefix != NULL) {
        struct cg_scope_ids ids;
        int level;
        if ((st = cg_rpc_scope_in_field(call, "scope_prefix", req->scope_prefix, &ids, &level)) !=
            CG_OK)
            return st;
        if (ids.agent_id[0] != '\0')
            return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                              "field 'scope_prefix.agent_id': a prefix names a session, or a "
                              "session and task");
        snprintf(in->session_id, sizeof in->session_id, "%s", ids.session_id);
        snprintf(in->task_id, sizeof in->task_id, "%s", ids.task_id);
    }
    if ((st = cg_rpc_check_text(call, "description", req->description,
                                CG_CHANNEL_DESCRIPTION_MAX)) != CG_OK)
        return st;
    snprintf(in->description, sizeof in->description, "%s", req->description);

    struct cg_op op = cg_rpc_op(call);
    struct cg_channel *made = cg_arena_calloc(call->arena, 1, sizeof *made);
    if (made == NULL)
        return OOM(call);
    struct cg_audit audit;
    cg_rpc_audit(call, &audit);
    if ((st = cg_notify_channel_create(&env->svc, &op, in, &audit, made)) != CG_OK)
        return st;
    Ctxguard__V1__CreateNotificationChannelResponse *resp =
        NEW(call, Ctxguard__V1__CreateNotificationChannelResponse,
            ctxguard__v1__create_notification_channel_response__init);
    if (resp == NULL || (resp->channel = channel_out(call, made)) == NULL ||
        (resp->signing_secret = cg_arena_strdup(call->arena, made->secret)) == NULL)
        return OOM(call);
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_budget_list_notification_channels(struct cg_rpc_call *call,
                                                   const struct cg_rpc_env *env,
                                                   const ProtobufCMessage *request,
                                                   ProtobufCMessage **response)
{
    (void)request;
    cg_status st = tenant_wide(call);
    if (st != CG_OK)
        return st;
    struct cg_op op = cg_rpc_op(call);
    struct cg_channel *rows;
    int count;
    if ((st = cg_notify_channel_list(&env->svc, &op, &rows, &count)) != CG_OK)
        return st;
    Ctxguard__V1__ListNotificationChannelsResponse *resp =
        NEW(call, Ctxguard__V1__ListNotificationChannelsResponse,
            ctxguard__v1__list_notification_channels_response__init);
    if (resp == NULL ||
        (resp->channels = cg_arena_calloc(call->arena, (size_t)count + 1, sizeof(void *))) == NULL)
        return OOM(call);
    for (int i = 0; i < count; i++)
        if ((resp->channels[i] = channel_out(call, &rows[i])) == NULL)
            return OOM(call);
    resp->n_channels = (size_t)count;
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_budget_delete_notification_channel(struct cg_rpc_call *call,
                                                    const struct cg_rpc_env *env,
                                                    const ProtobufCMessage *request,
                                                    ProtobufCMessage **response)
{
    const Ctxguard__V1__DeleteNotificationChannelRequest *req =
        (const Ctxguard__V1__DeleteNotificationChannelRequest *)request;
    cg_status st = tenant_wide(call);
    if (st == CG_OK)
        st = cg_rpc_check_uuid(call, "channel_id", req->channel_id);
    if (st != CG_OK)
        return st;
    struct cg_op op = cg_rpc_op(call);
    struct cg_channel *gone = cg_arena_calloc(call->arena, 1, sizeof *gone);
    int64_t dropped = 0;
    if (gone == NULL)
        return OOM(call);
    struct cg_audit audit;
    cg_rpc_audit(call, &audit);
    if ((st = cg_notify_channel_delete(&env->svc, &op, req->channel_id, &audit, gone, &dropped)) !=
        CG_OK)
        return st;
    Ctxguard__V1__DeleteNotificationChannelResponse *resp =
        NEW(call, Ctxguard__V1__DeleteNotificationChannelResponse,
            ctxguard__v1__delete_notification_channel_response__init);
    if (resp == NULL || (resp->channel = channel_out(call, gone)) == NULL)
        return OOM(call);
    resp->dropped_deliveries = dropped;
    *response = &resp->base;
    return CG_OK;
}

/* "<created µs>.<delivery id>" */
static cg_status token_in(struct cg_rpc_call *call, const char *token,
                          struct cg_delivery_cursor *out)
{
    const char *dot = strchr(token, '.');
    char *end = NULL;
    long long us = dot ? strtoll(token, &end, 10) : -1;
    if (dot == NULL || end != dot || us < 0 || strlen(dot + 1) != CG_UUID_LEN ||
        strspn(dot + 1, "0123456789abcdef-") != CG_UUID_LEN)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'page_token' is not a token this server issued");
    out->created_at_us = us;
    memcpy(out->delivery_id, dot + 1, CG_UUID_LEN + 1);
    return CG_OK;
}

static Ctxguard__V1__NotificationDelivery *delivery_out(struct cg_rpc_call *call,
                                                        const struct cg_delivery *d)
{
    Ctxguard__V1__NotificationDelivery *m =
        NEW(call, Ctxguard__V1__NotificationDelivery, ctxguard__v1__notification_delivery__init);
    if (m == NULL || (m->delivery_id = cg_arena_strdup(call->arena, d->delivery_id)) == NULL ||
        (m->channel_id = cg_arena_strdup(call->arena, d->channel_id)) == NULL ||
        (m->event_id = cg_arena_strdup(call->arena, d->event_id)) == NULL ||
        (m->last_error = cg_arena_strdup(call->arena, d->last_error)) == NULL)
        return NULL;
    m->event_type = (Ctxguard__V1__UsageEventType)d->event_type;
    m->state = (Ctxguard__V1__NotificationDeliveryState)d->state;
    m->attempts = (uint32_t)d->attempts;
    m->next_attempt_unix_ms = d->state == 1 ? d->next_attempt_ms : 0;
    m->last_status = (uint32_t)d->last_status;
    m->created_at_unix_ms = d->created_at_ms;
    m->delivered_at_unix_ms = d->delivered_at_ms;
    return m;
}

cg_status cg_rpc_budget_list_notification_deliveries(struct cg_rpc_call *call,
                                                     const struct cg_rpc_env *env,
                                                     const ProtobufCMessage *request,
                                                     ProtobufCMessage **response)
{
    const Ctxguard__V1__ListNotificationDeliveriesRequest *req =
        (const Ctxguard__V1__ListNotificationDeliveriesRequest *)request;
    cg_status st = tenant_wide(call);
    if (st != CG_OK)
        return st;
    if ((int)req->state < 0 || req->state > 3)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT, "field 'state': unknown value %d",
                          (int)req->state);
    if (req->channel_id[0] != '\0' &&
        (st = cg_rpc_check_uuid(call, "channel_id", req->channel_id)) != CG_OK)
        return st;
    if (req->page_size > CG_STORE_PAGE_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'page_size' must be 1..%d (0 means %d), not %u", CG_STORE_PAGE_MAX,
                          PAGE_DEFAULT, req->page_size);
    struct cg_delivery_cursor after, next;
    bool has_after = req->page_token[0] != '\0';
    if (has_after && (st = token_in(call, req->page_token, &after)) != CG_OK)
        return st;
    int limit = req->page_size ? (int)req->page_size : PAGE_DEFAULT;
    struct cg_op op = cg_rpc_op(call);
    struct cg_delivery *rows;
    int count;
    bool more;
    if ((st = cg_notify_delivery_list(&env->svc, &op, (int)req->state, req->channel_id,
                                      has_after ? &after : NULL, limit, &rows, &count, &more,
                                      &next)) != CG_OK)
        return st;
    Ctxguard__V1__ListNotificationDeliveriesResponse *resp =
        NEW(call, Ctxguard__V1__ListNotificationDeliveriesResponse,
            ctxguard__v1__list_notification_deliveries_response__init);
    if (resp == NULL || (resp->deliveries = cg_arena_calloc(call->arena, (size_t)count + 1,
                                                            sizeof(void *))) == NULL)
        return OOM(call);
    for (int i = 0; i < count; i++)
        if ((resp->deliveries[i] = delivery_out(call, &rows[i])) == NULL)
            return OOM(call);
    resp->n_deliveries = (size_t)count;
    if (more) {
        char token[TOKEN_MAX];
        snprintf(token, sizeof token, "%" PRId64 ".%s", next.created_at_us, next.delivery_id);
        if ((resp->next_page_token = cg_arena_strdup(call->arena, token)) == NULL)
            return OOM(call);
    }
    *response = &resp->base;
    return CG_OK;
}

cg_status cg_rpc_budget_redrive_notification_deliveries(struct cg_rpc_call *call,
                                                        const struct cg_rpc_env *env,
                                                        const ProtobufCMessage *request,
                                                        ProtobufCMessage **response)
{
    const Ctxguard__V1__RedriveNotificationDeliveriesRequest *req =
        (const Ctxguard__V1__RedriveNotificationDeliveriesRequest *)request;
    cg_status st = tenant_wide(call);
    if (st != CG_OK)
        return st;
    if (req->n_delivery_ids > CG_STORE_PAGE_MAX)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'delivery_ids' holds at most %d ids", CG_STORE_PAGE_MAX);
    if (req->n_delivery_ids == 0 && !req->all_dead)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'delivery_ids' is required (or set all_dead)");
    for (size_t i = 0; i < req->n_delivery_ids; i++) {
        char field[48];
        snprintf(field, sizeof field, "delivery_ids[%zu]", i);
        if ((st = cg_rpc_check_uuid(call, field, req->delivery_ids[i])) != CG_OK)
            return st;
    }
    if (req->channel_id[0] != '\0' &&
        (st = cg_rpc_check_uuid(call, "channel_id", req->channel_id)) != CG_OK)
        return st;
    struct cg_op op = cg_rpc_op(call);
    int64_t count = 0;
    struct cg_audit audit;
    cg_rpc_audit(call, &audit);
    if ((st = cg_notify_delivery_redrive(&env->svc, &op, (const char *const *)req->delivery_ids,
                                         (int)req->n_delivery_ids, req->all_dead, req->channel_id,
                                         &audit, &count)) != CG_OK)
        return st;
    Ctxguard__V1__RedriveNotificationDeliveriesResponse *resp =
        NEW(call, Ctxguard__V1__RedriveNotificationDeliveriesResponse,
            ctxguard__v1__redrive_notification_deliveries_response__init);
    if (resp == NULL)
        return OOM(call);
    resp->redriven = count;
    *response = &resp->base;
    return CG_OK;
}
