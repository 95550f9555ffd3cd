/* llm.c - the chat-completions client over libcurl. The only file that includes curl; the
 * JSON is llm_json.c's, the shared breaker llm_breaker.c's.
 *
 * One call is a loop of attempts on one reused easy handle, bounded in time by the call's
 * end (timeout_ms or the caller's deadline, the earlier), in number by max_retries, and
 * guarded by the shared breaker, which hears one outcome per call. Answers that say
 * something about the request rather than the endpoint (400, 413, 422) are not counted by
 * the breaker: one oversized input must not turn the summarizer off for everyone.
 */
#include "llm/llm.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <curl/curl.h>

#include "base/clock.h"
#include "base/crypto.h"
#include "base/log.h"
#include "core/backoff.h"
#include "llm/llm_internal.h"

#define MOD "llm"
#define PATH "/chat/completions"
#define URL_MAX 2048
#define MODEL_MAX 256
#define KEY_MAX 4096
#define BODY_INITIAL_CAP 16384
#define BODY_KEEP_CAP 65536 /* a bigger buffer is freed after the call that needed it */
#define RESPONSE_BYTES_MAX ((size_t)1 << 30)

/* The response body of the current attempt, capped at max bytes. */
struct body {
    char *data;
    size_t len, cap, max;
    bool too_big;
    bool no_memory;
};

struct cg_llm {
    CURL *curl;
    struct curl_slist *headers; /* one of them holds the key: wiped before it is freed */
    char url[URL_MAX];
    char model[MODEL_MAX];
    struct cg_llm_opts opts; /* strings point into this struct or are NULL */
    struct cg_llm_breaker *breaker;
    bool configured;
    uint64_t rng;
    struct body body;
    int64_t retry_after_ms;        /* Retry-After of the current attempt's answer, -1: none */
    int64_t retry_after_header_ms; /* retry-after-ms of the same, -1: none */
    char errbuf[CURL_ERROR_SIZE];
};

/* What one attempt came to. */
struct attempt {
    cg_llm_result result;
    bool retryable;
    bool counts_for_breaker;
    int64_t retry_after_ms; /* -1: the server named no delay */
};

/* ------------------------------------------------------------------ setup --- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc = CURLE_FAILED_INIT;

static void curl_init(void)
{
    curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

bool cg__llm_curl_ready(void)
{
    pthread_once(&curl_once, curl_init);
    return curl_init_rc == CURLE_OK;
}

void cg_llm_global_cleanup(void)
{
    if (curl_init_rc == CURLE_OK)
        curl_global_cleanup();
}

void cg_llm_opts_init(struct cg_llm_opts *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->base_url = "";
    opts->api_key = "";
    opts->model = "gpt-4o-mini";
    opts->temperature = 0.2;
    opts->connect_timeout_ms = 2000;
    opts->timeout_ms = 20000;
    opts->max_retries = 2;
    opts->backoff_base_ms = 250;
    opts->backoff_max_ms = 4000;
    opts->max_retry_after_ms = 30000;
    opts->min_attempt_ms = 100;
    opts->max_response_bytes = 1048576;
}

void cg_llm_opts_from_config(const struct cg_config *cfg, struct cg_llm_opts *opts)
{
    cg_llm_opts_init(opts);
    opts->base_url = cfg->llm_base_url;
    opts->api_key = cfg->llm_api_key;
    opts->model = cfg->llm_model;
    opts->temperature = cfg->llm_temperature;
    opts->connect_timeout_ms = cfg->llm_connect_timeout_ms;
    opts->timeout_ms = cfg->llm_timeout_ms;
    opts->max_retries = (int)cfg->llm_max_retries;
    opts->max_response_bytes = (size_t)cfg->llm_max_response_bytes;
}

/* ------------------------------------------------------------- callbacks --- */

