/* llm.h - a client for OpenAI-compatible chat completions: send chat messages, get the
 * assistant's text back, or a classified reason why not.
 *
 * `POST {base_url}/chat/completions` with a JSON body {model, messages, temperature[,
 * max_tokens]} and `Authorization: Bearer <api_key>`, over libcurl (llm.c is the only file
 * that includes curl) with JSON built and parsed by jansson.
 *
 * Time: one call (cg_llm_chat) ends by the earlier of now + timeout_ms and the caller's
 * deadline, all attempts and waits included; each attempt's connect phase is also bounded
 * by connect_timeout_ms. When less than min_attempt_ms is left, nothing is sent.
 * Retries: transport errors and HTTP 408, 409, 429 and 5xx are retried up to max_retries
 * times with exponential backoff and full jitter (core/backoff.h); a delay the server names
 * (retry-after-ms, else Retry-After) is honoured in full or, when it does not fit before
 * the end of the call, not at all. Other answers are not retried.
 * Breaker: a shared circuit breaker (core/breaker.h) counts each call as one outcome; while
 * it is open, calls return CG_LLM_CIRCUIT_OPEN at once without any I/O.
 * Secrets: the API key is sent only in the Authorization header and never logged; neither
 * are request or response bodies (they hold user text). libcurl's usual proxy variables
 * (https_proxy, no_proxy, ...) apply; redirects are not followed.
 *
 * Threads: a struct cg_llm belongs to one thread at a time (a worker-pool thread owns one):
 * it keeps one curl easy handle whose connection is reused (keep-alive). The breaker is
 * shared by all of them and thread-safe. cg_llm_new may be called from several threads.
 */
#ifndef CG_LLM_LLM_H
#define CG_LLM_LLM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/config.h"
#include "base/status.h"
#include "core/breaker.h"

/* Outcomes, numbered as SummaryFallbackReason in proto/ctxguard/v1/context.proto (0 there
 * means "no fallback", here "the LLM answered"), so the rpc layer can cast. */
typedef enum {
    CG_LLM_OK = 0,
    CG_LLM_NOT_CONFIGURED = 1, /* no base_url: nothing was sent */
    CG_LLM_TIMEOUT = 2,        /* no complete answer before the call's end */
    CG_LLM_ERROR = 3,          /* HTTP error or transport failure (after the retries) */
    CG_LLM_RATE_LIMITED = 4,   /* 429 (after the retries) */
    CG_LLM_CIRCUIT_OPEN = 5,   /* the breaker refused: nothing was sent */
    CG_LLM_INVALID_OUTPUT = 6, /* 2xx but unparseable, no choices, empty content, too big */
    CG_LLM_DEADLINE = 8,       /* too little of the caller's deadline left: nothing was sent */
    CG_LLM_BUDGET = 10,        /* a budget the call is charged to refused it: nothing was sent (the
                                * caller's wrapper answers it; cg_llm_chat never does) */
} cg_llm_result;

/* Client settings. Strings are copied by cg_llm_new. */
struct cg_llm_opts {
    const char *base_url; /* "https://api.openai.com/v1"; NULL or "" = not configured */
    const char *api_key;  /* "" sends no Authorization header */
    const char *model;
    double temperature;         /* 0..2 */
    int max_tokens;             /* default for calls that give none; 0: not sent */
    int64_t connect_timeout_ms; /* per attempt */
    int64_t timeout_ms;         /* per call, all attempts included */
    int max_retries;            /* retries after the first attempt */
    int64_t backoff_base_ms;    /* first retry's jitter ceiling */
    int64_t backoff_max_ms;     /* cap of the jitter ceiling */
    int64_t max_retry_after_ms; /* a longer server-named delay ends the retries */
    int64_t min_attempt_ms;     /* least time an attempt needs to be started */
    size_t max_response_bytes;  /* larger bodies are CG_LLM_INVALID_OUTPUT */
};

/* Breaker settings; see core/breaker.h. now_ms is the breaker's clock (NULL: cg_mono_ms);
 * tests pass their own to step through cool-downs without waiting. */
struct cg_llm_breaker_opts {
    struct cg_breaker_policy policy;
    int64_t (*now_ms)(void *arg);
    void *clock_arg;
};

/* One chat message. content is UTF-8 of content_len bytes (need not be NUL-terminated). */
struct cg_llm_message {
    const char *role; /* "system", "user", "assistant" */
    const char *content;
    size_t content_len;
};

struct cg_llm_request {
    const struct cg_llm_message *messages;
    size_t n_messages;   /* >= 1 */
    int max_tokens;      /* > 0 overrides opts.max_tokens */
    int64_t deadline_ms; /* the caller's deadline on the cg_mono_ms clock; 0: none */
    const char *rid;     /* request id for the log lines; may be NULL */
};

