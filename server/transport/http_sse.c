/* http_sse.c - the JSON API's live feed (http_api.h): a server-streaming method (WatchUsage)
 * as Server-Sent Events.
 *
 * Life of a stream. On the listener's thread the route takes a slot of the caller's
 * (streams_per_key, max_streams) and hands the call to the pool, where the stream opens as
 * the gRPC one does (rpc.h cg_rpc_stream_open: the key, the role, the request's checks, the
 * watcher joined): an error is the API's JSON error and frees the slot; success answers 200
 * text/event-stream with a producer (http.h cg_http_stream). The producer runs on the
 * listener's thread: it sends what is left of the last frame, else polls the method (as a
 * completion-queue thread would: no store, nothing blocks) and frames its message, else
 * lets the connection sleep until the next wake (cg_http_api_wake, from the watch hub: at
 * least every quarter second, so heartbeats go out on time). The stream ends when the method
 * finishes it, when its poll fails (an `error` event first) or when the API drains; a
 * client gone away ends it at the next wake (http.c peeks the socket). done (http.h) frees
 * it and its slot.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "ctxguard/v1/budget.pb-c.h"
#include "rpc/pb_json.h"
#include "transport/http_api_internal.h"

#define RESUME_MARGIN_MS 2000 /* a commit may land this long after its event's time */
#define RETRY_MS 2000         /* the reconnection delay a browser's EventSource is told */
#define MSG_ARENA_FIRST (16 * 1024)

/* One open stream: the call as the rpc layer keeps it, and the frame being written. */
struct cg_http_sse {
    struct cg_http_sse *next, *prev; /* api->streams, under api->lock */
    struct cg_http_api *api;
    struct cg_http_stream *http; /* NULL until answered */
    uint8_t caller[CG_SHA256_LEN];
    const struct cg_rpc_method *method;
    struct cg_rpc_call call;
    struct cg_arena *call_arena; /* the open's: the request, the principal */
    struct cg_arena *msg_arena;  /* one message's, reset before each poll */
    ProtobufCMessage *request;
    struct cg_rpc_stream stream;
    char request_id[CG_HTTP_API_REQUEST_ID_MAX + 1];
    char *frame; /* the frame being written (malloc'd), and how far */
    size_t frame_len, frame_sent;
    bool ending; /* end the body once the frame is out */
};

/* ---------------------------------------------------------------- slots ----------- */

/* Links s into the API's streams when the caller and the API have room. */
static bool slot_take(struct cg_http_api *api, struct cg_http_sse *s)
{
    pthread_mutex_lock(&api->lock);
    int mine = 0;
    for (const struct cg_http_sse *o = api->streams; o != NULL; o = o->next)
        mine += memcmp(o->caller, s->caller, sizeof s->caller) == 0;
    bool ok = !api->closing && api->nstreams < api->max_streams && mine < api->streams_per_key;
    if (ok) {
        s->next = api->streams;
        if (api->streams != NULL)
            api->streams->prev = s;
        api->streams = s;
        api->nstreams++;
    }
    pthread_mutex_unlock(&api->lock);
    return ok;
}

static void slot_give_back(struct cg_http_sse *s)
{
    struct cg_http_api *api = s->api;
    pthread_mutex_lock(&api->lock);
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        api->streams = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    api->nstreams--;
    pthread_mutex_unlock(&api->lock);
}

int cg_http_api_streams(struct cg_http_api *api)
{
    pthread_mutex_lock(&api->lock);
    int n = api->nstreams;
    pthread_mutex_unlock(&api->lock);
    return n;
}

void cg_http_api_wake(struct cg_http_api *api)
{
    pthread_mutex_lock(&api->lock);
    for (struct cg_http_sse *s = api->streams; s != NULL; s = s->next)
        if (s->http != NULL)
            cg_http_stream_wake(s->http);
    pthread_mutex_unlock(&api->lock);
}

/* Frees what the stream holds (unlinked before). */
static void sse_free(struct cg_http_sse *s)
{
    if (s->stream.state_free != NULL && s->stream.state != NULL)
        s->stream.state_free(s->stream.state);
    cg_arena_free(s->msg_arena);
    cg_arena_free(s->call_arena);
    free(s->frame);
    free(s);
}

/* ---------------------------------------------------------------- frames ---------- */