static size_t on_body(char *data, size_t size, size_t nmemb, void *arg)
{
    struct body *b = arg;
    size_t n = size * nmemb;
    if (n > b->max - b->len) {
        b->too_big = true;
        return 0; /* aborts the transfer with CURLE_WRITE_ERROR */
    }
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : BODY_INITIAL_CAP;
        while (cap < b->len + n + 1)
            cap *= 2;
        if (cap > b->max + 1)
            cap = b->max + 1;
        char *grown = realloc(b->data, cap);
        if (grown == NULL) {
            b->no_memory = true;
            return 0;
        }
        b->data = grown;
        b->cap = cap;
    }
    memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return n;
}

/* Whether line (len bytes, no NUL) is the header `name:` and, if so, where its value is. */
static bool header_value(const char *line, size_t len, const char *name, const char **value,
                         size_t *value_len)
{
    size_t n = strlen(name);
    if (len <= n || line[n] != ':' || strncasecmp(line, name, n) != 0)
        return false;
    *value = line + n + 1;
    *value_len = len - n - 1;
    while (*value_len > 0 && ((*value)[*value_len - 1] == '\r' || (*value)[*value_len - 1] == '\n'))
        (*value_len)--;
    return true;
}

static size_t on_header(char *line, size_t size, size_t nitems, void *arg)
{
    struct cg_llm *llm = arg;
    size_t len = size * nitems;
    /* A status line starts a new response (after a 100 Continue, say): forget the last. */
    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        llm->retry_after_ms = -1;
        llm->retry_after_header_ms = -1;
        return len;
    }
    const char *value;
    size_t value_len;
    int64_t ms;
    if (header_value(line, len, "retry-after-ms", &value, &value_len)) {
        if (cg_backoff_parse_retry_after_ms(value, value_len, &ms))
            llm->retry_after_header_ms = ms;
    } else if (header_value(line, len, "retry-after", &value, &value_len)) {
        if (cg_backoff_parse_retry_after(value, value_len, cg_wall_ms(), &ms))
            llm->retry_after_ms = ms;
    }
    return len;
}

/* ------------------------------------------------------------ the client --- */

static bool has_prefix_nocase(const char *s, const char *prefix)
{
    return strncasecmp(s, prefix, strlen(prefix)) == 0;
}

static void wipe_headers(struct curl_slist *headers)
{
    for (struct curl_slist *h = headers; h != NULL; h = h->next)
        explicit_bzero(h->data, strlen(h->data));
    curl_slist_free_all(headers);
}

static cg_status check_opts(const struct cg_llm_opts *o, struct cg_err *err)
{
    if (o->base_url == NULL || o->base_url[0] == '\0')
        return CG_OK;
    if (!has_prefix_nocase(o->base_url, "http://") && !has_prefix_nocase(o->base_url, "https://"))
        return cg_err_set(err, CG_CONFIG, "llm_base_url: must start with http:// or https://");
    if (strlen(o->base_url) + sizeof PATH > URL_MAX)
        return cg_err_set(err, CG_CONFIG, "llm_base_url: longer than %d bytes", URL_MAX - 32);
    if (o->model == NULL || o->model[0] == '\0' || strlen(o->model) >= MODEL_MAX)
        return cg_err_set(err, CG_CONFIG, "llm_model: must be 1..%d bytes", MODEL_MAX - 1);
    if (o->api_key != NULL && (strlen(o->api_key) > KEY_MAX || strpbrk(o->api_key, "\r\n")))
        return cg_err_set(err, CG_CONFIG, "llm_api_key: too long or holds a line break");
    if (!isfinite(o->temperature) || o->temperature < 0 || o->temperature > 2)
        return cg_err_set(err, CG_CONFIG, "llm_temperature: must be 0..2");
    if (o->connect_timeout_ms <= 0 || o->timeout_ms <= 0 || o->min_attempt_ms < 0)
        return cg_err_set(err, CG_CONFIG, "llm timeouts must be positive");
    if (o->max_retries < 0 || o->max_retries > CG_BACKOFF_RETRIES_MAX)
        return cg_err_set(err, CG_CONFIG, "llm_max_retries: must be 0..%d", CG_BACKOFF_RETRIES_MAX);
    if (o->max_response_bytes < 1 || o->max_response_bytes > RESPONSE_BYTES_MAX)
        return cg_err_set(err, CG_CONFIG, "llm_max_response_bytes: must be 1..%zu",
                          RESPONSE_BYTES_MAX);
    if (o->max_tokens < 0)
        return cg_err_set(err, CG_CONFIG, "llm max_tokens: must not be negative");
    return CG_OK;
}

