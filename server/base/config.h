/* config.h - the one configuration table of the server.
 *
 * Each row gives a key, its type, default, bounds and help. Values come, in
 * rising precedence, from: defaults < config file < CTXGUARD_* environment
 * < command-line flags (request fields override all of these where a request
 * carries them). The environment variable of key `pg_dsn` is CTXGUARD_PG_DSN,
 * its flag --pg-dsn. A bad value fails the start with a message naming the key.
 * After loading, the config is immutable and shared read-only by all threads.
 */
#ifndef CG_BASE_CONFIG_H
#define CG_BASE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "base/status.h"

/* Types: STR plain text; SECRET text never printed; DSN a connection URL or
 * keyword string whose password is never printed; INT a bounded integer;
 * DOUBLE a bounded decimal number; BOOL true/false/1/0/yes/no/on/off; ENUM one of the
 * `|`-separated choices. */
#define CG_CFG_CTYPE_STR char *
#define CG_CFG_CTYPE_SECRET char *
#define CG_CFG_CTYPE_DSN char *
#define CG_CFG_CTYPE_ENUM char *
#define CG_CFG_CTYPE_INT int64_t
#define CG_CFG_CTYPE_DOUBLE double
#define CG_CFG_CTYPE_BOOL bool

/* XX(key, type, default, min, max, choices, help) */
#define CG_CONFIG_TABLE(XX)                                                                        \
    XX(listen, STR, "127.0.0.1:50051", 0, 0, NULL,                                                 \
       "gRPC listen address: host:port, [ipv6]:port or unix:/path")                                \
    XX(pg_dsn, DSN, "postgresql://postgres@127.0.0.1:5432/ctxguard", 0, 0, NULL,                   \
       "PostgreSQL connection string (URI or key=value); the source of truth")                     \
    XX(redis_url, DSN, "redis://127.0.0.1:6379/0", 0, 0, NULL,                                     \
       "Redis URL redis://[:password@]host:port[/db]; a cache only, empty disables it")            \
    XX(admin_key, SECRET, "", 0, 0, NULL,                                                          \
       "key that authorises AdminService (>= 16 chars); empty disables AdminService")              \
    XX(workers, INT, "0", 0, 64, NULL, "completion-queue threads; 0 means one per CPU")            \
    XX(io_threads, INT, "8", 1, 256, NULL,                                                         \
       "worker pool threads for blocking I/O, each owning a PostgreSQL and a Redis connection")    \
    XX(stream_open_threads, INT, "2", 1, 64, NULL,                                                 \
       "threads that open WatchUsage streams (each with a PostgreSQL and a Redis connection), "    \
       "apart from io_threads so that an open never waits for blocking work")                      \
    XX(slots_per_method, INT, "16", 1, 1024, NULL,                                                 \
       "request slots each completion-queue thread keeps posted per method")                       \
    XX(max_message_bytes, INT, "8388608", 1024, 67108864, NULL,                                    \
       "largest request or response message; larger ones get RESOURCE_EXHAUSTED")                  \
    XX(max_call_ms, INT, "30000", 10, 600000, NULL,                                                \
       "longest a call may run; the shorter of this and the caller's deadline applies")            \
    XX(shutdown_grace_ms, INT, "10000", 0, 600000, NULL,                                           \
       "on SIGTERM/SIGINT, how long in-flight calls may take before they are cancelled")           \
    XX(pg_connect_timeout_ms, INT, "3000", 100, 60000, NULL, "PostgreSQL connect timeout")         \
    XX(pg_statement_timeout_ms, INT, "5000", 10, 600000, NULL,                                     \
       "PostgreSQL statement timeout (a call's deadline shortens it)")                             \
    XX(redis_timeout_ms, INT, "100", 1, 10000, NULL, "Redis connect and command timeout")          \
    XX(redis_cluster, ENUM, "auto", 0, 0, "auto|on|off",                                           \
       "whether redis_url is a Redis Cluster node (routing by slot); auto asks it (INFO cluster)") \
    XX(health_interval_ms, INT, "250", 50, 60000, NULL,                                            \
       "how often PostgreSQL is probed for the health service (on a thread and connection of "     \
       "its own)")                                                                                 \
    XX(health_timeout_ms, INT, "500", 10, 60000, NULL,                                             \
       "how long one PostgreSQL probe may take; no answer by then is NOT_SERVING (a frozen "       \
       "PostgreSQL is seen within health_interval_ms + health_timeout_ms)")                        \
    XX(sweep_interval_ms, INT, "2000", 100, 600000, NULL,                                          \
       "how often expired reservations and approvals are settled and due budget resets applied")   \
    XX(retention_interval_ms, INT, "60000", 100, 86400000, NULL,                                   \
       "how often old events, spend history, webhook deliveries and idle sessions are deleted "    \
       "(a walk over every tenant, a page of tenants per statement)")                              \
    XX(notify_interval_ms, INT, "500", 50, 60000, NULL,                                            \
       "how often each replica's notifier looks for due webhook deliveries")                       \
    XX(notify_threads, INT, "2", 1, 16, NULL,                                                      \
       "notifier threads per replica, each sending one delivery at a time (a slow receiver "       \
       "holds one)")                                                                               \
    XX(notify_timeout_ms, INT, "5000", 100, 60000, NULL,                                           \
       "longest one webhook delivery may take, connection included")                               \
    XX(notify_max_attempts, INT, "8", 1, 100, NULL,                                                \
       "attempts of a webhook delivery before it is dead (listed, re-drivable)")                   \
    XX(notify_backoff_base_ms, INT, "1000", 10, 3600000, NULL,                                     \
       "wait before the first retry of a delivery; doubles per attempt, with jitter")              \
    XX(notify_backoff_max_ms, INT, "300000", 10, 86400000, NULL,                                   \
       "longest wait between two attempts of a delivery")                                          \
    XX(notify_keep_days, INT, "7", 1, 3650, NULL,                                                  \
       "days delivered and dead webhook deliveries are kept (then the sweeper deletes them)")      \
    XX(notify_allow_private_addresses, BOOL, "false", 0, 0, NULL,                                  \
       "let webhooks reach loopback, private and link-local addresses (else refused)")             \
    XX(forecast_window_minutes, INT, "15", 1, 1440, NULL,                                          \
       "minutes of recent spend a budget's forecast runs on (its rate: tokens per minute)")        \
    XX(forecast_horizon_minutes, INT, "60", 0, 10080, NULL,                                        \
       "a FORECAST_EXHAUSTION event when a budget would run out within this (0: no events)")       \
    XX(forecast_interval_ms, INT, "15000", 200, 3600000, NULL,                                     \
       "how often each replica looks for budgets whose forecast fell under the horizon")           \
    XX(rollup_minute_days, INT, "2", 0, 36500, NULL,                                               \
       "days spend history keeps its per-minute buckets (0: forever)")                             \
    XX(rollup_hour_days, INT, "90", 0, 36500, NULL,                                                \
       "days spend history keeps its per-hour buckets (0: forever)")                               \
    XX(rollup_day_days, INT, "0", 0, 36500, NULL,                                                  \
       "days spend history keeps its per-day buckets (0: forever)")                                \
    XX(key_cache_ttl_s, INT, "30", 0, 3600, NULL,                                                  \
       "seconds an API key lookup stays in the Redis cache (0: no caching)")                       \
    XX(default_preset, ENUM, "general", 0, 0, "general|debugging|long_running",                    \
       "use-case preset when a request names none (budgets without a limit, compression)")         \
    XX(write_batching, BOOL, "true", 0, 0, NULL,                                                   \
       "group concurrent Reserves and Commits of a tenant into shared transactions")               \
    XX(write_batch_scope, ENUM, "mixed", 0, 0, "mixed|tenant",                                     \
       "mixed: a shared transaction takes several tenants' writes; tenant: one tenant's each")     \
    XX(cache_row_ttl_ms, INT, "300000", 0, 86400000, NULL,                                         \
       "most ms a cached budget row is served, a backstop: rows leave when another replica's "     \
       "write is announced (cg_rows) (0: no process cache)")                                       \
    XX(cache_rows_max, INT, "262144", 1024, 16777216, NULL,                                        \
       "budget rows the process cache holds for CheckBudget (~540 bytes each when used)")          \
    XX(session_artifacts_max, INT, "150", 1, 1000000, NULL,                                        \
       "a session's artifacts that trigger cleanup: past it the oldest go, down to "               \
       "session_artifacts_keep")                                                                   \
    XX(session_artifacts_keep, INT, "100", 1, 1000000, NULL,                                       \
       "the most recent artifacts of a session kept by that cleanup (at most "                     \
       "session_artifacts_max)")                                                                   \
    XX(migrate_on_start, BOOL, "true", 0, 0, NULL,                                                 \
       "apply pending migrations at start-up (under an advisory lock)")                            \
    XX(model_map, STR, "", 0, 0, NULL,                                                             \
       "models added or re-mapped: PREFIX=ENCODING|PROFILE[@WINDOW];... (see core/models.h)")      \
    XX(token_data_dir, STR, "", 0, 0, NULL,                                                        \
       "directory of the tokenizer rank data (cl100k_base.cgtok, o200k_base.cgtok); empty: "       \
       "share/ctxguard beside the program's bin/ (the install's, or the build tree's)")            \
    XX(prices, STR, "", 0, 0, NULL,                                                                \
       "prices over the built-in table: MODEL=IN/OUT[/CACHE_READ[/CACHE_WRITE]];... USD per "      \
       "million tokens")                                                                           \
    XX(prices_builtin, BOOL, "true", 0, 0, NULL,                                                   \
       "start from the built-in price table of common models (false: only `prices`)")              \
    XX(log_level, ENUM, "info", 0, 0, "debug|info|warn|error",                                     \
       "lowest level logged; debug adds one line per call")                                        \
    XX(log_format, ENUM, "logfmt", 0, 0, "logfmt|json", "log line format")                         \
    XX(tls_cert, STR, "", 0, 0, NULL, "PEM certificate chain file; with tls_key enables TLS")      \
    XX(tls_key, STR, "", 0, 0, NULL, "PEM private key file for tls_cert")                          \
    XX(tls_client_ca, STR, "", 0, 0, NULL,                                                         \
       "PEM CA bundle; when set, clients must present a certificate it signed")                    \
    XX(http_listen, STR, "", 0, 0, NULL,                                                           \
       "HTTP listener for /metrics, /healthz and /readyz: host:port or [ipv6]:port; empty: off")   \
    XX(http_tls_cert, STR, "", 0, 0, NULL,                                                         \
       "PEM certificate chain file of the HTTP listener; with http_tls_key serves HTTPS only")     \
    XX(http_tls_key, STR, "", 0, 0, NULL, "PEM private key file for http_tls_cert")                \
    XX(http_api_rate_per_min, INT, "1200", 0, 6000000, NULL,                                       \
       "JSON API requests a minute per key after its burst (0: no limit)")                         \
    XX(http_api_burst, INT, "40", 1, 100000, NULL, "JSON API requests a key may make at once")     \
    XX(http_max_connections, INT, "64", 1, 10000, NULL,                                            \
       "connections the HTTP listener keeps open at once; more are refused")                       \
    XX(http_event_streams_max, INT, "32", 0, 9999, NULL,                                           \
       "JSON API event streams (Server-Sent Events) open at once, below http_max_connections (0: " \
       "none)")                                                                                    \
    XX(http_event_streams_per_key, INT, "4", 1, 1000, NULL,                                        \
       "JSON API event streams one key may hold open at once (a browser tab holds one)")           \
    XX(metrics_budget_top_n, INT, "20", 0, 500, NULL,                                              \
       "budgets nearest their limit that /metrics shows as ctxguard_budget_used_ratio (the top "   \
       "N tenant/level pairs by used/limit tokens); 0: none")                                      \
    XX(llm_base_url, STR, "", 0, 0, NULL,                                                          \
       "OpenAI-compatible API base URL (http:// or https://, e.g. https://api.openai.com/v1); "    \
       "empty: no LLM, summaries are extractive")                                                  \
    XX(llm_api_key, SECRET, "", 0, 0, NULL, "bearer key of the LLM endpoint")                      \
    XX(llm_model, STR, "gpt-4o-mini", 0, 0, NULL, "model that writes summaries")                   \
    XX(llm_temperature, DOUBLE, "0.2", 0, 2, NULL, "sampling temperature of summaries")            \
    XX(llm_connect_timeout_ms, INT, "2000", 10, 60000, NULL, "LLM connect timeout per attempt")    \
    XX(llm_timeout_ms, INT, "20000", 100, 600000, NULL,                                            \
       "longest one LLM call may take, retries included (a call's deadline shortens it)")          \
    XX(llm_max_retries, INT, "2", 0, 10, NULL,                                                     \
       "LLM retries after transport errors, 408, 409, 429 and 5xx (backoff with jitter)")          \
    XX(llm_breaker_failures, INT, "5", 1, 1000, NULL,                                              \
       "consecutive failed LLM calls that open the circuit breaker")                               \
    XX(llm_breaker_cooldown_ms, INT, "30000", 100, 3600000, NULL,                                  \
       "how long the open breaker refuses LLM calls before one probe")                             \
    XX(llm_max_response_bytes, INT, "1048576", 1024, 67108864, NULL,                               \
       "largest LLM response body accepted")