/* The event name of a UsageEvent's type: its enum name without the prefix, in lower case. */
static void event_name(const ProtobufCMessage *msg, char *out, size_t cap)
{
    snprintf(out, cap, "message");
    if (msg->descriptor != &ctxguard__v1__usage_event__descriptor)
        return;
    const Ctxguard__V1__UsageEvent *e = (const Ctxguard__V1__UsageEvent *)msg;
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&ctxguard__v1__usage_event_type__descriptor, e->type);
    static const char prefix[] = "USAGE_EVENT_TYPE_";
    if (v == NULL || strncmp(v->name, prefix, sizeof prefix - 1) != 0)
        return;
    size_t i = 0;
    for (const char *p = v->name + sizeof prefix - 1; *p && i + 1 < cap; p++)
        out[i++] = (*p >= 'A' && *p <= 'Z') ? (char)(*p - 'A' + 'a') : *p;
    out[i] = '\0';
}

/* The frame of one message: its id (a stored event's time), its event name and its JSON
 * (pb_json.h escapes line breaks inside strings: one line). */
static bool frame_message(struct cg_http_sse *s, const ProtobufCMessage *msg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return false;
    if (msg->descriptor == &ctxguard__v1__usage_event__descriptor) {
        const Ctxguard__V1__UsageEvent *e = (const Ctxguard__V1__UsageEvent *)msg;
        if (e->event_id != NULL && e->event_id[0] != '\0')
            fprintf(f, "id: %lld\n", (long long)e->occurred_at_unix_ms);
    }
    char name[48];
    event_name(msg, name, sizeof name);
    fprintf(f, "event: %s\ndata: ", name);
    bool ok = cg_json_write_message(f, msg) == CG_OK;
    fputs("\n\n", f);
    ok = fclose(f) == 0 && ok;
    if (!ok) {
        free(text);
        return false;
    }
    s->frame = text;
    s->frame_len = len;
    s->frame_sent = 0;
    return true;
}

/* The last frame of a stream whose poll failed: the API's error object as an `error` event. */
static void frame_error(struct cg_http_sse *s, cg_status st)
{
    cg_err_field_from_message(&s->call.err);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return;
    const char *msg = cg_err_text(&s->call.err);
    int code = cg_status_grpc_code(st);
    fprintf(f, "event: error\ndata: {\"error\":{\"code\":\"%s\",\"reason\":\"%s\",\"message\":",
            cg_grpc_code_name(code), cg_error_reason_name(cg_err_reason(&s->call.err, st)));
    bool ok = cg_json_write_string(f, msg, strlen(msg)) == CG_OK;
    fprintf(f, ",\"request_id\":\"%s\"}}\n\n", s->request_id);
    ok = fclose(f) == 0 && ok;
    if (!ok) {
        free(text);
        return;
    }
    s->frame = text;
    s->frame_len = len;
    s->frame_sent = 0;
}

/* Polls the method once: a frame to send (true), or nothing now (false). Sets s->ending
 * when the stream is over after it. */
static bool poll_frame(struct cg_http_sse *s)
{
    cg_arena_reset(s->msg_arena);
    s->call.arena = s->msg_arena;
    ProtobufCMessage *msg = NULL;
    bool finished = false;
    cg_status st =
        s->method->poll(&s->call, s->api->stream_env, s->request, &s->stream, &msg, &finished);
    if (st != CG_OK) {
        frame_error(s, st);
        s->ending = true;
        return s->frame != NULL;
    }
    s->ending = finished;
    if (msg != NULL && !frame_message(s, msg)) {
        cg_err_set(&s->call.err, CG_RESOURCE_EXHAUSTED, "out of memory");
        frame_error(s, CG_RESOURCE_EXHAUSTED);
        s->ending = true;
    }
    return s->frame != NULL;
}

/* The producer (http.h cg_http_stream_read_cb), on the listener's thread. */
static long sse_read(void *ctx, char *buf, size_t cap)
{
    struct cg_http_sse *s = ctx;
    if (s->frame == NULL) {
        if (s->ending)
            return -1;
        if (atomic_load(&s->api->streams_closing))
            return -1; /* the server stops: the client reconnects elsewhere */
        if (!poll_frame(s))
            return s->ending ? -1 : 0;
    }
    size_t n = s->frame_len - s->frame_sent;
    if (n > cap)
        n = cap;
    memcpy(buf, s->frame + s->frame_sent, n);
    s->frame_sent += n;
    if (s->frame_sent == s->frame_len) {
        free(s->frame);
        s->frame = NULL;
    }
    return (long)n;
}

static void sse_done(void *ctx)
{
    struct cg_http_sse *s = ctx;
    slot_give_back(s);
    sse_free(s);
}

/* ---------------------------------------------------------------- the open -------- */

/* Last-Event-ID (a stored event's time, as this file writes ids) as the request's
 * resume_from_unix_ms, less the margin, unless the query set that field itself. Any other
 * value is ignored: the stream starts live, as a fresh one. */
