/* test_llm.c - the LLM client (llm/llm.h) against a real HTTP server on loopback.
 *
 * Each test starts its own tests/support/fake_llm.py (no PostgreSQL or Redis needed) and
 * picks the server's behaviour with the model name or its control endpoint. What the client
 * sent is read back from the server's request log, so retries, the breaker's silence and
 * the headers are checked on the wire, not inferred. Timings are asserted generously: an
 * upper bound of about twice the limit, a lower bound only where a wait is the point.
 */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "base/clock.h"
#include "base/log.h"
#include "ctxguard/v1/context.pb-c.h"
#include "fake_llm.h"
#include "llm/llm.h"

#define TEST_KEY "sk-test-Zq81vXw0pLmN4rT6yU2b"
#define MARKER "marker-Kf93-user-text"
#define FALLBACK(name) CTXGUARD__V1__SUMMARY_FALLBACK_REASON__SUMMARY_FALLBACK_REASON_##name

static struct cg_fake_llm F;

static void setup(void)
{
    /* A proxy from the environment must not sit between the client and the loopback. */
    setenv("no_proxy", "127.0.0.1,localhost", 1);
    setenv("NO_PROXY", "127.0.0.1,localhost", 1);
    cg_fake_llm_start(&F);
}

static void teardown(void)
{
    cg_fake_llm_stop(&F);
}

TestSuite(llm, .init = setup, .fini = teardown, .timeout = 30);

/* Options for the fake server: short backoff so retries are quick, generous timeouts. */
static struct cg_llm_opts test_opts(const char *model)
{
    struct cg_llm_opts o;
    cg_llm_opts_init(&o);
    o.base_url = F.base_url;
    o.api_key = TEST_KEY;
    o.model = model;
    o.connect_timeout_ms = 1000;
    o.timeout_ms = 5000;
    o.max_retries = 2;
    o.backoff_base_ms = 20;
    o.backoff_max_ms = 100;
    o.min_attempt_ms = 50;
    o.max_response_bytes = 65536;
    return o;
}

static struct cg_llm *client(const struct cg_llm_opts *o, struct cg_llm_breaker *breaker)
{
    struct cg_err err = {0};
    struct cg_llm *llm = cg_llm_new(o, breaker, &err);
    cr_assert_not_null(llm, "cg_llm_new: %s", err.msg);
    return llm;
}

static const struct cg_llm_message two_messages[] = {
    {"system", "Summarize the conversation.", 27},
    {"user", "Grüße aus Köln, 日本語も " MARKER, sizeof("Grüße aus Köln, 日本語も " MARKER) - 1},
};

static struct cg_llm_request request(int64_t deadline_ms)
{
    struct cg_llm_request r = {
        .messages = two_messages, .n_messages = 2, .deadline_ms = deadline_ms, .rid = "test-rid"};
    return r;
}

/* One call with the default request; the reply is the caller's to clean up. */
static cg_llm_result chat(struct cg_llm *llm, struct cg_llm_reply *reply)
{
    struct cg_llm_request r = request(0);
    return cg_llm_chat(llm, &r, reply);
}

static json_t *nth_request(json_t *all, size_t i)
{
    json_t *e = json_array_get(all, i);
    cr_assert_not_null(e, "no request %zu in the log", i);
    return e;
}

/* ------------------------------------------------------------------ answers --- */

Test(llm, normal_answer_gives_text_usage_and_sends_what_was_asked)
{
    struct cg_llm_opts o = test_opts("ok");
    o.max_tokens = 300;
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_OK, "%s", reply.detail);
    cr_assert_not_null(reply.content);
    cr_assert(strstr(reply.content, "Summary of 2 messages") != NULL, "%s", reply.content);
    cr_assert(strstr(reply.content, MARKER) != NULL, "the answer echoes the last message");
    cr_assert_eq(reply.content_len, strlen(reply.content));
    cr_assert_gt(reply.prompt_tokens, 0);
    cr_assert_gt(reply.completion_tokens, 0);
    cr_assert_str_eq(reply.finish_reason, "stop");
    cr_assert_eq(reply.attempts, 1);
    cr_assert_eq(reply.http_status, 200);
    cg_llm_reply_cleanup(&reply);

    json_t *all = cg_fake_llm_requests(&F);
    cr_assert_eq(json_array_size(all), 1);
    json_t *e = nth_request(all, 0);
    cr_assert_str_eq(json_string_value(json_object_get(e, "path")), "/v1/chat/completions");
    json_t *headers = json_object_get(e, "headers");
    const char *auth = json_string_value(json_object_get(headers, "authorization"));
    cr_assert_not_null(auth, "no Authorization header");
    /* Compared, never printed. */
    cr_assert(strcmp(auth, "Bearer " TEST_KEY) == 0, "Authorization is not the Bearer key");
    cr_assert_str_eq(json_string_value(json_object_get(headers, "content-type")),
                     "application/json");
    json_t *body = json_object_get(e, "body");
    cr_assert_str_eq(json_string_value(json_object_get(body, "model")), "ok");
    cr_assert_float_eq(json_number_value(json_object_get(body, "temperature")), 0.2, 1e-9);
    cr_assert_eq(json_integer_value(json_object_get(body, "max_tokens")), 300);
    json_t *msgs = json_object_get(body, "messages");
    cr_assert_eq(json_array_size(msgs), 2);
    for (size_t i = 0; i < 2; i++) {
        json_t *m = json_array_get(msgs, i);
        cr_assert_str_eq(json_string_value(json_object_get(m, "role")), two_messages[i].role);
        cr_assert_str_eq(json_string_value(json_object_get(m, "content")), two_messages[i].content,
                         "UTF-8 text arrives unchanged");
    }
    json_decref(all);
    cg_llm_free(llm);
}

