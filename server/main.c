/* main.c - wiring only: config -> log -> migrations -> reflection -> server -> signals -> teardown.
 *
 *   ctxguard [serve]   run the server (default)
 *   ctxguard migrate   apply pending migrations and exit
 *   ctxguard --print-config | --help | --version
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"
#include "base/health.h"
#include "base/log.h"
#include "core/models.h"
#include "core/price.h"
#include "llm/llm.h"
#include "rpc/reflection.h"
#include "rpc/rpc.h"
#include "store/store.h"
#include "transport/server.h"

extern char **environ;

static void usage(FILE *out)
{
    fprintf(out, "usage: ctxguard [serve|migrate] [--config FILE] [--KEY VALUE | --KEY=VALUE]...\n"
                 "       ctxguard --print-config | --help | --version\n\n"
                 "Configuration, in rising precedence: defaults < config file (--config or\n"
                 "CTXGUARD_CONFIG) < CTXGUARD_* environment < flags. Keys:\n\n");
    cg_config_print_reference(out);
}

static void store_opts(const struct cg_config *cfg, struct cg_store_opts *o)
{
    o->pg_dsn = cfg->pg_dsn;
    o->redis_url = cfg->redis_url;
    o->pg_connect_timeout_ms = (int)cfg->pg_connect_timeout_ms;
    o->pg_statement_timeout_ms = (int)cfg->pg_statement_timeout_ms;
    o->redis_timeout_ms = (int)cfg->redis_timeout_ms;
    o->key_cache_ttl_s = (int)cfg->key_cache_ttl_s;
}

/* Applies pending migrations. Several replicas may do this at once: the store serialises
 * them with an advisory lock. */
static int migrate(const struct cg_config *cfg)
{
    struct cg_store_opts o;
    store_opts(cfg, &o);
    /* Migrations may take longer than an ordinary statement. */
    o.pg_statement_timeout_ms = 600000;
    struct cg_store *store = cg_store_new(&o);
    if (store == NULL) {
        cg_log(CG_LOG_ERROR, "main", NULL, "out of memory");
        return 1;
    }
    struct cg_err err;
    cg_err_clear(&err);
    int applied = 0;
    cg_status st = cg_store_migrate(store, &applied, &err);
    cg_store_free(store);
    if (st != CG_OK) {
        cg_log(CG_LOG_ERROR, "main", NULL, "migration failed: %s", cg_err_text(&err));
        return 1;
    }
    cg_log(CG_LOG_INFO, "main", NULL, "migrations: %d applied, schema up to date", applied);
    return 0;
}

static int serve(const struct cg_config *cfg, const struct cg_price_table *prices,
                 const struct cg_rpc_tokenizers *tokenizers)
{
    if (cfg->migrate_on_start && migrate(cfg) != 0)
        return 1;

    struct cg_err err;
    cg_err_clear(&err);
    size_t nservices;
    const char *const *services = cg_rpc_services(&nservices);
    struct cg_reflection *refl =
        cg_reflection_new(cg_descriptor_set, cg_descriptor_set_len, services, nservices, &err);
    if (refl == NULL) {
        cg_log(CG_LOG_ERROR, "main", NULL, "reflection: %s", cg_err_text(&err));
        return 1;
    }

    /* Signals are taken by sigwait below; every thread started from here on inherits the
     * mask, so none of them is interrupted by SIGTERM/SIGINT. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct cg_health health;
    cg_health_init(&health);
    struct cg_server *srv = cg_server_start(cfg, &health, refl, prices, tokenizers, &err);
    if (srv == NULL) {
        cg_log(CG_LOG_ERROR, "main", NULL, "cannot start: %s", cg_err_text(&err));
        cg_reflection_free(refl);
        return err.code == CG_CONFIG ? 2 : 1; /* 2: fix the configuration, as for bad keys */
    }
    char port[16];
    snprintf(port, sizeof port, "%d", cg_server_port(srv));
    struct cg_kv kv[] = {
        {"addr", cfg->listen}, {"port", port}, {"tls", cfg->tls_cert[0] ? "on" : "off"}};
    cg_log_kv(CG_LOG_INFO, "main", NULL, "listening", kv, 3);

    int sig = 0;
    sigwait(&sigs, &sig);
    cg_log(CG_LOG_INFO, "main", NULL, "%s received: shutting down (grace %lld ms)",
           sig == SIGTERM ? "SIGTERM" : "SIGINT", (long long)cfg->shutdown_grace_ms);
    cg_server_shutdown(srv);
    cg_server_free(srv);
    cg_reflection_free(refl);
    cg_llm_global_cleanup(); /* every LLM client went with the server's pool */
    return 0;
}

int main(int argc, char **argv)
{
    struct cg_config cfg;
    if (cg_config_init(&cfg) != CG_OK) {
        fprintf(stderr, "ctxguard: out of memory\n");
        return 1;
    }
    struct cg_config_cli cli;
    struct cg_rpc_tokenizers tokenizers = {0};
    struct cg_err err;
    cg_err_clear(&err);
    int rc = 0;
    if (cg_config_load(&cfg, &cli, argc, argv, environ, &err) != CG_OK) {
        fprintf(stderr, "ctxguard: %s\n", cg_err_text(&err));
        rc = 2;
        goto out;
    }
    if (cli.help) {
        usage(stdout);
        goto out;
    }
    if (cli.version) {
        printf("ctxguard %s\n", CG_VERSION);
        goto out;
    }
    if (cli.print_config) {
        cg_config_print(&cfg, stdout);
        goto out;
    }

    cg_log_level level = CG_LOG_INFO;
    if (!cg_log_level_parse(cfg.log_level, &level))
        level = CG_LOG_INFO;
    cg_log_setup(level, strcmp(cfg.log_format, "json") == 0 ? CG_LOG_JSON : CG_LOG_LOGFMT, 2);

    /* The price table is checked at start like every other setting (and kept for the
     * process's life: the server borrows it). */
    static struct cg_price_table prices;
    if (cg_price_parse(cfg.prices, &prices, &err) != CG_OK) {
        fprintf(stderr, "ctxguard: config key 'prices' (CTXGUARD_PRICES): %s\n", cg_err_text(&err));
        rc = 2;
        goto out;
    }

    /* Checked here so that a typo stops the start; the handlers read the table from the
     * setting (it is small) when they need it. */
    static struct cg_model_map models;
    if (cg_models_map_parse(cfg.model_map, &models, &err) != CG_OK) {
        fprintf(stderr, "ctxguard: config key 'model_map' (CTXGUARD_MODEL_MAP): %s\n",
                cg_err_text(&err));
        rc = 2;
        goto out;
    }

    if (strcmp(cli.command, "migrate") == 0) {
        rc = migrate(&cfg);
        goto out;
    }
    /* The tokenizers are built once, before anything else starts, and shared read-only by
     * every thread; without them the server does not start. */
    if (cg_rpc_tokenizers_load(cfg.token_data_dir, &tokenizers, &err) != CG_OK) {
        fprintf(stderr, "ctxguard: config key 'token_data_dir' (CTXGUARD_TOKEN_DATA_DIR): %s\n",
                cg_err_text(&err));
        rc = err.code == CG_CONFIG ? 2 : 1;
        goto out;
    }
    rc = serve(&cfg, &prices, &tokenizers);
out:
    cg_rpc_tokenizers_cleanup(&tokenizers);
    cg_config_cleanup(&cfg);
    return rc;
}
