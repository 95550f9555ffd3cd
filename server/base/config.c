/* config.c - parsing, precedence, validation and redacted printing of the config table. */
#include "base/config.h"

#include <ctype.h>
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum cfg_type { T_STR, T_SECRET, T_DSN, T_ENUM, T_INT, T_DOUBLE, T_BOOL };

struct cfg_row {
    const char *key;
    enum cfg_type type;
    const char *def;
    int64_t min, max;
    const char *choices;
    const char *help;
    size_t offset;
};

static const struct cfg_row rows[] = {
#define CG_CFG_ROW(key, type, def, min, max, choices, help)                                        \
    {#key, T_##type, def, min, max, choices, help, offsetof(struct cg_config, key)},
    CG_CONFIG_TABLE(CG_CFG_ROW)
#undef CG_CFG_ROW
};

#define ROW_COUNT (sizeof rows / sizeof rows[0])
_Static_assert(ROW_COUNT <= sizeof((struct cg_config *)0)->origin / sizeof(char *),
               "grow cg_config.origin");

#define ENV_PREFIX "CTXGUARD_"
#define LINE_CAP 4096

static bool is_text(enum cfg_type t)
{
    return t == T_STR || t == T_SECRET || t == T_DSN || t == T_ENUM;
}

static void env_name(const char *key, char *out, size_t cap)
{
    size_t n = (size_t)snprintf(out, cap, ENV_PREFIX);
    for (const char *k = key; *k && n + 1 < cap; k++)
        out[n++] = (char)toupper((unsigned char)*k);
    out[n] = '\0';
}

static const struct cfg_row *find_row(const char *key, size_t keylen)
{
    for (size_t i = 0; i < ROW_COUNT; i++) {
        const char *k = rows[i].key;
        size_t j = 0;
        /* '-' in flags stands for '_' in keys. */
        for (; j < keylen && k[j]; j++) {
            char c = key[j] == '-' ? '_' : key[j];
            if (c != k[j])
                break;
        }
        if (j == keylen && k[j] == '\0')
            return &rows[i];
    }
    return NULL;
}

static bool choice_ok(const char *choices, const char *value)
{
    size_t vlen = strlen(value);
    const char *p = choices;
    while (*p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == vlen && strncmp(p, value, len) == 0)
            return true;
        if (!bar)
            break;
        p = bar + 1;
    }
    return false;
}