Test(llm, per_call_max_tokens_and_no_max_tokens)
{
    struct cg_llm *llm = client(&(struct cg_llm_opts){0}, NULL);
    cg_llm_free(llm); /* a zeroed opts is "not configured": valid */
    struct cg_llm_opts o = test_opts("ok");
    llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_OK, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    struct cg_llm_request r = request(0);
    r.max_tokens = 64;
    cr_assert_eq(cg_llm_chat(llm, &r, &reply), CG_LLM_OK, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    json_t *all = cg_fake_llm_requests(&F);
    cr_assert_null(json_object_get(json_object_get(nth_request(all, 0), "body"), "max_tokens"),
                   "max_tokens 0 is not sent");
    cr_assert_eq(json_integer_value(
                     json_object_get(json_object_get(nth_request(all, 1), "body"), "max_tokens")),
                 64);
    json_decref(all);
    cg_llm_free(llm);
}

Test(llm, one_client_reuses_its_connection)
{
    struct cg_llm_opts o = test_opts("ok");
    struct cg_llm *llm = client(&o, NULL);
    for (int i = 0; i < 5; i++) {
        struct cg_llm_reply reply;
        cr_assert_eq(chat(llm, &reply), CG_LLM_OK, "%s", reply.detail);
        cg_llm_reply_cleanup(&reply);
    }
    json_t *all = cg_fake_llm_requests(&F);
    cr_assert_eq(json_array_size(all), 5);
    json_int_t port = json_integer_value(json_object_get(nth_request(all, 0), "client_port"));
    for (size_t i = 1; i < 5; i++)
        cr_assert_eq(json_integer_value(json_object_get(nth_request(all, i), "client_port")), port,
                     "request %zu came on another connection", i);
    json_decref(all);
    cg_llm_free(llm);
}

Test(llm, an_answer_longer_than_the_input_is_still_an_answer)
{
    /* Judging the summary (smaller than what it replaces) is the summarizer's job. */
    struct cg_llm_opts o = test_opts("long");
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_OK, "%s", reply.detail);
    cr_assert_gt(reply.content_len, two_messages[0].content_len + two_messages[1].content_len);
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);
}

Test(llm, unusable_answers_are_invalid_output_and_not_retried)
{
    const char *models[] = {"garbage", "empty", "blank", "nochoices", "nullcontent"};
    for (size_t i = 0; i < sizeof models / sizeof models[0]; i++) {
        struct cg_llm_opts o = test_opts(models[i]);
        struct cg_llm *llm = client(&o, NULL);
        struct cg_llm_reply reply;
        size_t before = cg_fake_llm_count(&F);
        cr_assert_eq(chat(llm, &reply), CG_LLM_INVALID_OUTPUT, "%s: %s", models[i], reply.detail);
        cr_assert_null(reply.content);
        cr_assert_eq(reply.attempts, 1, "%s", models[i]);
        cr_assert_eq(cg_fake_llm_count(&F), before + 1, "%s was retried", models[i]);
        cr_assert_neq(reply.detail[0], '\0');
        cg_llm_reply_cleanup(&reply);
        cg_llm_free(llm);
    }
}