/* The options that stay the same for every call of this client. */
static cg_status setup_handle(struct cg_llm *llm, const char *api_key, struct cg_err *err)
{
    struct curl_slist *h = NULL, *next;
    static const char *const fixed[] = {"Content-Type: application/json",
                                        "Accept: application/json", "Expect:"};
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++) {
        next = curl_slist_append(h, fixed[i]);
        if (next == NULL)
            goto nomem;
        h = next;
    }
    if (api_key != NULL && api_key[0] != '\0') {
        size_t n = strlen("Authorization: Bearer ") + strlen(api_key) + 1;
        char *auth = malloc(n);
        if (auth == NULL)
            goto nomem;
        snprintf(auth, n, "Authorization: Bearer %s", api_key);
        next = curl_slist_append(h, auth);
        explicit_bzero(auth, n);
        free(auth);
        if (next == NULL)
            goto nomem;
        h = next;
    }
    llm->headers = h;

    CURL *c = llm->curl;
    int rc = CURLE_OK;
    /* Each setopt result is collected: any failure means this libcurl lacks something. */
    rc |= curl_easy_setopt(c, CURLOPT_URL, llm->url);
    rc |= curl_easy_setopt(c, CURLOPT_HTTPHEADER, llm->headers);
    rc |= curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    rc |= curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    rc |= curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    rc |= curl_easy_setopt(c, CURLOPT_USERAGENT, "ctxguard/" CG_VERSION);
    rc |= curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
    rc |= curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
    rc |= curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)llm->opts.max_response_bytes);
    rc |= curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    rc |= curl_easy_setopt(c, CURLOPT_WRITEDATA, &llm->body);
    rc |= curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    rc |= curl_easy_setopt(c, CURLOPT_HEADERDATA, llm);
    rc |= curl_easy_setopt(c, CURLOPT_ERRORBUFFER, llm->errbuf);
    rc |= curl_easy_setopt(c, CURLOPT_POST, 1L);
    if (rc != CURLE_OK)
        return cg_err_set(err, CG_CONFIG, "llm: libcurl rejected an option");
    return CG_OK;
nomem:
    wipe_headers(h);
    return cg_err_set(err, CG_NOMEM, "llm: out of memory");
}

struct cg_llm *cg_llm_new(const struct cg_llm_opts *opts, struct cg_llm_breaker *breaker,
                          struct cg_err *err)
{
    cg_status st = check_opts(opts, err);
    if (st != CG_OK)
        return NULL;
    struct cg_llm *llm = calloc(1, sizeof *llm);
    if (llm == NULL) {
        cg_err_set(err, CG_NOMEM, "llm: out of memory");
        return NULL;
    }
    llm->opts = *opts;
    llm->opts.base_url = NULL;
    llm->opts.api_key = NULL;
    llm->opts.model = llm->model;
    llm->breaker = breaker;
    llm->retry_after_ms = -1;
    llm->retry_after_header_ms = -1;
    llm->body.max = opts->max_response_bytes;
    if (cg_random_bytes(&llm->rng, sizeof llm->rng) != CG_OK)
        llm->rng = (uint64_t)cg_mono_ns() ^ (uint64_t)(uintptr_t)llm;
    if (opts->base_url == NULL || opts->base_url[0] == '\0')
        return llm; /* not configured: every call says so, no curl needed */

