/* app.h - the application object: what the process consists of, built once by main.c and
 * handed to the transport.
 *
 * It holds the configuration (borrowed), the settings parsed into tables (prices, model
 * map), the health state, the exact tokenizers, the reflection index, and the shared
 * objects every thread uses: the process cache, the write batcher, the LLM breaker, the
 * redaction pseudonyms, WatchUsage's fan-out (the watch hub), the outage log of the
 * stores and the metrics registry. The transport makes only per-thread things, through the
 * factories below (a store, an LLM client, the LISTEN connection), and fills each thread's
 * cg_rpc_env from cg_app_env: what the process is made of is decided here, not in the transport.
 *
 * Life: cg_app_init (checks and parses settings; nothing to free on error), cg_app_start
 * (builds the shared objects), then the server runs; cg_app_cleanup after the server and
 * every thread that used the app are gone.
 */
#ifndef CG_APP_APP_H
#define CG_APP_APP_H

#include "base/config.h"
#include "base/health.h"
#include "base/status.h"
#include "core/models.h"
#include "core/price.h"
#include "rpc/rpc.h"
#include "store/store.h"

struct cg_llm;
struct cg_llm_breaker;
struct cg_metrics;
struct cg_reflection;

/* Every thread reads the members; the objects behind the pointers are thread-safe (each
 * header says so). Nothing here changes after cg_app_start but those objects' insides. */
struct cg_app {
    const struct cg_config *config;  /* borrowed from main.c; immutable after loading */
    struct cg_price_table prices;    /* the `prices` setting, parsed */
    struct cg_model_map models;      /* the `model_map` setting, checked at start (the
                                      * handlers read the setting when they need it) */
    struct cg_store_outages outages; /* one warning per outage for every store */
    struct cg_store_opts store_opts; /* what every store of the process is made with */

    /* Built by cg_app_start; NULL (empty) before. */
    struct cg_health health;
    struct cg_tokenizers tokenizers;    /* CountTokens' exact encodings */
    struct cg_reflection *reflection;   /* the reflection service's index */
    struct cg_cache *cache;             /* keys and budget rows; NULL: no row TTL, none */
    struct cg_budget_batcher *batcher;  /* NULL when write_batching is off */
    struct cg_llm_breaker *llm_breaker; /* shared by every thread's LLM client */
    struct cg_pseudonyms *pseudonyms;   /* Summarize's per-session redaction labels */
    struct cg_watch_hub *watch_hub;     /* WatchUsage's fan-out */
    /* The metrics registry (base/metrics.h) that /metrics renders: one slot per thread the
     * server may start (completion-queue, pool and open-lane threads) and a few more;
     * ctxguard_build_info registered. The transport registers its own families. */
    struct cg_metrics *metrics;
    struct cg_svc_meters *meters; /* the services' families in it (service/meters.h) */
    bool started; /* cg_app_start ran: cleanup also ends the LLM library's global state */
};

/* Empties app, then checks and parses the settings that are tables (prices, model_map) and
 * fills the store options from cfg (borrowed: must outlive app). On error returns CG_CONFIG
 * with err saying what is wrong and *setting naming the key ("config key 'prices'
 * (CTXGUARD_PRICES)"; static); nothing needs freeing then (cg_app_cleanup is harmless).
 * Not thread-safe. */
cg_status cg_app_init(struct cg_app *app, const struct cg_config *cfg, const char **setting,
                      struct cg_err *err) CG_MUST_CHECK;

/* Builds what serving needs: loads the tokenizers from token_data_dir (CG_CONFIG or CG_NOMEM,
 * *setting naming the key and err the file), the reflection index, the health state, the
 * cache, the batcher, the LLM breaker, the pseudonyms, the watch hub and the metrics registry
 * (CG_NOMEM). *setting
 * is NULL unless a setting or part is to blame. On error what was built stays in app for
 * cg_app_cleanup. Call once, before any thread uses app. */
cg_status cg_app_start(struct cg_app *app, const char **setting, struct cg_err *err) CG_MUST_CHECK;

/* Frees what cg_app_init and cg_app_start built, and the LLM library's global state when
 * the app was started. Call after every thread that used app has stopped (the server is
 * freed). Not thread-safe. */
void cg_app_cleanup(struct cg_app *app);

/* Fills env with the process-wide parts (config, health, reflection, prices, tokenizers,
 * cache, batcher, pseudonyms, watch hub), borrowed from app; store, llm and wake_streams
 * are NULL: per-thread things are the caller's. Thread-safe after cg_app_start. */
void cg_app_env(struct cg_app *app, struct cg_rpc_env *env);

/* A new store (its own PostgreSQL and Redis connections, for one thread) with the app's
 * options and outage log. NULL when out of memory. Thread-safe; free with cg_store_free
 * before cg_app_cleanup. */
struct cg_store *cg_app_store_new(struct cg_app *app);

/* The LISTEN connection of the events thread, with the app's options. NULL when out of
 * memory. Thread-safe; free with cg_store_listener_free before cg_app_cleanup. */
struct cg_store_listener *cg_app_listener_new(struct cg_app *app);

/* An LLM client (one curl handle, kept between calls: for one thread) with the app's
 * settings, sharing the app's breaker. NULL with err filled when the settings are not
 * usable or out of memory. Thread-safe; free with cg_llm_free before cg_app_cleanup. */
struct cg_llm *cg_app_llm_new(struct cg_app *app, struct cg_err *err);

#endif