Test(llm, response_cap_refuses_a_huge_answer_and_keeps_a_fitting_one)
{
    struct cg_llm_opts o = test_opts("huge:200000");
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_INVALID_OUTPUT, "%s", reply.detail);
    cr_assert(strstr(reply.detail, "larger than 65536 bytes") != NULL, "%s", reply.detail);
    cr_assert_eq(reply.attempts, 1);
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);

    o = test_opts("huge:60000");
    llm = client(&o, NULL);
    cr_assert_eq(chat(llm, &reply), CG_LLM_OK, "%s", reply.detail);
    cr_assert_eq(reply.content_len, 60000);
    cg_llm_reply_cleanup(&reply);
    /* And the client still works on the same handle after a refused body. */
    cg_llm_free(llm);
}

/* ------------------------------------------------------------------ retries --- */

Test(llm, server_errors_are_retried_until_success)
{
    struct cg_llm_opts o = test_opts("status:500:2");
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_OK, "%s", reply.detail);
    cr_assert_eq(reply.attempts, 3);
    cr_assert_eq(cg_fake_llm_count(&F), 3, "two failures, then the answer");
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);
}

Test(llm, persistent_server_errors_end_as_llm_error_after_the_retries)
{
    struct cg_llm_opts o = test_opts("status:503:all");
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_ERROR, "%s", reply.detail);
    cr_assert_eq(reply.attempts, 3);
    cr_assert_eq(reply.http_status, 503);
    cr_assert(strstr(reply.detail, "HTTP 503") && strstr(reply.detail, "3 attempts"), "%s",
              reply.detail);
    cr_assert_eq(cg_fake_llm_count(&F), 3, "1 attempt + max_retries 2");
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);
}

Test(llm, rate_limits_end_as_rate_limited)
{
    struct cg_llm_opts o = test_opts("status:429:all:ram=10");
    o.max_retries = 4;
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_RATE_LIMITED, "%s", reply.detail);
    cr_assert_eq(reply.attempts, 5);
    cr_assert_eq(cg_fake_llm_count(&F), 5);
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);
}

Test(llm, client_errors_are_not_retried)
{
    struct cg_llm_opts o = test_opts("status:401:all");
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_ERROR, "%s", reply.detail);
    cr_assert_eq(reply.attempts, 1);
    cr_assert_eq(reply.http_status, 401);
    cr_assert_eq(cg_fake_llm_count(&F), 1);
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);
}

static double gap_seconds(json_t *all, size_t a, size_t b)
{
    return json_real_value(json_object_get(nth_request(all, b), "ts")) -
           json_real_value(json_object_get(nth_request(all, a), "ts"));
}

Test(llm, retry_after_seconds_is_honoured)
{
    /* The backoff alone would wait at most 20 ms; the server asks for a second. */
    struct cg_llm_opts o = test_opts("status:429:1:ra=1");
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_OK, "%s", reply.detail);
    cr_assert_eq(reply.attempts, 2);
    cr_assert_geq(reply.elapsed_ms, 1000);
    cr_assert_lt(reply.elapsed_ms, 3000);
    json_t *all = cg_fake_llm_requests(&F);
    cr_assert_eq(json_array_size(all), 2);
    cr_assert_geq(gap_seconds(all, 0, 1), 0.99, "retried after %.3f s", gap_seconds(all, 0, 1));
    json_decref(all);
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);
}

Test(llm, retry_after_ms_wins_over_retry_after)
{
    struct cg_llm_opts o = test_opts("status:503:1:ra=4:ram=300");
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_OK, "%s", reply.detail);
    json_t *all = cg_fake_llm_requests(&F);
    cr_assert_eq(json_array_size(all), 2);
    double gap = gap_seconds(all, 0, 1);
    cr_assert(gap >= 0.29 && gap < 2.0, "retried after %.3f s, asked 0.3 s", gap);
    json_decref(all);
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);
}

Test(llm, a_retry_after_past_the_deadline_is_not_waited_for)
{
    struct cg_llm_opts o = test_opts("status:429:all:ra=5");
    o.timeout_ms = 1500;
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_RATE_LIMITED, "%s", reply.detail);
    cr_assert_eq(reply.attempts, 1);
    cr_assert_lt(reply.elapsed_ms, 1000, "gave up at once instead of sleeping");
    cr_assert(strstr(reply.detail, "asked to wait 5000 ms") != NULL, "%s", reply.detail);
    cr_assert_eq(cg_fake_llm_count(&F), 1);
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);
}

Test(llm, a_connection_closed_mid_answer_is_retried_then_llm_error)
{
    struct cg_llm_opts o = test_opts("cut");
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_ERROR, "%s", reply.detail);
    cr_assert_eq(reply.attempts, 3);
    cr_assert_eq(cg_fake_llm_count(&F), 3);
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);
}