    llm->configured = true;
    size_t blen = strlen(opts->base_url);
    while (blen > 0 && opts->base_url[blen - 1] == '/')
        blen--;
    snprintf(llm->url, sizeof llm->url, "%.*s%s", (int)blen, opts->base_url, PATH);
    snprintf(llm->model, sizeof llm->model, "%s", opts->model);

    pthread_once(&curl_once, curl_init);
    if (curl_init_rc != CURLE_OK) {
        cg_err_set(err, CG_IO, "llm: libcurl initialisation failed: %s",
                   curl_easy_strerror(curl_init_rc));
        goto fail;
    }
    /* A URL libcurl cannot parse fails here, at start-up, not on every call. */
    CURLU *parsed = curl_url();
    CURLUcode uc = parsed ? curl_url_set(parsed, CURLUPART_URL, llm->url, 0) : CURLUE_OUT_OF_MEMORY;
    curl_url_cleanup(parsed);
    if (uc != CURLUE_OK) {
        cg_err_set(err, uc == CURLUE_OUT_OF_MEMORY ? CG_NOMEM : CG_CONFIG,
                   "llm_base_url: not a valid URL (%s)", curl_url_strerror(uc));
        goto fail;
    }
    llm->curl = curl_easy_init();
    if (llm->curl == NULL) {
        cg_err_set(err, CG_NOMEM, "llm: curl_easy_init failed");
        goto fail;
    }
    if (setup_handle(llm, opts->api_key, err) != CG_OK)
        goto fail;
    return llm;
fail:
    cg_llm_free(llm);
    return NULL;
}

void cg_llm_free(struct cg_llm *llm)
{
    if (llm == NULL)
        return;
    if (llm->curl != NULL)
        curl_easy_cleanup(llm->curl);
    wipe_headers(llm->headers);
    free(llm->body.data);
    free(llm);
}

bool cg_llm_is_configured(const struct cg_llm *llm)
{
    return llm != NULL && llm->configured;
}

void cg_llm_reply_cleanup(struct cg_llm_reply *reply)
{
    free(reply->content);
    reply->content = NULL;
    reply->content_len = 0;
}

const char *cg_llm_result_name(cg_llm_result result)
{
    switch (result) {
    case CG_LLM_OK:
        return "OK";
    case CG_LLM_NOT_CONFIGURED:
        return "NOT_CONFIGURED";
    case CG_LLM_TIMEOUT:
        return "TIMEOUT";
    case CG_LLM_ERROR:
        return "LLM_ERROR";
    case CG_LLM_RATE_LIMITED:
        return "RATE_LIMITED";
    case CG_LLM_CIRCUIT_OPEN:
        return "CIRCUIT_OPEN";
    case CG_LLM_INVALID_OUTPUT:
        return "INVALID_OUTPUT";
    case CG_LLM_DEADLINE:
        return "DEADLINE";
    case CG_LLM_BUDGET:
        return "BUDGET_EXHAUSTED";
    }
    return "UNKNOWN";
}

/* ---------------------------------------------------------------- a call --- */

