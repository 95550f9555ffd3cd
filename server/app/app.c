/* app.c - the application object: the settings parsed once, the shared objects built once,
 * and the factories of the per-thread ones (app.h). */
#include "app/app.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/metrics.h"
#include "llm/llm.h"
#include "rpc/reflection.h"
#include "service/budget_batch.h"
#include "service/cache.h"
#include "service/meters.h"
#include "service/pseudonyms.h"
#include "service/tokenizers.h"
#include "service/watch.h"

#define PSEUDONYM_SESSIONS 64 /* sessions whose redaction labels are remembered (~130 KB each) */
/* Metrics slots beyond the server's thread counts: the health prober, the sweeper, the
 * events thread, the HTTP listener, and room for a thread added later. */
#define METRICS_SPARE_SLOTS 8

cg_status cg_app_init(struct cg_app *app, const struct cg_config *cfg, const char **setting,
                      struct cg_err *err)
{
    memset(app, 0, sizeof *app);
    app->config = cfg;
    *setting = NULL;
    /* The price table: the built-in one (unless prices_builtin is off) with the `prices`
     * setting over it, checked at start like every other setting and kept for the process's
     * life (every thread borrows it). */
    struct cg_price_table *given = malloc(sizeof *given);
    if (given == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory");
    app->prices.n = 0;
    if (cfg->prices_builtin)
        cg_price_builtin(&app->prices);
    cg_status pst = cg_price_parse(cfg->prices, given, err);
    if (pst == CG_OK)
        pst = cg_price_merge(&app->prices, given, err);
    free(given);
    if (pst != CG_OK) {
        *setting = "config key 'prices' (CTXGUARD_PRICES)";
        return CG_CONFIG;
    }
    /* Checked here so that a typo stops the start; the handlers read the table from the
     * setting (it is small) when they need it. */
    if (cg_models_map_parse(cfg->model_map, &app->models, err) != CG_OK) {
        *setting = "config key 'model_map' (CTXGUARD_MODEL_MAP)";
        return CG_CONFIG;
    }
    app->store_opts = (struct cg_store_opts){
        .pg_dsn = cfg->pg_dsn,
        .redis_url = cfg->redis_url,
        .pg_connect_timeout_ms = (int)cfg->pg_connect_timeout_ms,
        .pg_statement_timeout_ms = (int)cfg->pg_statement_timeout_ms,
        .redis_timeout_ms = (int)cfg->redis_timeout_ms,
        .redis_cluster = cfg->redis_cluster,
        .key_cache_ttl_s = (int)cfg->key_cache_ttl_s,
        .outages = &app->outages,
    };
    return CG_OK;
}

/* The stores' families (store.h cg_store_meters), their handles put in the store options
 * that every store of the process is made with. */
static cg_status store_metrics(struct cg_app *app, struct cg_err *err)
{
    static const double buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                                     0.1,    0.25,  0.5,    1,     2.5,  5};
    struct cg_metric_family *seconds = cg_metrics_histogram_family(
        app->metrics, "ctxguard_store_call_seconds",
        "Time of each PostgreSQL statement and Redis command, answered or not.", CG_LABELS("store"),
        buckets, sizeof buckets / sizeof buckets[0], 2, err);
    struct cg_metric_family *errors = cg_metrics_counter_family(
        app->metrics, "ctxguard_store_errors_total",
        "PostgreSQL statements and Redis commands that failed for the store's sake "
        "(unreachable, timed out, broken), not for the data's.",
        CG_LABELS("store"), 2, err);
    if (seconds == NULL || errors == NULL)
        return err->code != CG_OK ? err->code : CG_NOMEM;
    app->store_opts.meters = (struct cg_store_meters){
        .pg_seconds = cg_metric_get(seconds, CG_LABELS("postgresql")),
        .pg_errors = cg_metric_get(errors, CG_LABELS("postgresql")),
        .redis_seconds = cg_metric_get(seconds, CG_LABELS("redis")),
        .redis_errors = cg_metric_get(errors, CG_LABELS("redis")),
        /* ctxguard_approvals_total (service/meters.h): the stores see every change. */
        .approvals_requested = app->meters->approvals[CG_APPROVAL_PENDING],
        .approvals_approved = app->meters->approvals[CG_APPROVAL_APPROVED],
        .approvals_denied = app->meters->approvals[CG_APPROVAL_DENIED],
        .approvals_expired = app->meters->approvals[CG_APPROVAL_EXPIRED],
    };
    return CG_OK;
}

static double read_breaker_state(void *ctx)
{
    return ctx != NULL ? (double)cg_llm_breaker_state(ctx) : 0.0;
}

/* The registry with a slot for every thread that may count (metrics.h "Shards"), the
 * build's identity as ctxguard_build_info{version} 1, the LLM breaker's state and the
 * services' families (service/meters.h). */