static bool parse_bool(const char *v, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(v, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return false;
}

static cg_status set_row(struct cg_config *cfg, const struct cfg_row *row, const char *value,
                         const char *origin, struct cg_err *err)
{
    char env[64];
    env_name(row->key, env, sizeof env);
    char *field = (char *)cfg + row->offset;

    if (is_text(row->type)) {
        if (row->type == T_ENUM && !choice_ok(row->choices, value))
            return cg_err_set(err, CG_CONFIG,
                              "config key '%s' (%s, from %s): '%.40s' is not one of %s", row->key,
                              env, origin, value, row->choices);
        if (strlen(value) > LINE_CAP)
            return cg_err_set(err, CG_CONFIG,
                              "config key '%s' (%s, from %s): value longer than %d bytes", row->key,
                              env, origin, LINE_CAP);
        char *copy = strdup(value);
        if (copy == NULL)
            return cg_err_set(err, CG_NOMEM, "out of memory setting '%s'", row->key);
        char **slot = (char **)field;
        free(*slot);
        *slot = copy;
    } else if (row->type == T_INT) {
        errno = 0;
        char *end = NULL;
        long long v = strtoll(value, &end, 10);
        if (value[0] == '\0' || *end != '\0' || errno == ERANGE)
            return cg_err_set(err, CG_CONFIG,
                              "config key '%s' (%s, from %s): '%.40s' is not an integer", row->key,
                              env, origin, value);
        if (v < row->min || v > row->max)
            return cg_err_set(err, CG_CONFIG,
                              "config key '%s' (%s, from %s): %lld is out of range %lld..%lld",
                              row->key, env, origin, v, (long long)row->min, (long long)row->max);
        *(int64_t *)field = v;
    } else if (row->type == T_DOUBLE) {
        errno = 0;
        char *end = NULL;
        double v = strtod(value, &end);
        /* Plain decimals only: no hex floats, inf or nan (isdigit on the first byte). */
        bool plain = isdigit((unsigned char)value[0]) ||
                     (value[0] == '-' && isdigit((unsigned char)value[1]));
        if (!plain || *end != '\0' || errno == ERANGE || strpbrk(value, "xXpP") != NULL)
            return cg_err_set(err, CG_CONFIG,
                              "config key '%s' (%s, from %s): '%.40s' is not a number", row->key,
                              env, origin, value);
        if (v < (double)row->min || v > (double)row->max)
            return cg_err_set(err, CG_CONFIG,
                              "config key '%s' (%s, from %s): %g is out of range %lld..%lld",
                              row->key, env, origin, v, (long long)row->min, (long long)row->max);
        *(double *)field = v;
    } else {
        bool b;
        if (!parse_bool(value, &b))
            return cg_err_set(err, CG_CONFIG,
                              "config key '%s' (%s, from %s): '%.40s' is not true or false",
                              row->key, env, origin, value);
        *(bool *)field = b;
    }
    cfg->origin[row - rows] = origin;
    return CG_OK;
}

cg_status cg_config_set(struct cg_config *cfg, const char *key, const char *value,
                        const char *origin, struct cg_err *err)
{
    const struct cfg_row *row = find_row(key, strlen(key));
    if (row == NULL)
        return cg_err_set(err, CG_CONFIG, "unknown config key '%.60s' (from %s)", key, origin);
    return set_row(cfg, row, value, origin, err);
}

cg_status cg_config_init(struct cg_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    for (size_t i = 0; i < ROW_COUNT; i++) {
        struct cg_err err;
        cg_status st = set_row(cfg, &rows[i], rows[i].def, "default", &err);
        if (st != CG_OK) {
            cg_config_cleanup(cfg);
            return st;
        }
    }
    return CG_OK;
}

void cg_config_cleanup(struct cg_config *cfg)
{
    for (size_t i = 0; i < ROW_COUNT; i++) {
        if (is_text(rows[i].type)) {
            char **slot = (char **)((char *)cfg + rows[i].offset);
            free(*slot);
            *slot = NULL;
        }
    }
    for (size_t i = 0; i < ROW_COUNT; i++) {
        free(cfg->origin_owned[i]);
        cfg->origin_owned[i] = NULL;
    }
}

/* Sets a key from a config file line: origins must outlive the config, so the line's
 * origin text is copied and owned by cfg (the row's earlier one, if any, is freed). */
static cg_status set_from_file(struct cg_config *cfg, const char *key, const char *value,
                               const char *origin, struct cg_err *err)
{
    char *owned = strdup(origin);
    if (owned == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory");
    cg_status st = cg_config_set(cfg, key, value, owned, err);
    if (st != CG_OK) {
        free(owned);
        return st;
    }
    for (size_t i = 0; i < ROW_COUNT; i++)
        if (cfg->origin[i] == owned) {
            free(cfg->origin_owned[i]);
            cfg->origin_owned[i] = owned;
        }
    return CG_OK;
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    char *end = s + strlen(s);
    while (end > s && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return s;
}

/* Turns the text after '=' (trimmed) into the value, in place: a quoted value ("...", with \"
 * and \\ as the only escapes, as cg_config_print writes them) ends at its closing quote, and
 * only a comment may follow it; an unquoted value ends before a '#' that starts the text or
 * follows white space. Returns NULL, or what is wrong. */
static const char *parse_value(char *value)
{
    if (value[0] == '"') {
        char *in = value + 1, *out = value;
        for (; *in != '"'; in++) {
            if (*in == '\0')
                return "no closing quote";
            if (*in == '\\' && (in[1] == '"' || in[1] == '\\'))
                in++;
            *out++ = *in;
        }
        *out = '\0';
        char *rest = trim(in + 1);
        if (*rest != '\0' && *rest != '#')
            return "only a comment may follow the closing quote";
        return NULL;
    }
    for (char *c = value; *c != '\0'; c++) {
        if (*c == '#' && (c == value || isspace((unsigned char)c[-1]))) {
            *c = '\0';
            break;
        }
    }
    char *end = value + strlen(value);
    while (end > value && isspace((unsigned char)end[-1]))
        *--end = '\0';
    return NULL;
}

cg_status cg_config_load_file(struct cg_config *cfg, const char *path, struct cg_err *err)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return cg_err_set(err, CG_CONFIG, "cannot open config file '%.80s': %s", path,
                          strerror(errno));
    char line[LINE_CAP + 2];
    int lineno = 0;
    cg_status st = CG_OK;
    while (fgets(line, sizeof line, f) != NULL) {
        lineno++;
        size_t len = strlen(line);
        if (len == sizeof line - 1 && line[len - 1] != '\n') {
            st = cg_err_set(err, CG_CONFIG, "config file '%.80s' line %d: line too long", path,
                            lineno);
            break;
        }
        char *s = trim(line);
        if (*s == '\0' || *s == '#')
            continue;
        char *eq = strchr(s, '=');
        if (eq == NULL) {
            st = cg_err_set(err, CG_CONFIG, "config file '%.80s' line %d: expected key = value",
                            path, lineno);
            break;
        }
        *eq = '\0';
        char *key = trim(s);
        char *value = trim(eq + 1);
        const char *problem = parse_value(value);
        if (problem != NULL) {
            st = cg_err_set(err, CG_CONFIG, "config file '%.80s' line %d: key '%.40s': %s", path,
                            lineno, key, problem);
            break;
        }
        char origin[128];
        snprintf(origin, sizeof origin, "file %.90s:%d", path, lineno);
        st = set_from_file(cfg, key, value, origin, err);
        if (st != CG_OK)
            break;
    }
    fclose(f);
    return st;
}

cg_status cg_config_load_env(struct cg_config *cfg, char *const *envp, struct cg_err *err)
{
    const size_t plen = strlen(ENV_PREFIX);
    for (char *const *e = envp; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, ENV_PREFIX, plen) != 0)
            continue;
        const char *name = *e + plen;
        const char *eq = strchr(name, '=');
        if (eq == NULL)
            continue;
        char key[64];
        size_t klen = (size_t)(eq - name);
        if (klen >= sizeof key)
            return cg_err_set(err, CG_CONFIG, "unknown environment variable %.80s", *e);
        for (size_t i = 0; i < klen; i++)
            key[i] = (char)tolower((unsigned char)name[i]);
        key[klen] = '\0';
        /* CTXGUARD_CONFIG names the file; TARGET and KEY belong to ctxguardctl, and a
         * shell that exports them for the CLI must not stop the server. */
        if (strcmp(key, "config") == 0 || strcmp(key, "target") == 0 || strcmp(key, "key") == 0)
            continue;
        const struct cfg_row *row = find_row(key, klen);
        if (row == NULL)
            return cg_err_set(err, CG_CONFIG, "unknown environment variable " ENV_PREFIX "%.*s",
                              (int)klen, name);
        cg_status st = set_row(cfg, row, eq + 1, "env", err);
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
}

static const char *env_lookup(char *const *envp, const char *name)
{
    size_t n = strlen(name);
    for (char *const *e = envp; e != NULL && *e != NULL; e++)
        if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
            return *e + n + 1;
    return NULL;
}

cg_status cg_config_load(struct cg_config *cfg, struct cg_config_cli *cli, int argc, char **argv,
                         char *const *envp, struct cg_err *err)
{
    memset(cli, 0, sizeof *cli);
    cli->command = "serve";
    bool have_command = false;

    /* First pass: find --config and the non-config flags; config flags wait for the
     * second pass so that they override the file and the environment. */
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config") == 0) {
            if (i + 1 >= argc)
                return cg_err_set(err, CG_CONFIG, "flag --config needs a file name");
            cli->config_file = argv[++i];
        } else if (strncmp(a, "--config=", 9) == 0) {
            cli->config_file = a + 9;
        } else if (strcmp(a, "--print-config") == 0) {
            cli->print_config = true;
        } else if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            cli->help = true;
        } else if (strcmp(a, "--version") == 0) {
            cli->version = true;
        } else if (strncmp(a, "--", 2) == 0) {
            if (strchr(a, '=') == NULL)
                i++; /* its value */
        } else {
            if (strcmp(a, "serve") != 0 && strcmp(a, "migrate") != 0)
                return cg_err_set(err, CG_CONFIG, "unknown command '%.40s' (serve or migrate)", a);
            if (have_command)
                return cg_err_set(err, CG_CONFIG, "more than one command given ('%.40s')", a);
            cli->command = a;
            have_command = true;
        }
    }

    const char *file = cli->config_file ? cli->config_file : env_lookup(envp, "CTXGUARD_CONFIG");
    cg_status st;
    if (file != NULL && file[0] != '\0') {
        st = cg_config_load_file(cfg, file, err);
        if (st != CG_OK)
            return st;
    }
    st = cg_config_load_env(cfg, envp, err);
    if (st != CG_OK)
        return st;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "--", 2) != 0)
            continue;
        const char *name = a + 2;
        if (strcmp(name, "print-config") == 0 || strcmp(name, "help") == 0 ||
            strcmp(name, "version") == 0)
            continue;
        if (strcmp(name, "config") == 0) {
            i++;
            continue;
        }
        if (strncmp(name, "config=", 7) == 0)
            continue;
        const char *eq = strchr(name, '=');
        size_t klen = eq ? (size_t)(eq - name) : strlen(name);
        const char *value;
        if (eq != NULL) {
            value = eq + 1;
        } else {
            if (i + 1 >= argc)
                return cg_err_set(err, CG_CONFIG, "flag --%.60s needs a value", name);
            value = argv[++i];
        }
        const struct cfg_row *row = find_row(name, klen);
        if (row == NULL)
            return cg_err_set(err, CG_CONFIG, "unknown flag --%.*s", (int)(klen > 60 ? 60 : klen),
                              name);
        st = set_row(cfg, row, value, "flag", err);
        if (st != CG_OK)
            return st;
    }
    return cg_config_validate(cfg, err);
}