Test(llm, a_port_nobody_listens_on_is_llm_error)
{
    /* A socket bound but not listening holds the port, so connections to it are refused
     * and no other test's server can take it meanwhile. */
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in addr = {.sin_family = AF_INET};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t alen = sizeof addr;
    cr_assert_eq(bind(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&addr, &alen), 0);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/v1", ntohs(addr.sin_port));
    struct cg_llm_opts o = test_opts("ok");
    o.base_url = url;
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_ERROR, "%s", reply.detail);
    cr_assert_eq(reply.attempts, 3, "connection refused is retried");
    cr_assert_eq(reply.http_status, 0);
    cr_assert_lt(reply.elapsed_ms, 3000);
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);
    close(fd);
}

/* ----------------------------------------------------------------- time --- */

Test(llm, a_slow_answer_times_out_within_the_timeout)
{
    struct cg_llm_opts o = test_opts("slow:4000");
    o.timeout_ms = 600;
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    int64_t t0 = cg_mono_ms();
    cr_assert_eq(chat(llm, &reply), CG_LLM_TIMEOUT, "%s", reply.detail);
    int64_t took = cg_mono_ms() - t0;
    cr_assert_lt(took, 1200, "took %lld ms for a 600 ms timeout", (long long)took);
    cr_assert_geq(took, 500, "gave up early: %lld ms", (long long)took);
    cr_assert_eq(reply.attempts, 1, "no time is left for a retry");
    cr_assert_eq(cg_fake_llm_wait_count(&F, 1, 2000), 1);
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);
}

Test(llm, the_callers_deadline_shortens_the_timeout)
{
    struct cg_llm_opts o = test_opts("slow:4000");
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    int64_t t0 = cg_mono_ms();
    struct cg_llm_request r = request(t0 + 400);
    cr_assert_eq(cg_llm_chat(llm, &r, &reply), CG_LLM_TIMEOUT, "%s", reply.detail);
    int64_t took = cg_mono_ms() - t0;
    cr_assert_lt(took, 800, "took %lld ms for a 400 ms deadline", (long long)took);
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);
}

Test(llm, too_little_time_left_sends_nothing)
{
    struct cg_llm_opts o = test_opts("ok");
    struct cg_llm *llm = client(&o, NULL);
    struct cg_llm_reply reply;
    int64_t now = cg_mono_ms();
    const int64_t deadlines[] = {now + 20, now, now - 1000};
    for (size_t i = 0; i < 3; i++) {
        struct cg_llm_request r = request(deadlines[i]);
        cr_assert_eq(cg_llm_chat(llm, &r, &reply), CG_LLM_DEADLINE, "%s", reply.detail);
        cr_assert_eq(reply.attempts, 0);
        cg_llm_reply_cleanup(&reply);
    }
    cr_assert_eq(cg_fake_llm_count(&F), 0);
    cg_llm_free(llm);
}

/* -------------------------------------------------------------- breaker --- */

static int64_t fake_now_ms;

static int64_t fake_clock(void *arg)
{
    (void)arg;
    return fake_now_ms;
}

static struct cg_llm_breaker *fake_clock_breaker(int failures, int64_t cooldown_ms)
{
    struct cg_llm_breaker_opts bo = {
        .policy = {.failure_threshold = failures, .cooldown_ms = cooldown_ms},
        .now_ms = fake_clock};
    struct cg_llm_breaker *b = cg_llm_breaker_new(&bo);
    cr_assert_not_null(b);
    return b;
}

