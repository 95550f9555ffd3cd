/* rpc_context_count.c - ContextService.CountTokens and the exact tokenizers it counts with
 * (the estimate recorded and the calibration read, and that of Commit / RecordUsage, are
 * service/calibration.c).
 *
 * Exact counts (a model that maps to cl100k_base / o200k_base, or `encoding` named) follow
 * OpenAI's chat accounting (the cookbook's num_tokens_from_messages), extended to every
 * part ctxguard carries:
 *   - each message: 3 + tokens(role) + its parts + (a name: tokens(name) + 1);
 *   - text and reasoning parts: their text; a tool call: tokens(name) + tokens(arguments)
 *     + 3 of framing; a tool result: its content (and its images);
 *   - images: OpenAI's tile rule from their dimensions (85 + 170 per 512-px tile after
 *     scaling into 2048 px and 768 px on the short side; 85 for detail "low"), 765 (a
 *     1024 x 1024 image at high detail) when the size is unknown (core/estimate.h);
 *   - reply priming: 3 when there is at least one message;
 *   - tool definitions: each one as the compact JSON the API receives,
 *     {"type":"function","function":{"name":N,"description":D,"parameters":P}} (description
 *     and parameters left out when empty, P as given), counted with the encoding. OpenAI
 *     renders tools into the prompt in a form it does not publish; this is a fixed, stated
 *     rule, not a claim of identity with the provider's count.
 * `text` is counted bare. The counts are identical to tiktoken's for each text counted.
 *
 * Everything else is estimated (core/estimate.h) with the model's profile; an unknown model
 * gets the default profile (never an error). An estimate is recorded under a new
 * estimate_id together with the read of the tenant's calibration for the model (one
 * statement); a factor learned from at least one provider count multiplies the estimate
 * and the answer says CALIBRATED. With PostgreSQL unreachable the estimate is still given,
 * uncalibrated and without an estimate_id (logged).
 *
 * Threads: an exact count of a small request runs on the completion-queue thread (the
 * method is try_inline; it needs no store); a large one, or an estimate, runs on the pool.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/estimate.h"
#include "core/models.h"
#include "core/tok.h"
#include "ctxguard/v1/context.pb-c.h"
#include "rpc/rpc_context.h"
#include "rpc/rpc_conv.h"
#include "rpc/rpc_handlers.h"
#include "service/calibration.h"
#include "service/tokenizers.h"

/* Requests up to this size are counted on the completion-queue thread (about a millisecond
 * of counting); larger ones go to the pool so that one big count does not stall the
 * queue's other calls. */
#define INLINE_REQUEST_MAX (64 * 1024)

#define MESSAGE_FRAMING 3 /* <|start|>role ... <|end|> */
#define NAME_FRAMING 1
#define TOOL_CALL_FRAMING 3
#define REPLY_PRIMING 3 /* <|start|>assistant<|message|> */

/* ------------------------------------------------------------------ exact counts --- */

/* Where the tokens went (TokenBreakdown). */
struct tally {
    int64_t content, overhead, tools, images, text;
};

struct exact {
    struct cg_rpc_call *call;
    const struct cg_tok_encoding *enc;
    struct cg_tok_cache *memo; /* a large request's: repeated words are counted once */
    bool allow_special;
    bool failed; /* a count ran out of memory */
};

static int64_t tok(struct exact *x, const char *s, size_t len)
{
    if (len == 0)
        return 0;
    int64_t n = cg_tok_count_cached(x->enc, x->memo, s, len, x->allow_special);
    if (n < 0) {
        x->failed = true;
        return 0;
    }
    return n;
}

static int64_t image_tokens(const struct cg_image *img)
{
    return cg_estimate_image(CG_PROFILE_OPENAI, img->width, img->height, img->detail.ptr);
}

/* A JSON string of s[0..len) appended to buf at *at (buf has room: 6 bytes per byte). */
static void json_string(char *buf, size_t *at, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    buf[(*at)++] = '"';
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            buf[(*at)++] = '\\';
            buf[(*at)++] = (char)c;
        } else if (c == '\n' || c == '\r' || c == '\t' || c == '\b' || c == '\f') {
            buf[(*at)++] = '\\';
            buf[(*at)++] = c == '\n'   ? 'n'
                           : c == '\r' ? 'r'
                           : c == '\t' ? 't'
                           : c == '\b' ? 'b'
                                       : 'f';
        } else if (c < 0x20) {
            memcpy(buf + *at, "\\u00", 4);
            buf[*at + 4] = hex[c >> 4];
            buf[*at + 5] = hex[c & 15];
            *at += 6;
        } else {
            buf[(*at)++] = (char)c;
        }
    }
    buf[(*at)++] = '"';
}