/* The HTTP listener's keys: an address with a port (no unix: socket), TLS files in pairs. */
static cg_status validate_http(const struct cg_config *cfg, struct cg_err *err)
{
    const char *listen = cfg->http_listen;
    const char *colon = strrchr(listen, ':');
    if (listen[0] != '\0' &&
        (strncmp(listen, "unix:", 5) == 0 || colon == NULL || colon[1] == '\0' ||
         strspn(colon + 1, "0123456789") != strlen(colon + 1) || strlen(colon + 1) > 5 ||
         strtol(colon + 1, NULL, 10) > 65535 ||
         (listen[0] == '[' && (colon == listen || colon[-1] != ']'))))
        return cg_err_set(err, CG_CONFIG,
                          "config key 'http_listen' (CTXGUARD_HTTP_LISTEN): '%.60s' is not "
                          "host:port or [ipv6]:port",
                          listen);
    if ((cfg->http_tls_cert[0] != '\0') != (cfg->http_tls_key[0] != '\0'))
        return cg_err_set(err, CG_CONFIG,
                          "config keys 'http_tls_cert' and 'http_tls_key' (CTXGUARD_HTTP_TLS_CERT, "
                          "CTXGUARD_HTTP_TLS_KEY): set both or neither");
    if (cfg->http_tls_cert[0] != '\0' && listen[0] == '\0')
        return cg_err_set(err, CG_CONFIG,
                          "config key 'http_tls_cert' (CTXGUARD_HTTP_TLS_CERT): needs http_listen");
    return CG_OK;
}