/* splitmix64 step: the jitter needs spread, not secrecy. */
static uint64_t next_random(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static bool transport_retryable(CURLcode rc)
{
    switch (rc) {
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_OPERATION_TIMEDOUT:
        return true;
    default:
        return false;
    }
}

/* Sends the request once, with at most `budget_ms` for the whole exchange. */
static struct attempt attempt_once(struct cg_llm *llm, int64_t budget_ms,
                                   struct cg_llm_reply *reply)
{
    struct attempt a = {.result = CG_LLM_ERROR, .counts_for_breaker = true, .retry_after_ms = -1};
    struct body *b = &llm->body;
    b->len = 0;
    b->too_big = false;
    b->no_memory = false;
    llm->retry_after_ms = -1;
    llm->retry_after_header_ms = -1;
    llm->errbuf[0] = '\0';
    /* 0 would mean "no timeout" to libcurl: an attempt always gets at least 1 ms. */
    if (budget_ms < 1)
        budget_ms = 1;
    int64_t connect_ms =
        llm->opts.connect_timeout_ms < budget_ms ? llm->opts.connect_timeout_ms : budget_ms;
    curl_easy_setopt(llm->curl, CURLOPT_CONNECTTIMEOUT_MS, (long)connect_ms);
    curl_easy_setopt(llm->curl, CURLOPT_TIMEOUT_MS, (long)budget_ms);

    CURLcode rc = curl_easy_perform(llm->curl);
    reply->attempts++;
    long status = 0;
    curl_easy_getinfo(llm->curl, CURLINFO_RESPONSE_CODE, &status);
    reply->http_status = (int)status;

    if (rc == CURLE_OK) {
        if (status >= 200 && status < 300) {
            a.result = cg_llm_parse_answer(b->data, b->len, reply);
            return a;
        }
        snprintf(reply->detail, sizeof reply->detail, "HTTP %ld", status);
        a.result = status == 429 ? CG_LLM_RATE_LIMITED : CG_LLM_ERROR;
        a.retryable = status == 408 || status == 409 || status == 429 || status >= 500;
        a.counts_for_breaker = !(status == 400 || status == 413 || status == 422);
        if (a.retryable)
            a.retry_after_ms =
                llm->retry_after_header_ms >= 0 ? llm->retry_after_header_ms : llm->retry_after_ms;
        return a;
    }
    if (b->too_big || rc == CURLE_FILESIZE_EXCEEDED) {
        snprintf(reply->detail, sizeof reply->detail, "the answer is larger than %zu bytes",
                 b->max);
        a.result = CG_LLM_INVALID_OUTPUT;
        return a;
    }
    if (b->no_memory) {
        snprintf(reply->detail, sizeof reply->detail, "out of memory reading the answer");
        return a;
    }
    a.result = rc == CURLE_OPERATION_TIMEDOUT ? CG_LLM_TIMEOUT : CG_LLM_ERROR;
    a.retryable = transport_retryable(rc);
    snprintf(reply->detail, sizeof reply->detail, "%.140s",
             llm->errbuf[0] ? llm->errbuf : curl_easy_strerror(rc));
    return a;
}

static void sleep_until_mono_ms(int64_t until_ms)
{
    struct timespec ts = {.tv_sec = until_ms / 1000, .tv_nsec = (until_ms % 1000) * 1000000};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void log_call(cg_llm_result result, const struct cg_llm_reply *reply, const char *rid)
{
    /* A refusal by the open breaker is routine until it closes; its opening was logged. */
    cg_log_level level =
        result == CG_LLM_OK || result == CG_LLM_CIRCUIT_OPEN ? CG_LOG_DEBUG : CG_LOG_WARN;
    if (!cg_log_enabled(level))
        return;
    char attempts[16], status[16], elapsed[24];
    snprintf(attempts, sizeof attempts, "%d", reply->attempts);
    snprintf(status, sizeof status, "%d", reply->http_status);
    snprintf(elapsed, sizeof elapsed, "%lld", (long long)reply->elapsed_ms);
    struct cg_kv kv[] = {{"result", cg_llm_result_name(result)},
                         {"attempts", attempts},
                         {"http_status", status},
                         {"elapsed_ms", elapsed},
                         {"detail", reply->detail}};
    cg_log_kv(level, MOD, rid, result == CG_LLM_OK ? "llm call" : "llm call failed", kv,
              (int)(sizeof kv / sizeof kv[0]));
}

static void body_trim(struct body *b)
{
    if (b->cap > BODY_KEEP_CAP) {
        free(b->data);
        b->data = NULL;
        b->cap = 0;
    }
    b->len = 0;
}

cg_llm_result cg_llm_chat(struct cg_llm *llm, const struct cg_llm_request *req,
                          struct cg_llm_reply *reply)
{
    memset(reply, 0, sizeof *reply);
    reply->prompt_tokens = -1;
    reply->completion_tokens = -1;
    int64_t start = cg_mono_ms();
    const char *rid = req->rid;
    cg_llm_result result;
    char *request_body = NULL;

    if (!llm->configured) {
        snprintf(reply->detail, sizeof reply->detail, "no LLM endpoint configured");
        return CG_LLM_NOT_CONFIGURED;
    }
    if (req->messages == NULL || req->n_messages == 0) {
        snprintf(reply->detail, sizeof reply->detail, "no messages to send");
        result = CG_LLM_ERROR;
        goto out;
    }
    int64_t end = start + llm->opts.timeout_ms;
    if (req->deadline_ms > 0 && req->deadline_ms < end)
        end = req->deadline_ms;
    if (end - start < llm->opts.min_attempt_ms) {
        if (end - start <= 0)
            snprintf(reply->detail, sizeof reply->detail, "the deadline has passed");
        else
            snprintf(reply->detail, sizeof reply->detail, "only %lld ms left of the deadline",
                     (long long)(end - start));
        result = CG_LLM_DEADLINE;
        goto out;
    }
    int max_tokens = req->max_tokens > 0 ? req->max_tokens : llm->opts.max_tokens;
    request_body =
        cg__llm_request_json(llm->model, llm->opts.temperature, max_tokens, req->messages,
                             req->n_messages, reply->detail, sizeof reply->detail);
    if (request_body == NULL) {
        result = CG_LLM_ERROR;
        goto out;
    }
    struct cg_breaker_ticket ticket;
    if (!cg__llm_breaker_acquire(llm->breaker, &ticket, reply->detail, sizeof reply->detail)) {
        result = CG_LLM_CIRCUIT_OPEN;
        goto out;
    }
    curl_easy_setopt(llm->curl, CURLOPT_POSTFIELDS, request_body);
    curl_easy_setopt(llm->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(request_body));

    const struct cg_backoff_policy policy = {.max_retries = llm->opts.max_retries,
                                             .base_ms = llm->opts.backoff_base_ms,
                                             .max_ms = llm->opts.backoff_max_ms,
                                             .max_retry_after_ms = llm->opts.max_retry_after_ms};
    struct attempt a;
    bool wait_refused = false; /* the server named a delay that does not fit */
    for (;;) {
        a = attempt_once(llm, end - cg_mono_ms(), reply);
        if (a.result == CG_LLM_OK || !a.retryable)
            break;
        int64_t now = cg_mono_ms(), delay;
        cg_backoff_verdict v =
            cg_backoff_next(&policy, reply->attempts, a.retry_after_ms, now, end,
                            llm->opts.min_attempt_ms, next_random(&llm->rng), &delay);
        if (v != CG_BACKOFF_RETRY) {
            wait_refused = a.retry_after_ms >= 0 && v != CG_BACKOFF_NO_RETRIES_LEFT;
            break;
        }
        sleep_until_mono_ms(now + delay);
    }
    /* Keep the last attempt's reason and say how many attempts it took, and why no more. */
    size_t n = strlen(reply->detail);
    if (a.result != CG_LLM_OK && reply->attempts > 1)
        n += (size_t)snprintf(reply->detail + n, sizeof reply->detail - n, " (after %d attempts)",
                              reply->attempts);
    if (wait_refused && n < sizeof reply->detail)
        snprintf(reply->detail + n, sizeof reply->detail - n,
                 "; the server asked to wait %lld ms, more than the call has left",
                 (long long)a.retry_after_ms);
    result = a.result;
    cg__llm_breaker_report(llm->breaker, ticket, a.result == CG_LLM_OK || a.counts_for_breaker,
                           a.result == CG_LLM_OK, rid);
out:
    /* The body may hold user text; it is freed, never kept or logged. */
    free(request_body);
    body_trim(&llm->body);
    reply->elapsed_ms = cg_mono_ms() - start;
    if (result != CG_LLM_OK)
        cg_llm_reply_cleanup(reply);
    log_call(result, reply, rid);
    return result;
}
