/* log.h - one line per event on stderr, in logfmt (default) or JSON.
 *
 *   ts=2026-11-22T10:00:00.123Z lvl=info mod=transport rid=4f2a… msg="listening"
 * addr=127.0.0.1:50051
 *
 * Log once, where the decision is made. Secrets never go to the log.
 * Thread-safe: each line is formatted in a local buffer and written with one write(2).
 * The level and format are set once at start-up, before threads exist.
 */
#ifndef CG_BASE_LOG_H
#define CG_BASE_LOG_H

#include <stdbool.h>

#include "base/status.h"

typedef enum { CG_LOG_DEBUG, CG_LOG_INFO, CG_LOG_WARN, CG_LOG_ERROR } cg_log_level;
typedef enum { CG_LOG_LOGFMT, CG_LOG_JSON } cg_log_format;

/* A key/value pair for cg_log_kv. */
struct cg_kv {
    const char *key;
    const char *value;
};

/* Sets the minimum level, the format and the file descriptor lines go to (2 = stderr). */
void cg_log_setup(cg_log_level min_level, cg_log_format format, int fd);

/* Parses "debug", "info", "warn", "error". Returns false for anything else. */
bool cg_log_level_parse(const char *s, cg_log_level *out);

/* Whether a line at `level` would be written (to skip building costly fields). */
bool cg_log_enabled(cg_log_level level);

/* Logs a formatted message. mod names the module; rid is the request id or NULL. */
void cg_log(cg_log_level level, const char *mod, const char *rid, const char *fmt, ...)
    CG_PRINTF(4, 5);

/* Logs msg followed by n key/value fields. */
void cg_log_kv(cg_log_level level, const char *mod, const char *rid, const char *msg,
               const struct cg_kv *fields, int n);

/* Formats one line (without writing it) into buf of size cap; returns its length.
 * Exposed for tests. */
int cg_log_format_line(char *buf, int cap, cg_log_format format, cg_log_level level,
                       const char *mod, const char *rid, const char *msg,
                       const struct cg_kv *fields, int n);

#endif