static cg_status start_metrics(struct cg_app *app, struct cg_err *err)
{
    const struct cg_config *cfg = app->config;
    long workers = cfg->workers;
    if (workers == 0) { /* as the transport resolves it: one per CPU */
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        workers = n > 0 ? (n > 64 ? 64 : n) : 1;
    }
    long slots = workers + cfg->io_threads + cfg->stream_open_threads + cfg->notify_threads +
                 METRICS_SPARE_SLOTS;
    if ((app->metrics = cg_metrics_new((unsigned)slots)) == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory for the metrics");
    struct cg_metric_family *info = cg_metrics_gauge_family(
        app->metrics, "ctxguard_build_info",
        "The running build: always 1, its labels say which (version, C compiler version).",
        CG_LABELS("version", "compiler"), 1, err);
    struct cg_metric *build = cg_metric_get(info, CG_LABELS(CG_VERSION, __VERSION__));
    if (build == NULL)
        return info == NULL ? err->code : cg_err_set(err, CG_NOMEM, "out of memory");
    cg_metric_set(build, 1);
    cg_status st = cg_metrics_callback(
        app->metrics, "ctxguard_llm_breaker_state",
        "The summarizer LLM's circuit breaker: 0 closed, 1 open (calls refused), 2 half-open.",
        CG_METRIC_GAUGE, read_breaker_state, app->llm_breaker, err);
    if (st != CG_OK)
        return st;
    if ((app->meters = calloc(1, sizeof *app->meters)) == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory for the metrics");
    if ((st = cg_svc_meters_init(app->meters, app->metrics, err)) != CG_OK)
        return st;
    return store_metrics(app, err);
}

cg_status cg_app_start(struct cg_app *app, const char **setting, struct cg_err *err)
{
    const struct cg_config *cfg = app->config;
    app->started = true;
    *setting = NULL;
    /* The tokenizers are built before anything else starts and shared read-only by every
     * thread; without them the server does not start. */
    cg_status st = cg_tokenizers_load(cfg->token_data_dir, &app->tokenizers, err);
    if (st != CG_OK) {
        *setting = "config key 'token_data_dir' (CTXGUARD_TOKEN_DATA_DIR)";
        return st;
    }
    size_t nservices;
    const char *const *services = cg_rpc_services(&nservices);
    app->reflection =
        cg_reflection_new(cg_descriptor_set, cg_descriptor_set_len, services, nservices, err);
    if (app->reflection == NULL) {
        *setting = "reflection";
        return err->code != CG_OK ? err->code : CG_NOMEM;
    }
    cg_health_init(&app->health);
    if (cfg->write_batching && (app->batcher = cg_budget_batcher_new(
                                    strcmp(cfg->write_batch_scope, "tenant") != 0)) == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory");
    /* Without a row TTL there is no cache at all (every CheckBudget goes to the pool). */
    if (cfg->cache_row_ttl_ms > 0) {
        struct cg_cache_opts copts = {.key_ttl_ms = (int64_t)cfg->key_cache_ttl_s * 1000,
                                      .row_ttl_ms = cfg->cache_row_ttl_ms,
                                      .max_rows = (size_t)cfg->cache_rows_max};
        if ((app->cache = cg_cache_new(&copts)) == NULL)
            return cg_err_set(err, CG_NOMEM, "out of memory for the cache");
    }
    /* One breaker for the process: every thread's LLM client shares it. */
    struct cg_llm_breaker_opts bopts;
    cg_llm_breaker_opts_from_config(cfg, &bopts);
    app->llm_breaker = cg_llm_breaker_new(&bopts);
    app->pseudonyms = cg_pseudonyms_new(PSEUDONYM_SESSIONS);
    if (app->llm_breaker == NULL || app->pseudonyms == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory for the LLM breaker");
    if ((app->watch_hub = cg_watch_hub_new()) == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory for the watch hub");
    return start_metrics(app, err);
}

void cg_app_cleanup(struct cg_app *app)
{
    cg_metrics_free(app->metrics); /* after the transport, whose families are in it */
    free(app->meters);
    cg_watch_hub_free(app->watch_hub);
    cg_pseudonyms_free(app->pseudonyms);
    cg_llm_breaker_free(app->llm_breaker);
    cg_cache_free(app->cache);
    cg_budget_batcher_free(app->batcher);
    cg_reflection_free(app->reflection);
    cg_tokenizers_cleanup(&app->tokenizers);
    if (app->started)
        cg_llm_global_cleanup(); /* every LLM client went with the threads that had one */
    memset(app, 0, sizeof *app);
}

void cg_app_env(struct cg_app *app, struct cg_rpc_env *env)
{
    memset(env, 0, sizeof *env);
    env->svc.config = app->config;
    env->svc.health = &app->health;
    env->reflection = app->reflection;
    env->svc.prices = &app->prices;
    env->svc.tokenizers = &app->tokenizers;
    env->svc.cache = app->cache;
    env->svc.batcher = app->batcher;
    env->svc.pseudonyms = app->pseudonyms;
    env->svc.watch_hub = app->watch_hub;
    env->svc.meters = app->meters;
    env->svc.metrics_slot = CG_METRICS_SHARED_SLOT; /* the transport gives each thread its own */
}

struct cg_store *cg_app_store_new(struct cg_app *app)
{
    return cg_store_new(&app->store_opts);
}

struct cg_store_listener *cg_app_listener_new(struct cg_app *app)
{
    return cg_store_listener_new(&app->store_opts);
}

struct cg_llm *cg_app_llm_new(struct cg_app *app, struct cg_err *err)
{
    struct cg_llm_opts lo;
    cg_llm_opts_from_config(app->config, &lo);
    return cg_llm_new(&lo, app->llm_breaker, err);
}
