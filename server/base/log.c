/* log.c - logfmt and JSON lines, each written with a single write(2) so lines never interleave. */
#include "base/log.h"

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES 4096

static cg_log_level min_level = CG_LOG_INFO;
static cg_log_format line_format = CG_LOG_LOGFMT;
static int out_fd = 2;

static const char *const level_names[] = {"debug", "info", "warn", "error"};

void cg_log_setup(cg_log_level level, cg_log_format format, int fd)
{
    min_level = level;
    line_format = format;
    out_fd = fd;
}

bool cg_log_level_parse(const char *s, cg_log_level *out)
{
    for (int i = 0; i < 4; i++) {
        if (strcmp(s, level_names[i]) == 0) {
            *out = (cg_log_level)i;
            return true;
        }
    }
    return false;
}

bool cg_log_enabled(cg_log_level level)
{
    return level >= min_level;
}

/* A bounded writer: appends while there is room and remembers the length. */
struct out {
    char *buf;
    int cap;
    int len;
};

static void put_char(struct out *o, char c)
{
    if (o->len < o->cap - 1)
        o->buf[o->len++] = c;
}

static void put_str(struct out *o, const char *s)
{
    while (*s)
        put_char(o, *s++);
}

static void put_hex_escape(struct out *o, unsigned char c)
{
    static const char hex[] = "0123456789abcdef";
    put_str(o, "\\u00");
    put_char(o, hex[c >> 4]);
    put_char(o, hex[c & 15]);
}

/* Quotes a value for JSON or logfmt; control characters are escaped either way. */
static void put_quoted(struct out *o, const char *s)
{
    put_char(o, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"':
            put_str(o, "\\\"");
            break;
        case '\\':
            put_str(o, "\\\\");
            break;
        case '\n':
            put_str(o, "\\n");
            break;
        case '\r':
            put_str(o, "\\r");
            break;
        case '\t':
            put_str(o, "\\t");
            break;
        default:
            if (*p < 0x20 || *p == 0x7f)
                put_hex_escape(o, *p);
            else
                put_char(o, (char)*p);
        }
    }
    put_char(o, '"');
}

/* logfmt values go bare when they are non-empty and hold no space, quote or '='. */
static void put_logfmt_value(struct out *o, const char *s)
{
    bool bare = *s != '\0';
    for (const unsigned char *p = (const unsigned char *)s; *p && bare; p++)
        if (*p <= ' ' || *p == '"' || *p == '=' || *p == '\\' || *p == 0x7f)
            bare = false;
    if (bare)
        put_str(o, s);
    else
        put_quoted(o, s);
}

static void put_field(struct out *o, cg_log_format format, bool first, const char *key,
                      const char *value)
{
    if (format == CG_LOG_JSON) {
        if (!first)
            put_char(o, ',');
        put_quoted(o, key);
        put_char(o, ':');
        put_quoted(o, value);
    } else {
        if (!first)
            put_char(o, ' ');
        put_str(o, key);
        put_char(o, '=');
        put_logfmt_value(o, value);
    }
}

int cg_log_format_line(char *buf, int cap, cg_log_format format, cg_log_level level,
                       const char *mod, const char *rid, const char *msg,
                       const struct cg_kv *fields, int n)
{
    struct out o = {buf, cap, 0};
    char ts[64];
    struct timespec now;
    struct tm tm;
    timespec_get(&now, TIME_UTC);
    gmtime_r(&now.tv_sec, &tm);
    size_t tlen = strftime(ts, sizeof ts - 8, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(ts + tlen, sizeof ts - tlen, ".%03dZ", (int)(now.tv_nsec / 1000000) % 1000);

    if (format == CG_LOG_JSON)
        put_char(&o, '{');
    put_field(&o, format, true, "ts", ts);
    put_field(&o, format, false, "lvl", level_names[level]);
    put_field(&o, format, false, "mod", mod);
    if (rid != NULL && rid[0] != '\0')
        put_field(&o, format, false, "rid", rid);
    put_field(&o, format, false, "msg", msg);
    for (int i = 0; i < n; i++)
        if (fields[i].key != NULL && fields[i].value != NULL)
            put_field(&o, format, false, fields[i].key, fields[i].value);
    if (format == CG_LOG_JSON)
        put_char(&o, '}');
    /* A line cut by the cap still ends in a newline, so the next one starts clean. */
    if (o.len >= cap - 1)
        o.len = cap - 2;
    buf[o.len++] = '\n';
    buf[o.len] = '\0';
    return o.len;
}

static void emit(cg_log_level level, const char *mod, const char *rid, const char *msg,
                 const struct cg_kv *fields, int n)
{
    char line[LINE_MAX_BYTES];
    int len = cg_log_format_line(line, sizeof line, line_format, level, mod, rid, msg, fields, n);
    ssize_t w = write(out_fd, line, (size_t)len);
    (void)w; /* nowhere left to report a failed log write */
}

void cg_log(cg_log_level level, const char *mod, const char *rid, const char *fmt, ...)
{
    if (!cg_log_enabled(level))
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    emit(level, mod, rid, msg, NULL, 0);
}

void cg_log_kv(cg_log_level level, const char *mod, const char *rid, const char *msg,
               const struct cg_kv *fields, int n)
{
    if (!cg_log_enabled(level))
        return;
    emit(level, mod, rid, msg, fields, n);
}