/* What a call got. Fill-in only: cg_llm_chat initialises it. */
struct cg_llm_reply {
    char *content;         /* the assistant's text (CG_LLM_OK only), NUL-terminated */
    size_t content_len;    /* bytes, excluding the NUL */
    int64_t prompt_tokens; /* usage from the answer; -1 when absent */
    int64_t completion_tokens;
    char finish_reason[32]; /* "stop", "length", ...; "" when absent */
    int attempts;           /* HTTP requests sent */
    int http_status;        /* of the last attempt; 0 when none got an answer */
    int64_t elapsed_ms;
    char detail[CG_ERR_MSG_MAX]; /* why, for reports: "HTTP 503 after 3 attempts" */
};

struct cg_llm;
struct cg_llm_breaker;

/* Fills opts with the defaults of the config table (base_url "" so not configured). */
void cg_llm_opts_init(struct cg_llm_opts *opts);

/* Fills opts from the llm_* keys of cfg. The strings are borrowed from cfg. */
void cg_llm_opts_from_config(const struct cg_config *cfg, struct cg_llm_opts *opts);

/* The breaker policy of the llm_breaker_* keys, with the ratio rule the client uses
 * (half of the last 20 calls, once 10 are known). */
void cg_llm_breaker_opts_from_config(const struct cg_config *cfg, struct cg_llm_breaker_opts *opts);

/* A breaker to share between the clients of all threads. NULL when out of memory.
 * Thread-safe. */
struct cg_llm_breaker *cg_llm_breaker_new(const struct cg_llm_breaker_opts *opts);

/* Frees a breaker no client uses any more. NULL is a no-op. */
void cg_llm_breaker_free(struct cg_llm_breaker *breaker);

/* The breaker's state now (an open breaker whose cool-down is over reads as half-open).
 * Thread-safe. */
cg_breaker_state cg_llm_breaker_state(struct cg_llm_breaker *breaker);

/* A client for one thread. breaker is borrowed (it must outlive the client) and may be NULL
 * (no breaker). The first call initialises libcurl for the process. A base_url that is not
 * http:// or https://, a missing model or out-of-range numbers give NULL and CG_CONFIG in
 * err; out of memory gives NULL and CG_NOMEM. An empty base_url is valid: every call then
 * answers CG_LLM_NOT_CONFIGURED. Thread-safe (different clients on different threads). */
struct cg_llm *cg_llm_new(const struct cg_llm_opts *opts, struct cg_llm_breaker *breaker,
                          struct cg_err *err);

/* Closes the connection and frees the client (the key is wiped). NULL is a no-op. */
void cg_llm_free(struct cg_llm *llm);

/* Whether the client has an endpoint. */
bool cg_llm_is_configured(const struct cg_llm *llm);

/* Sends the messages, waits for the answer and classifies it. On CG_LLM_OK reply->content
 * holds the assistant's text (non-empty, not only white space); otherwise reply->detail
 * says why (never the key or the bodies) and content is NULL. Either way the reply is the
 * caller's to clean with cg_llm_reply_cleanup. Messages that are not valid UTF-8, no
 * messages or a NULL role give CG_LLM_ERROR without I/O. Logs one line per call with rid:
 * warn when it failed, debug when it succeeded or the breaker refused it (the opening was
 * logged), none when not configured. Not thread-safe for one client. */
cg_llm_result cg_llm_chat(struct cg_llm *llm, const struct cg_llm_request *req,
                          struct cg_llm_reply *reply) CG_MUST_CHECK;

/* Reads the assistant's text (choices[0].message.content), finish_reason and usage out of
 * a chat-completions response body of len bytes into reply, whose content must be NULL
 * (a zeroed reply). CG_LLM_OK, or CG_LLM_INVALID_OUTPUT with reply->detail saying what is
 * wrong (not JSON, no choices, no content, empty content), or CG_LLM_ERROR when out of
 * memory. cg_llm_chat uses it on 2xx answers; exposed for tests and fuzzing. Thread-safe. */
cg_llm_result cg_llm_parse_answer(const char *body, size_t len,
                                  struct cg_llm_reply *reply) CG_MUST_CHECK;

/* Frees what a reply holds. Safe on a zeroed reply and idempotent. */
void cg_llm_reply_cleanup(struct cg_llm_reply *reply);

/* "OK", "NOT_CONFIGURED", "TIMEOUT", "LLM_ERROR", "RATE_LIMITED", "CIRCUIT_OPEN",
 * "INVALID_OUTPUT", "DEADLINE"; "UNKNOWN" otherwise. */
const char *cg_llm_result_name(cg_llm_result result);

/* Releases libcurl's global state; for the end of main() after every client is freed. */
void cg_llm_global_cleanup(void);

#endif