Test(llm, breaker_opens_after_n_failures_and_closes_after_a_good_probe)
{
    fake_now_ms = 1000000;
    struct cg_llm_breaker *breaker = fake_clock_breaker(3, 30000);
    struct cg_llm_opts o = test_opts("ok");
    o.max_retries = 0;
    struct cg_llm *llm = client(&o, breaker);
    struct cg_llm_reply reply;

    cg_fake_llm_control(&F, "status:500:all");
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(chat(llm, &reply), CG_LLM_ERROR, "%s", reply.detail);
        cg_llm_reply_cleanup(&reply);
    }
    cr_assert_eq(cg_fake_llm_count(&F), 3);
    cr_assert_eq(cg_llm_breaker_state(breaker), CG_BREAKER_OPEN);

    /* Open: refused at once, and the server hears nothing. */
    cg_fake_llm_control(&F, "");
    cr_assert_eq(chat(llm, &reply), CG_LLM_CIRCUIT_OPEN, "%s", reply.detail);
    cr_assert_eq(reply.attempts, 0);
    cr_assert(strstr(reply.detail, "next probe in 30000 ms") != NULL, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    fake_now_ms += 29999;
    cr_assert_eq(chat(llm, &reply), CG_LLM_CIRCUIT_OPEN, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    cr_assert_eq(cg_fake_llm_count(&F), 3, "no request while open");

    /* After the cool-down one probe goes; the server answers and the breaker closes. */
    fake_now_ms += 1;
    cr_assert_eq(cg_llm_breaker_state(breaker), CG_BREAKER_HALF_OPEN);
    cr_assert_eq(chat(llm, &reply), CG_LLM_OK, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    cr_assert_eq(cg_llm_breaker_state(breaker), CG_BREAKER_CLOSED);
    cr_assert_eq(chat(llm, &reply), CG_LLM_OK, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    cr_assert_eq(cg_fake_llm_count(&F), 5);
    cg_llm_free(llm);
    cg_llm_breaker_free(breaker);
}

Test(llm, a_failed_probe_reopens_the_breaker)
{
    fake_now_ms = 0;
    struct cg_llm_breaker *breaker = fake_clock_breaker(2, 5000);
    struct cg_llm_opts o = test_opts("status:500:all");
    o.max_retries = 0;
    struct cg_llm *llm = client(&o, breaker);
    struct cg_llm_reply reply;
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(chat(llm, &reply), CG_LLM_ERROR, "%s", reply.detail);
        cg_llm_reply_cleanup(&reply);
    }
    fake_now_ms = 5000;
    cr_assert_eq(chat(llm, &reply), CG_LLM_ERROR, "the probe fails: %s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    cr_assert_eq(cg_llm_breaker_state(breaker), CG_BREAKER_OPEN);
    fake_now_ms = 9999;
    cr_assert_eq(chat(llm, &reply), CG_LLM_CIRCUIT_OPEN, "a new cool-down from the probe");
    cg_llm_reply_cleanup(&reply);
    cr_assert_eq(cg_fake_llm_count(&F), 3);
    cg_llm_free(llm);
    cg_llm_breaker_free(breaker);
}

Test(llm, breaker_counts_a_call_not_its_retries_and_ignores_bad_requests)
{
    fake_now_ms = 0;
    struct cg_llm_breaker *breaker = fake_clock_breaker(2, 5000);
    struct cg_llm_opts o = test_opts("status:400:all");
    struct cg_llm *llm = client(&o, breaker);
    struct cg_llm_reply reply;
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(chat(llm, &reply), CG_LLM_ERROR, "%s", reply.detail);
        cg_llm_reply_cleanup(&reply);
    }
    cr_assert_eq(cg_llm_breaker_state(breaker), CG_BREAKER_CLOSED,
                 "a 400 is about the request, not the endpoint");
    cg_llm_free(llm);

    o = test_opts("status:502:all"); /* 3 attempts per call */
    llm = client(&o, breaker);
    cr_assert_eq(chat(llm, &reply), CG_LLM_ERROR, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    cr_assert_eq(cg_llm_breaker_state(breaker), CG_BREAKER_CLOSED, "one call, one failure");
    cr_assert_eq(chat(llm, &reply), CG_LLM_ERROR, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    cr_assert_eq(cg_llm_breaker_state(breaker), CG_BREAKER_OPEN);
    cr_assert_eq(cg_fake_llm_count(&F), 4 + 6);
    cg_llm_free(llm);
    cg_llm_breaker_free(breaker);
}

Test(llm, breaker_on_the_real_clock_lets_a_probe_through_after_the_cooldown)
{
    struct cg_llm_breaker_opts bo = {.policy = {.failure_threshold = 1, .cooldown_ms = 150}};
    struct cg_llm_breaker *breaker = cg_llm_breaker_new(&bo);
    cr_assert_not_null(breaker);
    struct cg_llm_opts o = test_opts("ok");
    o.max_retries = 0;
    struct cg_llm *llm = client(&o, breaker);
    struct cg_llm_reply reply;
    cg_fake_llm_control(&F, "garbage");
    cr_assert_eq(chat(llm, &reply), CG_LLM_INVALID_OUTPUT, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    int64_t opened = cg_mono_ms();
    cg_fake_llm_control(&F, "");
    cr_assert_eq(chat(llm, &reply), CG_LLM_CIRCUIT_OPEN, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    /* Not a race: the monotonic clock only moves forward, so after this wait the cool-down
     * is over whatever the scheduling. */
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 160 * 1000000L};
    nanosleep(&ts, NULL);
    cr_assert_geq(cg_mono_ms() - opened, 150);
    cr_assert_eq(chat(llm, &reply), CG_LLM_OK, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    cr_assert_eq(cg_llm_breaker_state(breaker), CG_BREAKER_CLOSED);
    cr_assert_eq(cg_fake_llm_count(&F), 2);
    cg_llm_free(llm);
    cg_llm_breaker_free(breaker);
}

/* ------------------------------------------------------------- threads --- */

struct worker {
    struct cg_llm_breaker *breaker;
    int ok;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct cg_llm_opts o = test_opts("ok");
    struct cg_err err;
    struct cg_llm *llm = cg_llm_new(&o, w->breaker, &err);
    if (llm == NULL)
        return NULL;
    for (int i = 0; i < 10; i++) {
        struct cg_llm_reply reply;
        if (chat(llm, &reply) == CG_LLM_OK)
            w->ok++;
        cg_llm_reply_cleanup(&reply);
    }
    cg_llm_free(llm);
    return NULL;
}

Test(llm, clients_on_several_threads_share_one_breaker)
{
    struct cg_llm_breaker_opts bo = {.policy = {.failure_threshold = 3, .cooldown_ms = 1000}};
    struct cg_llm_breaker *breaker = cg_llm_breaker_new(&bo);
    cr_assert_not_null(breaker);
    struct worker w[4] = {{breaker, 0}, {breaker, 0}, {breaker, 0}, {breaker, 0}};
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(t[i], NULL);
        cr_assert_eq(w[i].ok, 10, "thread %d: %d of 10", i, w[i].ok);
    }
    cr_assert_eq(cg_fake_llm_count(&F), 40);
    cr_assert_eq(cg_llm_breaker_state(breaker), CG_BREAKER_CLOSED);
    cg_llm_breaker_free(breaker);
}

/* ------------------------------------------------------- input and setup --- */

Test(llm, not_configured_and_bad_input_send_nothing)
{
    struct cg_llm_opts o = test_opts("ok");
    o.base_url = "";
    struct cg_llm *llm = client(&o, NULL);
    cr_assert_not(cg_llm_is_configured(llm));
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_NOT_CONFIGURED);
    cg_llm_reply_cleanup(&reply);
    cg_llm_free(llm);

    o = test_opts("ok");
    llm = client(&o, NULL);
    cr_assert(cg_llm_is_configured(llm));
    const struct cg_llm_message bad_utf8[] = {{"user", "caf\xc3 \xff", 6}};
    struct cg_llm_request r = {.messages = bad_utf8, .n_messages = 1};
    cr_assert_eq(cg_llm_chat(llm, &r, &reply), CG_LLM_ERROR);
    cr_assert(strstr(reply.detail, "UTF-8") != NULL, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    r.n_messages = 0;
    cr_assert_eq(cg_llm_chat(llm, &r, &reply), CG_LLM_ERROR);
    cg_llm_reply_cleanup(&reply);
    const struct cg_llm_message no_role[] = {{NULL, "x", 1}};
    r.messages = no_role;
    r.n_messages = 1;
    cr_assert_eq(cg_llm_chat(llm, &r, &reply), CG_LLM_ERROR);
    cg_llm_reply_cleanup(&reply);
    cr_assert_eq(cg_fake_llm_count(&F), 0);
    cg_llm_free(llm);
}

Test(llm, bad_options_are_refused)
{
    struct {
        const char *url, *model;
        double temperature;
    } bad[] = {
        {"ftp://127.0.0.1/v1", "m", 0.2},     {"127.0.0.1:8080/v1", "m", 0.2},
        {"http://127.0.0.1/v1", "", 0.2},     {"http://127.0.0.1/v1", "m", 2.5},
        {"http://127.0.0.1/v1", "m", -1},     {"http://[::1/v1", "m", 0.2},
        {"http://exa mple.com/v1", "m", 0.2},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct cg_llm_opts o = test_opts(bad[i].model);
        o.base_url = bad[i].url;
        o.temperature = bad[i].temperature;
        struct cg_err err = {0};
        cr_assert_null(cg_llm_new(&o, NULL, &err), "case %zu accepted", i);
        cr_assert_eq(err.code, CG_CONFIG, "case %zu", i);
    }
    struct cg_llm_opts o = test_opts("m");
    o.api_key = "sk-abc\r\nX-Injected: 1";
    struct cg_err err = {0};
    cr_assert_null(cg_llm_new(&o, NULL, &err), "a key with a line break");
    cr_assert(strstr(err.msg, "sk-abc") == NULL, "the error shows the key");
}

Test(llm, the_key_and_the_text_never_reach_the_log)
{
    char path[] = "/tmp/cg_llm_log_XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cg_log_setup(CG_LOG_DEBUG, CG_LOG_LOGFMT, fd);

    fake_now_ms = 0;
    struct cg_llm_breaker *breaker = fake_clock_breaker(1, 1000);
    struct cg_llm_opts o = test_opts("ok");
    o.timeout_ms = 400;
    o.max_retries = 1;
    struct cg_llm *llm = client(&o, breaker);
    struct cg_llm_reply reply;
    const char *behaviours[] = {"", "status:401:all", "", "slow:2000", "", "", "garbage"};
    const cg_llm_result expected[] = {CG_LLM_OK, CG_LLM_ERROR, CG_LLM_CIRCUIT_OPEN,  CG_LLM_TIMEOUT,
                                      CG_LLM_OK, CG_LLM_OK,    CG_LLM_INVALID_OUTPUT};
    for (size_t i = 0; i < sizeof behaviours / sizeof behaviours[0]; i++) {
        cg_fake_llm_control(&F, behaviours[i]);
        if (i == 3)
            fake_now_ms = 1000; /* the probe: times out, the breaker opens again */
        if (i == 4)
            fake_now_ms = 2000;
        cr_assert_eq(chat(llm, &reply), expected[i], "step %zu: %s %s", i,
                     cg_llm_result_name(expected[i]), reply.detail);
        cr_assert(strstr(reply.detail, TEST_KEY) == NULL);
        cg_llm_reply_cleanup(&reply);
    }
    cg_llm_free(llm);
    cg_llm_breaker_free(breaker);
    cg_log_setup(CG_LOG_INFO, CG_LOG_LOGFMT, 2);

    char log[65536] = {0};
    ssize_t n = pread(fd, log, sizeof log - 1, 0);
    close(fd);
    unlink(path);
    cr_assert_gt(n, 0, "nothing was logged");
    /* The log did record the calls (so the absence below means something)... */
    cr_assert(strstr(log, "mod=llm") != NULL);
    cr_assert(strstr(log, "rid=test-rid") != NULL);
    cr_assert(strstr(log, "result=LLM_ERROR") != NULL);
    cr_assert(strstr(log, "result=TIMEOUT") != NULL);
    cr_assert(strstr(log, "result=INVALID_OUTPUT") != NULL);
    cr_assert(strstr(log, "circuit breaker opened") != NULL);
    cr_assert(strstr(log, "circuit breaker closed") != NULL);
    /* ...and holds neither the key nor the user's text. */
    cr_assert(strstr(log, TEST_KEY) == NULL, "the API key is in the log");
    cr_assert(strstr(log, "Bearer") == NULL, "an Authorization header is in the log");
    cr_assert(strstr(log, MARKER) == NULL, "message text is in the log");
}

Test(llm, result_names_match_the_proto)
{
    cr_assert_str_eq(cg_llm_result_name(CG_LLM_OK), "OK");
    cr_assert_str_eq(cg_llm_result_name(CG_LLM_NOT_CONFIGURED), "NOT_CONFIGURED");
    cr_assert_str_eq(cg_llm_result_name(CG_LLM_TIMEOUT), "TIMEOUT");
    cr_assert_str_eq(cg_llm_result_name(CG_LLM_ERROR), "LLM_ERROR");
    cr_assert_str_eq(cg_llm_result_name(CG_LLM_RATE_LIMITED), "RATE_LIMITED");
    cr_assert_str_eq(cg_llm_result_name(CG_LLM_CIRCUIT_OPEN), "CIRCUIT_OPEN");
    cr_assert_str_eq(cg_llm_result_name(CG_LLM_INVALID_OUTPUT), "INVALID_OUTPUT");
    cr_assert_str_eq(cg_llm_result_name(CG_LLM_DEADLINE), "DEADLINE");
    cr_assert_str_eq(cg_llm_result_name((cg_llm_result)77), "UNKNOWN");
    /* Numbered as SummaryFallbackReason, so the rpc layer can cast. */
    cr_assert_eq((int)CG_LLM_NOT_CONFIGURED, (int)FALLBACK(NOT_CONFIGURED));
    cr_assert_eq((int)CG_LLM_TIMEOUT, (int)FALLBACK(TIMEOUT));
    cr_assert_eq((int)CG_LLM_ERROR, (int)FALLBACK(LLM_ERROR));
    cr_assert_eq((int)CG_LLM_RATE_LIMITED, (int)FALLBACK(RATE_LIMITED));
    cr_assert_eq((int)CG_LLM_CIRCUIT_OPEN, (int)FALLBACK(CIRCUIT_OPEN));
    cr_assert_eq((int)CG_LLM_INVALID_OUTPUT, (int)FALLBACK(INVALID_OUTPUT));
    cr_assert_eq((int)CG_LLM_DEADLINE, (int)FALLBACK(DEADLINE));
}

Test(llm, parse_answer_reads_usage_only_when_it_is_sane)
{
    struct cg_llm_reply reply = {0};
    const char ok[] = "{\"choices\":[{\"message\":{\"content\":\"fine\"}}]}";
    reply.prompt_tokens = reply.completion_tokens = -1;
    cr_assert_eq(cg_llm_parse_answer(ok, sizeof ok - 1, &reply), CG_LLM_OK, "%s", reply.detail);
    cr_assert_str_eq(reply.content, "fine");
    cr_assert_eq(reply.prompt_tokens, -1, "no usage: unknown, not 0");
    cr_assert_str_eq(reply.finish_reason, "");
    cg_llm_reply_cleanup(&reply);

    const char odd[] = "{\"choices\":[{\"message\":{\"content\":\"x\"},\"finish_reason\":"
                       "\"a-finish-reason-much-longer-than-the-buffer-holds\"}],"
                       "\"usage\":{\"prompt_tokens\":-5,\"completion_tokens\":\"7\"}}";
    memset(&reply, 0, sizeof reply);
    reply.prompt_tokens = reply.completion_tokens = -1;
    cr_assert_eq(cg_llm_parse_answer(odd, sizeof odd - 1, &reply), CG_LLM_OK);
    cr_assert_eq(reply.prompt_tokens, -1);
    cr_assert_eq(reply.completion_tokens, -1);
    cr_assert_eq(strlen(reply.finish_reason), sizeof reply.finish_reason - 1, "truncated");
    cg_llm_reply_cleanup(&reply);

    const char *bad[] = {"",
                         "[]",
                         "null",
                         "{\"choices\":{}}",
                         "{\"choices\":[1]}",
                         "{\"choices\":[{\"message\":{\"content\":\"a\\u0000b\"}}]}",
                         "{\"choices\":[{\"message\":{\"content\":7}}]}"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memset(&reply, 0, sizeof reply);
        cr_assert_eq(cg_llm_parse_answer(bad[i], strlen(bad[i]), &reply), CG_LLM_INVALID_OUTPUT,
                     "'%s'", bad[i]);
        cr_assert_null(reply.content);
    }
}

Test(llm, options_come_from_the_config_table)
{
    struct cg_config cfg;
    struct cg_err err;
    cr_assert_eq(cg_config_init(&cfg), CG_OK);
    cr_assert_eq(cg_config_set(&cfg, "llm_base_url", F.base_url, "test", &err), CG_OK);
    cr_assert_eq(cg_config_set(&cfg, "llm_api_key", TEST_KEY, "test", &err), CG_OK);
    cr_assert_eq(cg_config_set(&cfg, "llm_model", "ok", "test", &err), CG_OK);
    cr_assert_eq(cg_config_set(&cfg, "llm_temperature", "0.7", "test", &err), CG_OK);
    cr_assert_eq(cg_config_set(&cfg, "llm_breaker_failures", "4", "test", &err), CG_OK);
    struct cg_llm_opts o;
    cg_llm_opts_from_config(&cfg, &o);
    cr_assert_eq(o.timeout_ms, 20000);
    cr_assert_eq(o.max_retries, 2);
    cr_assert_eq(o.max_response_bytes, 1048576);
    struct cg_llm_breaker_opts bo;
    cg_llm_breaker_opts_from_config(&cfg, &bo);
    cr_assert_eq(bo.policy.failure_threshold, 4);
    cr_assert_eq(bo.policy.cooldown_ms, 30000);
    cr_assert_null(bo.now_ms, "the real clock");
    struct cg_llm_breaker *breaker = cg_llm_breaker_new(&bo);
    struct cg_llm *llm = client(&o, breaker);
    struct cg_llm_reply reply;
    cr_assert_eq(chat(llm, &reply), CG_LLM_OK, "%s", reply.detail);
    cg_llm_reply_cleanup(&reply);
    json_t *all = cg_fake_llm_requests(&F);
    json_t *body = json_object_get(nth_request(all, 0), "body");
    cr_assert_float_eq(json_number_value(json_object_get(body, "temperature")), 0.7, 1e-9);
    json_decref(all);
    cg_llm_free(llm);
    cg_llm_breaker_free(breaker);
    cg_config_cleanup(&cfg);
}