cg_status cg_config_validate(const struct cg_config *cfg, struct cg_err *err)
{
    if (cfg->listen[0] == '\0')
        return cg_err_set(err, CG_CONFIG,
                          "config key 'listen' (CTXGUARD_LISTEN): must not be empty");
    if (strncmp(cfg->listen, "unix:", 5) != 0 && strrchr(cfg->listen, ':') == NULL)
        return cg_err_set(err, CG_CONFIG,
                          "config key 'listen' (CTXGUARD_LISTEN): '%.60s' has no port (host:port)",
                          cfg->listen);
    if (cfg->pg_dsn[0] == '\0')
        return cg_err_set(err, CG_CONFIG,
                          "config key 'pg_dsn' (CTXGUARD_PG_DSN): must not be empty");
    if (cfg->redis_url[0] != '\0' && strncmp(cfg->redis_url, "redis://", 8) != 0)
        return cg_err_set(err, CG_CONFIG,
                          "config key 'redis_url' (CTXGUARD_REDIS_URL): must start with redis://");
    size_t klen = strlen(cfg->admin_key);
    if (klen > 0 && klen < 16)
        return cg_err_set(
            err, CG_CONFIG,
            "config key 'admin_key' (CTXGUARD_ADMIN_KEY): must be at least 16 characters");
    if ((cfg->tls_cert[0] != '\0') != (cfg->tls_key[0] != '\0'))
        return cg_err_set(err, CG_CONFIG,
                          "config keys 'tls_cert' and 'tls_key': set both or neither");
    if (cfg->tls_client_ca[0] != '\0' && cfg->tls_cert[0] == '\0')
        return cg_err_set(err, CG_CONFIG, "config key 'tls_client_ca': needs tls_cert and tls_key");
    cg_status st = validate_http(cfg, err);
    if (st != CG_OK)
        return st;
    if (cfg->llm_base_url[0] != '\0' && strncmp(cfg->llm_base_url, "http://", 7) != 0 &&
        strncmp(cfg->llm_base_url, "https://", 8) != 0)
        return cg_err_set(err, CG_CONFIG,
                          "config key 'llm_base_url' (CTXGUARD_LLM_BASE_URL): must start with "
                          "http:// or https://");
    if (cfg->llm_base_url[0] != '\0' && cfg->llm_model[0] == '\0')
        return cg_err_set(err, CG_CONFIG,
                          "config key 'llm_model' (CTXGUARD_LLM_MODEL): must not be empty when "
                          "llm_base_url is set");
    return CG_OK;
}

