/* main.c - builds the one application object (app/app.h) and hands it to the transport:
 * config -> log -> app (settings, shared objects) -> migrations -> server -> signals ->
 * teardown (the server and its threads, then the app).
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

#include "app/app.h"
#include "base/config.h"
#include "base/log.h"
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

/* Applies pending migrations. Several replicas may do this at once: the store serialises
 * them with an advisory lock. */
static int migrate(const struct cg_app *app)
{
    struct cg_store_opts o = app->store_opts;
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

/* Runs the server on the started app until SIGTERM or SIGINT; the server is gone (every
 * thread stopped) when this returns, so the caller may clean the app up. */
static int serve(struct cg_app *app)
{
    const struct cg_config *cfg = app->config;
    if (cfg->migrate_on_start && migrate(app) != 0)
        return 1;

    /* Signals are taken by sigwait below; every thread started from here on inherits the
     * mask, so none of them is interrupted by SIGTERM/SIGINT. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    struct cg_err err;
    cg_err_clear(&err);
    struct cg_server *srv = cg_server_start(app, &err);
    if (srv == NULL) {
        cg_log(CG_LOG_ERROR, "main", NULL, "cannot start: %s", cg_err_text(&err));
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
    cg_server_free(srv); /* every thread, store and LLM client of the server goes here */
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
    /* The application object: everything the process consists of (app/app.h). Large (the
     * parsed tables), so not on the stack. */
    struct cg_app *app = calloc(1, sizeof *app);
    struct cg_err err;
    cg_err_clear(&err);
    int rc = 0;
    if (app == NULL) {
        fprintf(stderr, "ctxguard: out of memory\n");
        rc = 1;
        goto out;
    }
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

    /* The settings that are tables (prices, model_map) are checked like every other one,
     * for every command. */
    const char *setting = NULL;
    if (cg_app_init(app, &cfg, &setting, &err) != CG_OK) {
        fprintf(stderr, "ctxguard: %s: %s\n", setting, cg_err_text(&err));
        rc = 2;
        goto out;
    }
    if (strcmp(cli.command, "migrate") == 0) {
        rc = migrate(app);
        goto out;
    }
    if (cg_app_start(app, &setting, &err) != CG_OK) {
        fprintf(stderr, "ctxguard: %s%s%s\n", setting ? setting : "", setting ? ": " : "",
                cg_err_text(&err));
        rc = err.code == CG_CONFIG ? 2 : 1;
        goto out;
    }
    rc = serve(app);
out:
    if (app != NULL)
        cg_app_cleanup(app); /* after the server: no thread uses it any more */
    free(app);
    cg_config_cleanup(&cfg);
    return rc;
}