struct cg_config {
#define CG_CFG_FIELD(key, type, def, min, max, choices, help) CG_CFG_CTYPE_##type key;
    CG_CONFIG_TABLE(CG_CFG_FIELD)
#undef CG_CFG_FIELD
    /* Where each key's value came from ("default", "file:PATH:LINE", "env", "flag"),
     * in table order. */
    const char *origin[96];
    /* The origins that name a config file line, owned (freed by cg_config_cleanup). */
    char *origin_owned[96];
};

/* What the command line asked for besides configuration values. */
struct cg_config_cli {
    const char *command; /* "serve" (default) or "migrate" */
    const char *config_file;
    bool print_config;
    bool help;
    bool version;
};

/* Fills cfg with the defaults. Returns CG_NOMEM on allocation failure. */
cg_status cg_config_init(struct cg_config *cfg) CG_MUST_CHECK;

/* Frees the strings cfg owns. */
void cg_config_cleanup(struct cg_config *cfg);

/* Sets one key from text. origin says where the text came from (kept for printing and
 * used in the error). On error cfg is unchanged and err names the key and the problem. */
cg_status cg_config_set(struct cg_config *cfg, const char *key, const char *value,
                        const char *origin, struct cg_err *err) CG_MUST_CHECK;

/* Reads `key = value` lines ('#' comments, optional double quotes). Unknown keys are errors. */
cg_status cg_config_load_file(struct cg_config *cfg, const char *path,
                              struct cg_err *err) CG_MUST_CHECK;