void cg_config_redact_dsn(const char *dsn, char *out, size_t cap)
{
    if (cap == 0)
        return;
    size_t o = 0;
    const char *p = dsn;
    const char *scheme = strstr(dsn, "://");
    const char *at = NULL;
    if (scheme != NULL) {
        const char *host_start = scheme + 3;
        const char *slash = strchr(host_start, '/');
        at = strchr(host_start, '@');
        if (at != NULL && slash != NULL && at > slash)
            at = NULL;
        if (at != NULL) {
            const char *colon = memchr(host_start, ':', (size_t)(at - host_start));
            if (colon != NULL) {
                /* scheme://user:PASSWORD@host -> scheme://user:****@host */
                while (p <= colon && o + 1 < cap)
                    out[o++] = *p++;
                for (const char *s = "****"; *s && o + 1 < cap; s++)
                    out[o++] = *s;
                p = at;
            }
        }
    }
    while (*p && o + 1 < cap) {
        /* password=VALUE as a keyword or query parameter */
        bool boundary = p == dsn || p[-1] == ' ' || p[-1] == '?' || p[-1] == '&';
        if (boundary && strncasecmp(p, "password=", 9) == 0) {
            for (int i = 0; i < 9 && o + 1 < cap; i++)
                out[o++] = *p++;
            for (const char *s = "****"; *s && o + 1 < cap; s++)
                out[o++] = *s;
            if (*p == '\'') {
                p++;
                while (*p && *p != '\'')
                    p++;
                if (*p)
                    p++;
            } else {
                while (*p && *p != ' ' && *p != '&')
                    p++;
            }
            continue;
        }
        out[o++] = *p++;
    }
    out[o] = '\0';
}