static void append(char *buf, size_t *at, const char *s)
{
    size_t n = strlen(s);
    memcpy(buf + *at, s, n);
    *at += n;
}

/* Tokens of one tool definition as its compact JSON (see the file's comment). */
static int64_t tool_tokens(struct exact *x, const struct cg_tool_def *t)
{
    /* The fixed text is 69 bytes, the four quotes 4; a string byte takes at most 6. */
    size_t cap = 128 + 6 * (t->name.len + t->description.len) + t->parameters.len;
    char *buf = cg_arena_alloc(x->call->arena, cap);
    if (buf == NULL) {
        x->failed = true;
        return 0;
    }
    size_t at = 0;
    append(buf, &at, "{\"type\":\"function\",\"function\":{\"name\":");
    json_string(buf, &at, t->name.ptr, t->name.len);
    if (t->description.len > 0) {
        append(buf, &at, ",\"description\":");
        json_string(buf, &at, t->description.ptr, t->description.len);
    }
    if (t->parameters.len > 0) {
        append(buf, &at, ",\"parameters\":");
        memcpy(buf + at, t->parameters.ptr, t->parameters.len);
        at += t->parameters.len;
    }
    append(buf, &at, "}}");
    return tok(x, buf, at);
}

/* Counts conv exactly into *t and per_message[0..n_messages). */
static cg_status exact_conv(struct exact *x, const struct cg_conv *conv, int64_t *per_message,
                            struct tally *t)
{
    for (size_t mi = 0; mi < conv->n_messages; mi++) {
        const struct cg_message *m = &conv->messages[mi];
        const char *role = cg_conv_role_name(m->role);
        int64_t content = 0, images = 0;
        int64_t overhead = MESSAGE_FRAMING + tok(x, role, strlen(role));
        if (m->name.len > 0) {
            content += tok(x, m->name.ptr, m->name.len);
            overhead += NAME_FRAMING;
        }
        for (size_t pi = 0; pi < m->n_parts; pi++) {
            const struct cg_part *p = &m->parts[pi];
            switch (p->kind) {
            case CG_PART_TEXT:
                content += tok(x, p->u.text.ptr, p->u.text.len);
                break;
            case CG_PART_TOOL_CALL:
                content += tok(x, p->u.tool_call.name.ptr, p->u.tool_call.name.len) +
                           tok(x, p->u.tool_call.arguments.ptr, p->u.tool_call.arguments.len);
                overhead += TOOL_CALL_FRAMING;
                break;
            case CG_PART_TOOL_RESULT:
                content += tok(x, p->u.tool_result.content.ptr, p->u.tool_result.content.len);
                for (size_t k = 0; k < p->u.tool_result.n_images; k++)
                    images += image_tokens(&p->u.tool_result.images[k]);
                break;
            case CG_PART_IMAGE:
                images += image_tokens(&p->u.image);
                break;
            case CG_PART_REASONING:
                content += tok(x, p->u.reasoning.text.ptr, p->u.reasoning.text.len);
                break;
            }
        }
        per_message[mi] = content + overhead + images;
        t->content += content;
        t->overhead += overhead;
        t->images += images;
    }
    if (conv->n_messages > 0)
        t->overhead += REPLY_PRIMING;
    for (size_t i = 0; i < conv->n_tools; i++)
        t->tools += tool_tokens(x, &conv->tools[i]);
    if (x->failed)
        return cg_err_set(&x->call->err, CG_RESOURCE_EXHAUSTED,
                          "out of memory while counting tokens");
    return CG_OK;
}

/* ------------------------------------------------------------------ estimates ------ */

/* The model name calibrations are kept under: the request's, in lower case. */
static char *model_key(struct cg_rpc_call *call, const char *model)
{
    char *key = cg_arena_strdup(call->arena, model);
    for (char *p = key; p != NULL && *p; p++)
        *p = (char)tolower((unsigned char)*p);
    return key;
}

/* Records the estimate and reads the calibration (service/calibration.c: on store trouble
 * the estimate goes out uncalibrated and without an id, logged). */
static void record_estimate(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                            const char *model, int64_t raw_total, char **estimate_id,
                            struct cg_calibration *cal)
{
    struct cg_op op = cg_rpc_op(call);
    char id[CG_UUID_LEN + 1];
    cg_calibration_estimate(&env->svc, &op, model, raw_total, id, cal);
    *estimate_id = id[0] != '\0' ? cg_arena_strdup(call->arena, id) : NULL;
}

/* ------------------------------------------------------------------ the handler ---- */