/* Applies every CTXGUARD_<KEY> variable of envp (NULL-terminated). Unknown CTXGUARD_
 * variables are errors, so typos do not pass silently; CTXGUARD_CONFIG and the CLI's
 * CTXGUARD_TARGET and CTXGUARD_KEY are left alone. */
cg_status cg_config_load_env(struct cg_config *cfg, char *const *envp,
                             struct cg_err *err) CG_MUST_CHECK;

/* The whole precedence chain: defaults < file (--config or CTXGUARD_CONFIG) < envp <
 * flags (--key=value or --key value, '-' and '_' alike), then cross-key validation.
 * cli gets the non-config flags and the command. cfg must be freshly initialised. */
cg_status cg_config_load(struct cg_config *cfg, struct cg_config_cli *cli, int argc, char **argv,
                         char *const *envp, struct cg_err *err) CG_MUST_CHECK;

/* Checks rules that span keys (tls_cert needs tls_key, admin_key length, ...). */
cg_status cg_config_validate(const struct cg_config *cfg, struct cg_err *err) CG_MUST_CHECK;

/* Writes every key as `key = value # origin`, in the config file's syntax so that the output
 * can be read back with --config. A secret that is set, and a DSN holding a password, are
 * written as comment lines (redacted) instead: they never appear in the output. */
void cg_config_print(const struct cg_config *cfg, FILE *out);

/* Writes the table: key, env var, type, default and help (for --help and the README). */
void cg_config_print_reference(FILE *out);

/* Copies dsn into out with any password replaced by "****" (URI userinfo, `password=`
 * keyword, or `?password=` parameter). */
void cg_config_redact_dsn(const char *dsn, char *out, size_t cap);

#endif