/* Writes s as a quoted config-file value: \" and \\ escaped (parse_value reads them back). */
static void print_quoted(FILE *out, const char *s)
{
    fputc('"', out);
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

void cg_config_print(const struct cg_config *cfg, FILE *out)
{
    fputs("# ctxguard --print-config: every key, its value and where it came from. Read back\n"
          "# with --config FILE; secrets are never printed, so a key holding one is a comment\n"
          "# here and must come from the environment (or be written in by hand).\n",
          out);
    for (size_t i = 0; i < ROW_COUNT; i++) {
        const struct cfg_row *row = &rows[i];
        const char *field = (const char *)cfg + row->offset;
        const char *origin = cfg->origin[i] ? cfg->origin[i] : "default";
        const char *text = is_text(row->type) ? *(char *const *)field : NULL;
        if (row->type == T_SECRET && text[0] != '\0') {
            fprintf(out, "# %-22s = (a secret, from %s: not printed)\n", row->key, origin);
            continue;
        }
        if (row->type == T_DSN) {
            char red[LINE_CAP + 1];
            cg_config_redact_dsn(text, red, sizeof red);
            if (strcmp(red, text) != 0) {
                fprintf(out, "# %-22s = ", row->key);
                print_quoted(out, red);
                fprintf(out, " # %s; its password is not printed\n", origin);
                continue;
            }
        }
        fprintf(out, "%-24s = ", row->key);
        switch (row->type) {
        case T_SECRET:
        case T_DSN:
        case T_STR:
        case T_ENUM:
            print_quoted(out, text);
            break;
        case T_INT:
            fprintf(out, "%lld", (long long)*(const int64_t *)field);
            break;
        case T_DOUBLE: {
            /* The shortest of 15 and 17 digits that reads back as the same number. */
            double v = *(const double *)field;
            char num[32];
            snprintf(num, sizeof num, "%.15g", v);
            if (strtod(num, NULL) != v)
                snprintf(num, sizeof num, "%.17g", v);
            fputs(num, out);
            break;
        }
        case T_BOOL:
            fputs(*(const bool *)field ? "true" : "false", out);
            break;
        }
        fprintf(out, " # %s\n", origin);
    }
}

void cg_config_print_reference(FILE *out)
{
    static const char *const type_names[] = {"string", "secret", "dsn", "enum",
                                             "int",    "number", "bool"};
    for (size_t i = 0; i < ROW_COUNT; i++) {
        const struct cfg_row *row = &rows[i];
        char env[64];
        env_name(row->key, env, sizeof env);
        char flag[64];
        size_t k = 0;
        for (; row->key[k] && k + 1 < sizeof flag; k++)
            flag[k] = row->key[k] == '_' ? '-' : row->key[k];
        flag[k] = '\0';
        fprintf(out, "  --%-24s %-32s %s", flag, env, type_names[row->type]);
        if (row->type == T_INT || row->type == T_DOUBLE)
            fprintf(out, " %lld..%lld", (long long)row->min, (long long)row->max);
        if (row->type == T_ENUM)
            fprintf(out, " %s", row->choices);
        fprintf(out, ", default \"%s\"\n      %s\n", row->def, row->help);
    }
}