static cg_status check_request(struct cg_rpc_call *call,
                               const Ctxguard__V1__CountTokensRequest *req)
{
    if (req->conversation == NULL && req->text[0] == '\0')
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'conversation' is required (or a non-empty 'text')");
    cg_status st = cg_rpc_check_name(call, "model", req->model, CG_MODELS_NAME_MAX, false);
    if (st != CG_OK)
        return st;
    if (req->encoding != CTXGUARD__V1__TOKEN_ENCODING__TOKEN_ENCODING_UNSPECIFIED &&
        req->encoding != CTXGUARD__V1__TOKEN_ENCODING__TOKEN_ENCODING_CL100K_BASE &&
        req->encoding != CTXGUARD__V1__TOKEN_ENCODING__TOKEN_ENCODING_O200K_BASE)
        return cg_err_set(&call->err, CG_INVALID_ARGUMENT,
                          "field 'encoding': unknown value %d (CL100K_BASE or O200K_BASE)",
                          (int)req->encoding);
    return CG_OK;
}

static Ctxguard__V1__CountTokensResponse *response_new(struct cg_rpc_call *call, size_t n_messages)
{
    Ctxguard__V1__CountTokensResponse *resp =
        cg_arena_alloc(call->arena, sizeof(Ctxguard__V1__CountTokensResponse));
    Ctxguard__V1__TokenBreakdown *b =
        cg_arena_alloc(call->arena, sizeof(Ctxguard__V1__TokenBreakdown));
    if (resp == NULL || b == NULL)
        return NULL;
    ctxguard__v1__count_tokens_response__init(resp);
    ctxguard__v1__token_breakdown__init(b);
    resp->breakdown = b;
    if (n_messages > 0) {
        resp->message_tokens = cg_arena_calloc(call->arena, n_messages, sizeof(int64_t));
        if (resp->message_tokens == NULL)
            return NULL;
        resp->n_message_tokens = n_messages;
    }
    return resp;
}

static void tally_out(Ctxguard__V1__CountTokensResponse *resp, const struct tally *t)
{
    resp->breakdown->content_tokens = t->content;
    resp->breakdown->overhead_tokens = t->overhead;
    resp->breakdown->tool_definition_tokens = t->tools;
    resp->breakdown->image_tokens = t->images;
    resp->breakdown->text_tokens = t->text;
    resp->total_tokens = t->content + t->overhead + t->tools + t->images + t->text;
}

static cg_status count_exact(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                             const Ctxguard__V1__CountTokensRequest *req, cg_encoding encoding,
                             const struct cg_conv *conv, bool large,
                             Ctxguard__V1__CountTokensResponse *resp)
{
    const struct cg_tok_encoding *enc = cg_tokenizer(env->svc.tokenizers, encoding);
    if (enc == NULL)
        return cg_err_setr(&call->err, CG_UNAVAILABLE, CG_ERR_TOKENIZER_NOT_LOADED,
                           "the %s tokenizer is not loaded", cg_models_encoding_name(encoding));
    struct exact x = {.call = call, .enc = enc, .allow_special = req->allow_special_tokens};
    /* A large request (on the pool) counts through a memo of its own (~160 KB): the words
     * of a conversation repeat, and each is then tokenized once. A small one would spend
     * more making the memo than it saves. */
    if (large)
        x.memo = cg_tok_cache_new();
    struct tally t = {0};
    cg_status st = conv != NULL ? exact_conv(&x, conv, resp->message_tokens, &t) : CG_OK;
    if (st == CG_OK)
        t.text = tok(&x, req->text, strlen(req->text));
    cg_tok_cache_free(x.memo);
    if (st != CG_OK)
        return st;
    if (x.failed)
        return cg_err_set(&call->err, CG_RESOURCE_EXHAUSTED, "out of memory while counting tokens");
    tally_out(resp, &t);
    resp->method = CTXGUARD__V1__TOKEN_COUNT_METHOD__TOKEN_COUNT_METHOD_EXACT;
    resp->encoding = (Ctxguard__V1__TokenEncoding)encoding;
    return CG_OK;
}