static void resume_arg(struct cg_http_api_call *c)
{
    if (c->last_event_id == NULL || c->nargs == CG_HTTP_API_ARGS_MAX)
        return;
    for (int i = 0; i < c->nargs; i++)
        if (strcmp(c->arg_keys[i], "resume_from_unix_ms") == 0)
            return;
    char *end = NULL;
    long long id = strtoll(c->last_event_id, &end, 10);
    if (end == c->last_event_id || *end != '\0' || id <= RESUME_MARGIN_MS)
        return;
    char text[24];
    snprintf(text, sizeof text, "%lld", id - RESUME_MARGIN_MS);
    const char *v = cg_arena_strdup(c->arena, text);
    if (v == NULL)
        return;
    c->arg_keys[c->nargs] = "resume_from_unix_ms";
    c->arg_values[c->nargs++] = v;
}

/* On the pool: opens the stream and answers the request (the first frame says how soon a
 * browser should reconnect). */
static void sse_open(struct cg_job *job, void *thread_ctx)
{
    struct cg_http_api_call *c = (struct cg_http_api_call *)job;
    const struct cg_rpc_env *env = thread_ctx; /* the pool's thread context (http_api.h) */
    struct cg_http_sse *s = c->sse;
    struct cg_http_request *req = c->req;
    s->call.request_id = s->request_id;
    s->call.authorization = c->authorization;
    s->call.deadline_ms = cg_mono_ms() + c->api->max_call_ms;
    s->call.max_message_bytes = c->api->max_message_bytes;
    uint8_t *req_buf = NULL;
    size_t req_len = 0;
    resume_arg(c);
    cg_status st = cg__http_api_build(c, &req_buf, &req_len, &s->call.err);
    if (st == CG_OK) {
        cg_store_set_deadline(env->svc.store, s->call.deadline_ms);
        st =
            cg_rpc_stream_open(s->method, &s->call, env, req_buf, req_len, &s->request, &s->stream);
        cg_store_set_deadline(env->svc.store, 0);
    }
    struct cg_http_stream *http = NULL;
    if (st == CG_OK && (http = cg_http_stream_new(sse_read, sse_done, s)) == NULL)
        st = cg_err_set(&s->call.err, CG_RESOURCE_EXHAUSTED, "out of memory");
    c->arena = NULL; /* s's (call_arena) from here */
    if (st != CG_OK) {
        cg__http_api_error(req, st, &s->call.err, s->request_id);
        slot_give_back(s);
        sse_free(s);
        cg__http_api_call_free(c);
        return;
    }
    pthread_mutex_lock(&s->api->lock);
    s->http = http; /* wakes reach it from now on */
    pthread_mutex_unlock(&s->api->lock);
    char *hello = NULL;
    if (asprintf(&hello, "retry: %d\n\n", RETRY_MS) >= 0) {
        s->frame = hello;
        s->frame_len = strlen(hello);
    }
    static const char *const headers[] = {"X-Accel-Buffering", "no", NULL};
    /* From here the listener owns s (sse_done frees it); wakes may reach it at once. */
    (void)cg_http_respond_stream(req, 200, "text/event-stream; charset=utf-8", headers, http);
    cg__http_api_call_free(c);
}

void cg__http_sse_start(struct cg_http_api_call *c)
{
    struct cg_http_api *api = c->api;
    struct cg_err err;
    cg_err_clear(&err);
    struct cg_http_sse *s = calloc(1, sizeof *s);
    cg_status st = CG_OK;
    if (s == NULL || (s->msg_arena = cg_arena_new(MSG_ARENA_FIRST, api->max_message_bytes * 8 +
                                                                       (1u << 20))) == NULL) {
        st = cg_err_set(&err, CG_RESOURCE_EXHAUSTED, "out of memory");
    } else {
        s->api = api;
        s->method = c->method;
        memcpy(s->caller, c->caller, sizeof s->caller);
        memcpy(s->request_id, c->request_id, sizeof s->request_id);
        /* The open's arena is the call's: it outlives the call's own record. */
        s->call_arena = c->arena;
        s->call.arena = c->arena;
        if (!slot_take(api, s)) {
            s->call_arena = NULL;
            st = cg_err_set(&err, CG_RESOURCE_EXHAUSTED,
                            "too many event streams: at most %d per key and %d in all; close "
                            "one (a browser tab needs one)",
                            api->streams_per_key, api->max_streams);
        }
    }
    if (st == CG_OK) {
        c->job.run = sse_open;
        c->sse = s;
        if (cg_pool_submit(api->pool, &c->job) == CG_OK)
            return;
        slot_give_back(s);
        s->call_arena = NULL;
        st = cg_err_set(&err, CG_UNAVAILABLE, "the server is busy: retry later");
    }
    cg__http_api_error(c->req, st, &err, c->request_id);
    if (s != NULL)
        sse_free(s);
    cg__http_api_call_free(c);
}