static cg_status count_estimated(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                 const Ctxguard__V1__CountTokensRequest *req, cg_profile profile,
                                 const struct cg_conv *conv,
                                 Ctxguard__V1__CountTokensResponse *resp)
{
    size_t text_len = strlen(req->text);
    struct cg_est_features f = {0};
    cg_estimate_scan(req->text, text_len, &f);
    double raw_text = text_len > 0 ? cg_estimate_tokens(profile, &f) : 0;
    struct cg_estimate est = {0};
    struct cg_err cerr;
    cg_err_clear(&cerr);
    /* The raw estimate first: it is what the provider's count will be compared with. */
    if (conv != NULL && cg_estimate_conv(conv, profile, 1.0, NULL, &est, &cerr) != CG_OK)
        return cg_err_set(&call->err, CG_INTERNAL, "estimate: %s", cerr.msg);
    int64_t raw_total = est.total + (int64_t)ceil(raw_text);

    const char *key = model_key(call, req->model);
    if (key == NULL)
        return OOM(call);
    struct cg_calibration cal;
    char *estimate_id = NULL;
    record_estimate(call, env, key, raw_total, &estimate_id, &cal);
    bool calibrated = cal.samples > 0 && cal.factor >= CG_CALIBRATION_FACTOR_MIN &&
                      cal.factor <= CG_CALIBRATION_FACTOR_MAX;
    double factor = calibrated ? cal.factor : 1.0;

    if (conv != NULL &&
        cg_estimate_conv(conv, profile, factor, resp->message_tokens, &est, &cerr) != CG_OK)
        return cg_err_set(&call->err, CG_INTERNAL, "estimate: %s", cerr.msg);
    struct tally t = {
        .content = est.content_tokens,
        .overhead = est.overhead_tokens,
        .tools = est.tool_definition_tokens,
        .images = est.image_tokens,
        .text = (int64_t)ceil(raw_text * factor),
    };
    tally_out(resp, &t);
    double text_bound =
        raw_text * factor * cg_estimate_bound(profile, cg_estimate_classify(&f), raw_text);
    resp->error_bound_tokens = est.error_bound + (int64_t)ceil(text_bound);
    resp->method = calibrated ? CTXGUARD__V1__TOKEN_COUNT_METHOD__TOKEN_COUNT_METHOD_CALIBRATED
                              : CTXGUARD__V1__TOKEN_COUNT_METHOD__TOKEN_COUNT_METHOD_ESTIMATED;
    resp->estimator_profile = (char *)cg_models_profile_name(profile);
    if (estimate_id != NULL)
        resp->estimate_id = estimate_id;
    if (calibrated) {
        Ctxguard__V1__Calibration *c =
            cg_arena_alloc(call->arena, sizeof(Ctxguard__V1__Calibration));
        if (c == NULL)
            return OOM(call);
        ctxguard__v1__calibration__init(c);
        c->factor = cal.factor;
        c->samples = cal.samples;
        c->updated_at_unix_ms = cal.updated_at_ms;
        resp->calibration = c;
    }
    return CG_OK;
}

/* The model's entry: the `model_map` setting first (checked at start; parsed here, it is
 * small), then the built-in table. */
static void lookup_model(struct cg_rpc_call *call, const struct cg_rpc_env *env, const char *model,
                         struct cg_model_info *out)
{
    const char *text = env->svc.config ? env->svc.config->model_map : NULL;
    if (text == NULL || text[0] == '\0') {
        cg_models_lookup(model, out);
        return;
    }
    struct cg_model_map *map = cg_arena_alloc(call->arena, sizeof *map);
    struct cg_err err;
    if (map == NULL || cg_models_map_parse(text, map, &err) != CG_OK)
        map = NULL;
    cg_models_lookup_with(map, model, out);
}

cg_status cg_rpc_context_count_tokens(struct cg_rpc_call *call, const struct cg_rpc_env *env,
                                      const ProtobufCMessage *request, ProtobufCMessage **response,
                                      cg_op_fate *fate)
{
    *fate = CG_OP_DONE;
    const Ctxguard__V1__CountTokensRequest *req = (const Ctxguard__V1__CountTokensRequest *)request;
    cg_status st = check_request(call, req);
    if (st != CG_OK)
        return st;
    struct cg_model_info info;
    lookup_model(call, env, req->model, &info);
    cg_encoding encoding = req->encoding != 0 ? (cg_encoding)req->encoding : info.encoding;
    /* On the completion-queue thread: only small exact counts (see INLINE_REQUEST_MAX). */
    bool large = protobuf_c_message_get_packed_size(request) > INLINE_REQUEST_MAX;
    if (env->svc.store == NULL && (encoding == CG_ENCODING_NONE || large)) {
        *fate = CG_OP_NEEDS_STORE;
        return CG_OK;
    }

    struct cg_conv *conv = NULL;
    if (req->conversation != NULL &&
        (st = cg_rpc_conv_in(call, "conversation", req->conversation, &conv)) != CG_OK)
        return st;
    Ctxguard__V1__CountTokensResponse *resp =
        response_new(call, conv != NULL ? conv->n_messages : 0);
    if (resp == NULL)
        st = OOM(call);
    else if (encoding != CG_ENCODING_NONE)
        st = count_exact(call, env, req, encoding, conv, large, resp);
    else
        st = count_estimated(call, env, req, info.profile, conv, resp);
    cg_conv_free(conv);
    if (st != CG_OK)
        return st;
    resp->context_window_tokens = info.known ? info.context_window : 0;
    *response = &resp->base;
    return CG_OK;
}
