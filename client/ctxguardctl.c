/* ctxguardctl.c - the command-line client of ctxguard: admin (tenants, keys), diagnostics
 * (health, whoami, ping), budgets, token counts, summaries, compression, over the client
 * library.
 *
 * Commands live in one table (`commands` below). Adding a command is adding a row and its
 * function: the row gives the words, the positional arguments, the options, which key it
 * uses and the help line; argument parsing, key selection, the client, errors and --help
 * are shared.
 *
 * Exit status: 0 success, 1 the call failed (or health is not SERVING), 2 usage error.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/status.h"
#include "cg_client.h"
#include "rpc/pb_json.h"
#include "ctxguard/v1/admin.pb-c.h"
#include "ctxguard/v1/budget.pb-c.h"
#include "ctxguard/v1/context.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"

#define PROG "ctxguardctl"
#define EXIT_OK 0
#define EXIT_FAIL 1
#define EXIT_USAGE 2

#define MAX_WORDS 2        /* "tenant create" */
#define MAX_POSITIONAL 128 /* `notify redrive` takes a list of delivery ids */
#define MAX_CMD_OPTIONS 8
#define MAX_ARGS 256 /* more command-line arguments than this is a mistake */
#define MAX_TIMEOUT_MS 86400000L
#define LIST_MAX_PAGES 10000 /* a server that never stops paging is a bug, not a reason to loop */

#define ADMIN_METHOD(name) "/ctxguard.v1.AdminService/" name
#define BUDGET_METHOD(name) "/ctxguard.v1.BudgetService/" name
#define CONTEXT_METHOD(name) "/ctxguard.v1.ContextService/" name

/* Which key a command sends when --key is not given. */
enum key_source {
    KEY_FLAG_ONLY, /* only --key (health needs none) */
    KEY_TENANT,    /* CTXGUARD_KEY */
    KEY_ADMIN,     /* CTXGUARD_ADMIN_KEY, else CTXGUARD_KEY */
    KEY_ANY,       /* CTXGUARD_KEY, else CTXGUARD_ADMIN_KEY */
};

struct cmd_option {
    const char *name;       /* "--time-zone" */
    const char *value_name; /* "TZ"; NULL for a flag without a value */
    const char *help;
};

struct cmd_args {
    const char *positional[MAX_POSITIONAL];
    int positional_count;
    const char *option_values[MAX_CMD_OPTIONS]; /* by index in the row's options; NULL: not
                                                   given; "" for a given flag */
};

struct ctl;

struct command {
    const char *words;     /* "tenant create" */
    const char *arg_usage; /* "NAME" */
    const char *summary;
    enum key_source key;
    int min_positional;
    int max_positional;
    struct cmd_option options[MAX_CMD_OPTIONS]; /* ends at the first empty name */
    int (*run)(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args);
};

/* Global options and the lazily created client. */
struct ctl {
    const char *target;
    const char *key_flag;
    const char *tls_ca;
    long timeout_ms;
    bool timeout_given;
    bool json;
    const char *key; /* chosen for the command */
    struct cg_client *client;
};

/* ------------------------------------------------------------------ output ------ */

/* Prints text for a terminal: control characters become '?', the rest is left as is. */
static void print_text(FILE *out, const char *s)
{
    if (s == NULL)
        return;
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        fputc(c < 0x20 || c == 0x7f ? '?' : c, out);
    }
}

static void print_field(const char *label, const char *value)
{
    printf("%-12s ", label);
    print_text(stdout, value != NULL && value[0] != '\0' ? value : "-");
    fputc('\n', stdout);
}

/* Formats ms since the epoch as ISO 8601 UTC ("2024-05-01T12:00:00.123Z"); 0 as "-". */
static const char *format_time(int64_t unix_ms, char *buf, size_t len)
{
    struct tm tm;
    time_t secs = (time_t)(unix_ms / 1000);
    int millis = (int)(unix_ms % 1000);

    if (unix_ms == 0) {
        snprintf(buf, len, "-");
        return buf;
    }
    if (millis < 0) {
        millis += 1000;
        secs -= 1;
    }
    if (gmtime_r(&secs, &tm) == NULL ||
        snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1,
                 tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, millis) < 0)
        snprintf(buf, len, "%" PRId64, unix_ms);
    return buf;
}

static int print_json(const ProtobufCMessage *msg)
{
    cg_status rc = cg_json_write_message(stdout, msg);
    if (rc == CG_OK && fputc('\n', stdout) == EOF)
        rc = CG_IO;
    if (rc) {
        fprintf(stderr, PROG ": cannot write JSON output: %s\n", cg_status_str(rc));
        return EXIT_FAIL;
    }
    return EXIT_OK;
}

/* Reports a failed call as "ctxguardctl: NAME: message". Returns EXIT_FAIL. */
static int fail_status(const struct cg_client_status *st)
{
    fprintf(stderr, PROG ": %s: ", st->name);
    print_text(stderr, st->message[0] != '\0' ? st->message : cg_status_str(st->code));
    fputc('\n', stderr);
    return EXIT_FAIL;
}

/* Reports an answer that lacks what the protocol promises. Returns EXIT_FAIL. */
static int fail_answer(const char *what)
{
    fprintf(stderr, PROG ": INTERNAL: the server's answer has no %s\n", what);
    return EXIT_FAIL;
}

/* Reports a usage error and the way to help. Returns EXIT_USAGE. */
static int usage_error(const char *fmt, ...) CG_PRINTF(1, 2);
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, PROG ": ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n" PROG ": try '" PROG " --help'\n");
    return EXIT_USAGE;
}

/* Prints a table cell: the text made safe, then spaces up to width (counted in bytes). */
static void print_cell(const char *s, size_t width)
{
    size_t len = s != NULL ? strlen(s) : 0;
    print_text(stdout, s);
    for (; len < width; len++)
        fputc(' ', stdout);
    fputs("  ", stdout);
}

/* ------------------------------------------------------------------ arguments --- */

static bool parse_long(const char *s, long min, long max, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
        return false;
    *out = v;
    return true;
}

static const char *env_nonempty(const char *name)
{
    const char *v = getenv(name);
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* The value of a command's option, or NULL when it was not given. */
static const char *option_value(const struct command *cmd, const struct cmd_args *args,
                                const char *name)
{
    for (int i = 0; i < MAX_CMD_OPTIONS && cmd->options[i].name != NULL; i++) {
        if (strcmp(cmd->options[i].name, name) == 0)
            return args->option_values[i];
    }
    return NULL;
}

static struct cg_client *ctl_client(struct ctl *ctl)
{
    struct cg_client_opts opts;
    struct cg_err err;

    if (ctl->client != NULL)
        return ctl->client;
    cg_client_opts_init(&opts);
    opts.target = ctl->target;
    opts.bearer_key = ctl->key;
    opts.tls_ca_file = ctl->tls_ca;
    opts.timeout_ms = (int)ctl->timeout_ms;
    ctl->client = cg_client_new(&opts, &err);
    if (ctl->client == NULL) {
        fprintf(stderr, PROG ": ");
        print_text(stderr, cg_err_text(&err));
        fputc('\n', stderr);
    }
    return ctl->client;
}

/* Runs a unary call; on failure reports it. Returns EXIT_OK with *response set, else
 * EXIT_FAIL or EXIT_USAGE (the client could not be made from the options). */
static int call(struct ctl *ctl, const char *method, const ProtobufCMessage *request,
                const ProtobufCMessageDescriptor *response_desc, ProtobufCMessage **response)
{
    struct cg_client_status st;
    struct cg_client *client = ctl_client(ctl);

    *response = NULL;
    if (client == NULL)
        return EXIT_USAGE;
    if (cg_client_unary(client, method, request, response_desc, response, &st) != CG_OK)
        return fail_status(&st);
    return EXIT_OK;
}

/* ------------------------------------------------------------------ commands ---- */

static int cmd_health(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Grpc__Health__V1__HealthCheckRequest req = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    const char *service = args->positional_count > 0 ? args->positional[0] : "";
    int rc;

    req.service = (char *)service;
    rc = call(ctl, "/grpc.health.v1.Health/Check", &req.base,
              &grpc__health__v1__health_check_response__descriptor, &msg);
    if (rc)
        goto out;
    const Grpc__Health__V1__HealthCheckResponse *resp = (const void *)msg;
    const ProtobufCEnumValue *ev = protobuf_c_enum_descriptor_get_value(
        &grpc__health__v1__health_check_response__serving_status__descriptor, resp->status);
    if (ctl->json) {
        rc = print_json(msg);
        if (rc)
            goto out;
    } else if (ev != NULL) {
        printf("%s\n", ev->name);
    } else {
        printf("%d\n", (int)resp->status);
    }
    if (resp->status != GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING)
        rc = EXIT_FAIL;
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static void print_tenant(const Ctxguard__V1__Tenant *t)
{
    char when[40];
    print_field("tenant_id:", t->tenant_id);
    print_field("name:", t->name);
    print_field("time_zone:", t->time_zone);
    print_field("created_at:", format_time(t->created_at_unix_ms, when, sizeof when));
    /* PII settings: the types redacted before summarizing ("all" when none is listed). */
    char types[200] = "";
    size_t n = 0;
    for (size_t i = 0; t->settings != NULL && i < t->settings->n_redact_types; i++) {
        const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(
            &ctxguard__v1__pii_type__descriptor, (int)t->settings->redact_types[i]);
        const char *name = v != NULL ? v->name : "?";
        if (strncmp(name, "PII_TYPE_", 9) == 0)
            name += 9;
        n += (size_t)snprintf(types + n, n < sizeof types ? sizeof types - n : 0, "%s%s",
                              n > 0 ? "," : "", name);
        if (n >= sizeof types)
            break;
    }
    print_field("pii_redact:", n > 0 ? types : "all");
    print_field("redact_artifacts:",
                t->settings != NULL && t->settings->redact_artifacts ? "on" : "off");
    char days[24] = "kept";
    if (t->settings != NULL && t->settings->history_retention_days > 0)
        snprintf(days, sizeof days, "%u days", t->settings->history_retention_days);
    print_field("history_retention:", days);
}

/* "email,PHONE,card_number" (or "all") into types (at most max); false on an unknown name. */
static bool parse_pii_types(const char *text, Ctxguard__V1__PiiType *types, size_t max,
                            size_t *n_out, char *bad, size_t bad_len)
{
    *n_out = 0;
    if (strcmp(text, "all") == 0)
        return true;
    const char *p = text;
    while (*p != '\0') {
        size_t len = strcspn(p, ",");
        char name[64];
        int w = snprintf(name, sizeof name, "PII_TYPE_%.*s", (int)len, p);
        for (char *c = name; *c != '\0'; c++)
            if (*c >= 'a' && *c <= 'z')
                *c = (char)(*c - 'a' + 'A');
        const ProtobufCEnumValue *v = w > 0 && (size_t)w < sizeof name
                                          ? protobuf_c_enum_descriptor_get_value_by_name(
                                                &ctxguard__v1__pii_type__descriptor, name)
                                          : NULL;
        if (v == NULL || v->value == 0 || *n_out >= max) {
            snprintf(bad, bad_len, "%.*s", (int)len, p);
            return false;
        }
        types[(*n_out)++] = (Ctxguard__V1__PiiType)v->value;
        p += len;
        if (*p == ',')
            p++;
    }
    return *n_out > 0;
}

/* Reads the tenant, changes the settings given (the others are kept: the RPC replaces them
 * whole), writes them back and shows the tenant. Without options it only shows it. */
static int cmd_tenant_settings(struct ctl *ctl, const struct command *cmd,
                               const struct cmd_args *args)
{
    const char *redact = option_value(cmd, args, "--redact");
    const char *artifacts = option_value(cmd, args, "--redact-artifacts");
    const char *retention = option_value(cmd, args, "--retention-days");
    long days = 0;
    if (retention != NULL && !parse_long(retention, 0, 36500, &days))
        return usage_error("--retention-days must be 0..36500 (0: kept), not '%s'", retention);
    Ctxguard__V1__PiiType types[16];
    size_t n_types = 0;
    char bad[64];
    if (redact != NULL && !parse_pii_types(redact, types, 16, &n_types, bad, sizeof bad))
        return usage_error("--redact takes all or a list of email, phone, card_number, ssn, "
                           "ipv4, ipv6, api_key, secret; not '%s'",
                           bad);
    if (artifacts != NULL && strcmp(artifacts, "on") != 0 && strcmp(artifacts, "off") != 0)
        return usage_error("--redact-artifacts must be on or off, not '%s'", artifacts);

    Ctxguard__V1__GetTenantRequest get = CTXGUARD__V1__GET_TENANT_REQUEST__INIT;
    ProtobufCMessage *msg = NULL, *upd = NULL;
    get.tenant_id = (char *)args->positional[0];
    int rc = call(ctl, ADMIN_METHOD("GetTenant"), &get.base,
                  &ctxguard__v1__get_tenant_response__descriptor, &msg);
    if (rc)
        goto out;
    const Ctxguard__V1__GetTenantResponse *got = (const void *)msg;
    if (got->tenant == NULL) {
        rc = fail_answer("tenant");
        goto out;
    }
    const Ctxguard__V1__Tenant *shown = got->tenant;
    if (redact != NULL || artifacts != NULL || retention != NULL) {
        Ctxguard__V1__TenantSettings settings = CTXGUARD__V1__TENANT_SETTINGS__INIT;
        if (got->tenant->settings != NULL)
            settings = *got->tenant->settings;
        if (redact != NULL) {
            settings.redact_types = types;
            settings.n_redact_types = n_types;
        }
        if (artifacts != NULL)
            settings.redact_artifacts = strcmp(artifacts, "on") == 0;
        if (retention != NULL)
            settings.history_retention_days = (uint32_t)days;
        Ctxguard__V1__UpdateTenantSettingsRequest req =
            CTXGUARD__V1__UPDATE_TENANT_SETTINGS_REQUEST__INIT;
        req.tenant_id = (char *)args->positional[0];
        req.settings = &settings;
        rc = call(ctl, ADMIN_METHOD("UpdateTenantSettings"), &req.base,
                  &ctxguard__v1__update_tenant_settings_response__descriptor, &upd);
        if (rc)
            goto out;
        const Ctxguard__V1__UpdateTenantSettingsResponse *resp = (const void *)upd;
        if (resp->tenant == NULL) {
            rc = fail_answer("tenant");
            goto out;
        }
        shown = resp->tenant;
    }
    if (ctl->json)
        rc = print_json(&shown->base);
    else
        print_tenant(shown);
out:
    if (upd != NULL)
        protobuf_c_message_free_unpacked(upd, NULL);
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_tenant_create(struct ctl *ctl, const struct command *cmd,
                             const struct cmd_args *args)
{
    Ctxguard__V1__CreateTenantRequest req = CTXGUARD__V1__CREATE_TENANT_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    const char *time_zone = option_value(cmd, args, "--time-zone");
    int rc;

    req.name = (char *)args->positional[0];
    if (time_zone != NULL)
        req.time_zone = (char *)time_zone;
    rc = call(ctl, ADMIN_METHOD("CreateTenant"), &req.base,
              &ctxguard__v1__create_tenant_response__descriptor, &msg);
    if (rc)
        goto out;
    const Ctxguard__V1__CreateTenantResponse *resp = (const void *)msg;
    if (resp->tenant == NULL) {
        rc = fail_answer("tenant");
        goto out;
    }
    if (ctl->json) {
        rc = print_json(&resp->tenant->base);
    } else {
        print_text(stdout, resp->tenant->tenant_id);
        fputc('\n', stdout);
    }
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_tenant_get(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__GetTenantRequest req = CTXGUARD__V1__GET_TENANT_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    int rc;

    req.tenant_id = (char *)args->positional[0];
    rc = call(ctl, ADMIN_METHOD("GetTenant"), &req.base,
              &ctxguard__v1__get_tenant_response__descriptor, &msg);
    if (rc)
        goto out;
    const Ctxguard__V1__GetTenantResponse *resp = (const void *)msg;
    if (resp->tenant == NULL) {
        rc = fail_answer("tenant");
        goto out;
    }
    if (ctl->json)
        rc = print_json(&resp->tenant->base);
    else
        print_tenant(resp->tenant);
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

/* Pages through all tenants, then prints them: a failure midway prints nothing (JSON
 * output is then never half an object). */
static int cmd_tenant_list(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    ProtobufCMessage *pages[LIST_MAX_PAGES];
    int page_count = 0;
    const char *page_size_text = option_value(cmd, args, "--page-size");
    long page_size = 0;
    int rc = EXIT_OK;

    if (page_size_text != NULL && !parse_long(page_size_text, 1, 1000, &page_size))
        return usage_error("--page-size must be 1..1000, not '%s'", page_size_text);
    const char *token = "";
    for (;;) {
        Ctxguard__V1__ListTenantsRequest req = CTXGUARD__V1__LIST_TENANTS_REQUEST__INIT;
        req.page_size = (uint32_t)page_size;
        req.page_token = (char *)token;
        if (page_count == LIST_MAX_PAGES) {
            fprintf(stderr, PROG ": INTERNAL: the server kept paging past %d pages\n",
                    LIST_MAX_PAGES);
            rc = EXIT_FAIL;
            goto out;
        }
        rc = call(ctl, ADMIN_METHOD("ListTenants"), &req.base,
                  &ctxguard__v1__list_tenants_response__descriptor, &pages[page_count]);
        if (rc)
            goto out;
        const Ctxguard__V1__ListTenantsResponse *resp = (const void *)pages[page_count];
        page_count++;
        const char *next = resp->next_page_token;
        if (next == NULL || next[0] == '\0')
            break;
        if (strcmp(next, token) == 0) {
            fprintf(stderr, PROG ": INTERNAL: the server returned the same page token twice\n");
            rc = EXIT_FAIL;
            goto out;
        }
        token = next;
    }

    if (ctl->json)
        fputs("{\"tenants\":[", stdout);
    else
        printf("%-36s  %-24s  %-20s  %s\n", "TENANT_ID", "NAME", "TIME_ZONE", "CREATED_AT");
    bool first = true;
    for (int p = 0; p < page_count; p++) {
        const Ctxguard__V1__ListTenantsResponse *resp = (const void *)pages[p];
        for (size_t i = 0; i < resp->n_tenants; i++) {
            const Ctxguard__V1__Tenant *t = resp->tenants[i];
            char when[40];
            if (ctl->json) {
                if (!first)
                    fputc(',', stdout);
                if (cg_json_write_message(stdout, &t->base) != CG_OK) {
                    rc = EXIT_FAIL;
                    goto out;
                }
            } else {
                print_cell(t->tenant_id, 36);
                print_cell(t->name, 24);
                print_cell(t->time_zone, 20);
                printf("%s\n", format_time(t->created_at_unix_ms, when, sizeof when));
            }
            first = false;
        }
    }
    if (ctl->json)
        fputs("]}\n", stdout);
out:
    for (int p = 0; p < page_count; p++)
        protobuf_c_message_free_unpacked(pages[p], NULL);
    return rc;
}

#define SCOPE_ID_MAX 128
#define USAGE_BAR_WIDTH 12
#define USAGE_DEPTH_DEFAULT 3
#define HISTORY_BAR_WIDTH 40

/* A SCOPE argument: "session[/task[/agent]]"; "" or "-" is the tenant (scope.tenant set). ids holds
 * the copies the Scope points into. Returns false (after a usage message) when malformed. */
struct scope_arg {
    char ids[3][SCOPE_ID_MAX + 1];
    Ctxguard__V1__Scope scope;
};

static bool parse_scope(const char *arg, struct scope_arg *out)
{
    memset(out, 0, sizeof *out);
    ctxguard__v1__scope__init(&out->scope);
    out->scope.session_id = out->ids[0];
    out->scope.task_id = out->ids[1];
    out->scope.agent_id = out->ids[2];
    /* The tenant level, said explicitly: the server refuses a spend with no scope. */
    if (arg[0] == '\0' || strcmp(arg, "-") == 0) {
        out->scope.tenant = true;
        return true;
    }
    const char *p = arg;
    for (int i = 0; i < 3; i++) {
        size_t len = strcspn(p, "/");
        if (len == 0 || len > SCOPE_ID_MAX)
            break;
        memcpy(out->ids[i], p, len);
        out->ids[i][len] = '\0';
        p += len;
        if (*p == '\0')
            return true;
        p++;
    }
    usage_error("SCOPE must be session[/task[/agent]] (ids of 1..%d characters) or - for the"
                " tenant, not '%s'",
                SCOPE_ID_MAX, arg);
    return false;
}

static const char *const key_role_names[] = {"", "agent", "viewer", "operator", "admin"};
#define KEY_ROLE_COUNT (sizeof key_role_names / sizeof *key_role_names)

/* "agent" .. "admin"; "-" for a role the server did not say. */
static const char *key_role_name(int role)
{
    return role > 0 && (size_t)role < KEY_ROLE_COUNT ? key_role_names[role] : "-";
}

/* A key's bound scope as "session[/task]"; "-" for the whole tenant. */
static const char *key_scope_text(const Ctxguard__V1__Scope *sc, char *buf, size_t len)
{
    if (sc == NULL || sc->session_id == NULL || sc->session_id[0] == '\0')
        snprintf(buf, len, "-");
    else if (sc->task_id == NULL || sc->task_id[0] == '\0')
        snprintf(buf, len, "%s", sc->session_id);
    else
        snprintf(buf, len, "%s/%s", sc->session_id, sc->task_id);
    return buf;
}

/* A key's expiry: the time, "never", or "expired" once past. */
static const char *key_expiry_text(int64_t expires_at_ms, char *buf, size_t len)
{
    if (expires_at_ms == 0) {
        snprintf(buf, len, "never");
        return buf;
    }
    if (cg_wall_ms() >= expires_at_ms) {
        snprintf(buf, len, "expired");
        return buf;
    }
    return format_time(expires_at_ms, buf, len);
}

static void print_api_key(const Ctxguard__V1__ApiKey *k)
{
    char when[40];
    char scope[2 * SCOPE_ID_MAX + 2];
    print_field("key_id:", k->key_id);
    print_field("tenant_id:", k->tenant_id);
    print_field("name:", k->name);
    print_field("role:", key_role_name(k->role));
    print_field("scope:", key_scope_text(k->scope, scope, sizeof scope));
    print_field("expires_at:", key_expiry_text(k->expires_at_unix_ms, when, sizeof when));
    print_field("created_at:", format_time(k->created_at_unix_ms, when, sizeof when));
    print_field("last_used:", k->last_used_at_unix_ms != 0
                                  ? format_time(k->last_used_at_unix_ms, when, sizeof when)
                                  : "never");
    print_field("revoked_at:", format_time(k->revoked_at_unix_ms, when, sizeof when));
}

/* A duration like 90s, 30m, 2h or 7d (a bare number is seconds) in milliseconds, 1 s to
 * one year. False for anything else. */
static bool parse_duration_ms(const char *s, int64_t *out)
{
    static const struct {
        char unit;
        int64_t ms;
    } units[] = {{'s', 1000}, {'m', 60000}, {'h', 3600000}, {'d', 86400000}};
    const int64_t max_ms = 365LL * 86400000;
    char *end = NULL;
    if (s[0] < '0' || s[0] > '9')
        return false;
    errno = 0;
    long long n = strtoll(s, &end, 10);
    if (errno != 0 || n < 1)
        return false;
    int64_t unit = 0;
    if (*end == '\0')
        unit = 1000;
    for (size_t i = 0; unit == 0 && i < sizeof units / sizeof *units; i++)
        if (end[0] == units[i].unit && end[1] == '\0')
            unit = units[i].ms;
    if (unit == 0 || n > max_ms / unit)
        return false;
    *out = (int64_t)n * unit;
    return true;
}

/* TENANT_ID of the key commands: "-" (or "") is the key's own tenant, for a tenant key. */
static char *tenant_arg(const char *arg)
{
    return (char *)(strcmp(arg, "-") == 0 ? "" : arg);
}

static int cmd_key_create(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__CreateApiKeyRequest req = CTXGUARD__V1__CREATE_API_KEY_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    const char *name = option_value(cmd, args, "--name");
    const char *role = option_value(cmd, args, "--role");
    const char *scope_text = option_value(cmd, args, "--scope");
    const char *expires = option_value(cmd, args, "--expires");
    struct scope_arg sc;
    int rc;

    req.tenant_id = tenant_arg(args->positional[0]);
    if (name != NULL)
        req.name = (char *)name;
    if (role != NULL) {
        for (size_t i = 1; i < KEY_ROLE_COUNT; i++)
            if (strcmp(role, key_role_names[i]) == 0)
                req.role = (Ctxguard__V1__ApiKeyRole)i;
        if (req.role == 0)
            return usage_error("--role must be agent, viewer, operator or admin, not '%s'", role);
    }
    if (scope_text != NULL) {
        /* A key binds to a session or a task: at most two ids. */
        if (!parse_scope(scope_text, &sc))
            return EXIT_USAGE;
        if (sc.scope.tenant || sc.ids[2][0] != '\0')
            return usage_error("--scope must be SESSION or SESSION/TASK, not '%s'", scope_text);
        req.scope = &sc.scope;
    }
    if (expires != NULL && !parse_duration_ms(expires, &req.ttl_ms))
        return usage_error("--expires must be a duration like 90s, 30m, 2h or 7d (at most 365d),"
                           " not '%s'",
                           expires);
    rc = call(ctl, ADMIN_METHOD("CreateApiKey"), &req.base,
              &ctxguard__v1__create_api_key_response__descriptor, &msg);
    if (rc)
        goto out;
    const Ctxguard__V1__CreateApiKeyResponse *resp = (const void *)msg;
    if (resp->key == NULL || resp->secret == NULL || resp->secret[0] == '\0') {
        rc = fail_answer("key or secret");
        goto out;
    }
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    char when[40];
    char scope[2 * SCOPE_ID_MAX + 2];
    print_field("key_id:", resp->key->key_id);
    print_field("tenant_id:", resp->key->tenant_id);
    print_field("name:", resp->key->name);
    print_field("role:", key_role_name(resp->key->role));
    print_field("scope:", key_scope_text(resp->key->scope, scope, sizeof scope));
    print_field("expires_at:", key_expiry_text(resp->key->expires_at_unix_ms, when, sizeof when));
    print_field("secret:", resp->secret);
    printf("\nThe secret above is shown only this once: store it now. The server keeps only\n"
           "its hash and cannot show it again.\n");
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_key_list(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__ListApiKeysRequest req = CTXGUARD__V1__LIST_API_KEYS_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    int rc;

    req.tenant_id = tenant_arg(args->positional[0]);
    rc = call(ctl, ADMIN_METHOD("ListApiKeys"), &req.base,
              &ctxguard__v1__list_api_keys_response__descriptor, &msg);
    if (rc)
        goto out;
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    const Ctxguard__V1__ListApiKeysResponse *resp = (const void *)msg;
    printf("%-16s  %-8s  %-24s  %-24s  %-24s  %-24s  %s\n", "KEY_ID", "ROLE", "SCOPE", "EXPIRES",
           "LAST_USED", "REVOKED_AT", "NAME");
    for (size_t i = 0; i < resp->n_keys; i++) {
        const Ctxguard__V1__ApiKey *k = resp->keys[i];
        char expires[40];
        char used[40];
        char revoked[40];
        char scope[2 * SCOPE_ID_MAX + 2];
        print_cell(k->key_id, 16);
        print_cell(key_role_name(k->role), 8);
        print_cell(key_scope_text(k->scope, scope, sizeof scope), 24);
        print_cell(key_expiry_text(k->expires_at_unix_ms, expires, sizeof expires), 24);
        print_cell(k->last_used_at_unix_ms != 0
                       ? format_time(k->last_used_at_unix_ms, used, sizeof used)
                       : "never",
                   24);
        print_cell(k->revoked_at_unix_ms != 0
                       ? format_time(k->revoked_at_unix_ms, revoked, sizeof revoked)
                       : "active",
                   24);
        print_text(stdout, k->name);
        fputc('\n', stdout);
    }
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_key_revoke(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__RevokeApiKeyRequest req = CTXGUARD__V1__REVOKE_API_KEY_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    int rc;

    req.tenant_id = tenant_arg(args->positional[0]);
    req.key_id = (char *)args->positional[1];
    rc = call(ctl, ADMIN_METHOD("RevokeApiKey"), &req.base,
              &ctxguard__v1__revoke_api_key_response__descriptor, &msg);
    if (rc)
        goto out;
    const Ctxguard__V1__RevokeApiKeyResponse *resp = (const void *)msg;
    if (resp->key == NULL) {
        rc = fail_answer("key");
        goto out;
    }
    if (ctl->json)
        rc = print_json(&resp->key->base);
    else
        print_api_key(resp->key);
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_session_delete(struct ctl *ctl, const struct command *cmd,
                              const struct cmd_args *args)
{
    (void)cmd;
    Ctxguard__V1__DeleteSessionRequest req = CTXGUARD__V1__DELETE_SESSION_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    req.session_id = (char *)args->positional[0];
    int rc = call(ctl, CONTEXT_METHOD("DeleteSession"), &req.base,
                  &ctxguard__v1__delete_session_response__descriptor, &msg);
    if (rc == 0) {
        const Ctxguard__V1__DeleteSessionResponse *resp = (const void *)msg;
        if (ctl->json) {
            rc = print_json(msg);
        } else {
            char n[24];
            print_field("session_id:", req.session_id);
            snprintf(n, sizeof n, "%lld", (long long)resp->deleted_messages);
            print_field("deleted_messages:", n);
            snprintf(n, sizeof n, "%lld", (long long)resp->deleted_artifacts);
            print_field("deleted_artifacts:", n);
            snprintf(n, sizeof n, "%lld", (long long)resp->deleted_compactions);
            print_field("deleted_compactions:", n);
        }
    }
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_whoami(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__WhoAmIRequest req = CTXGUARD__V1__WHO_AM_IREQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    int rc;

    rc = call(ctl, ADMIN_METHOD("WhoAmI"), &req.base, &ctxguard__v1__who_am_iresponse__descriptor,
              &msg);
    if (rc)
        goto out;
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    const Ctxguard__V1__WhoAmIResponse *resp = (const void *)msg;
    char when[40];
    char scope[2 * SCOPE_ID_MAX + 2];
    switch (resp->kind) {
    case CTXGUARD__V1__WHO_AM_IRESPONSE__KIND__KIND_ADMIN:
        print_field("kind:", "admin");
        break;
    case CTXGUARD__V1__WHO_AM_IRESPONSE__KIND__KIND_TENANT:
        print_field("kind:", "tenant");
        print_field("tenant_id:", resp->tenant_id);
        print_field("tenant_name:", resp->tenant_name);
        print_field("key_id:", resp->key_id);
        print_field("role:", key_role_name(resp->role));
        print_field("scope:", key_scope_text(resp->scope, scope, sizeof scope));
        print_field("expires_at:", key_expiry_text(resp->expires_at_unix_ms, when, sizeof when));
        break;
    default:
        print_field("kind:", "unspecified");
        break;
    }
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_ping(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__PingRequest req = CTXGUARD__V1__PING_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    const char *delay_text = option_value(cmd, args, "--delay");
    long delay = 0;
    int rc;

    /* Any uint32 goes to the server, which owns the 0..60000 rule and says so. */
    if (delay_text != NULL && !parse_long(delay_text, 0, (long)UINT32_MAX, &delay))
        return usage_error("--delay must be a number of milliseconds, not '%s'", delay_text);
    /* The reply is held for the delay: without an explicit --timeout, wait for it. */
    if (!ctl->timeout_given)
        ctl->timeout_ms += delay < MAX_TIMEOUT_MS - ctl->timeout_ms ? delay : 0;
    req.delay_ms = (uint32_t)delay;
    int64_t started_ns = cg_mono_ns();
    rc = call(ctl, ADMIN_METHOD("Ping"), &req.base, &ctxguard__v1__ping_response__descriptor, &msg);
    if (rc)
        goto out;
    double rtt_ms = (double)(cg_mono_ns() - started_ns) / 1e6;
    const Ctxguard__V1__PingResponse *resp = (const void *)msg;
    char when[40];
    if (ctl->json) {
        printf("{\"delay_ms\":%" PRIu32 ",\"server_time_unix_ms\":%" PRId64
               ",\"rtt_ms\":%.3f,\"payload_bytes\":%zu}\n",
               resp->delay_ms, resp->server_time_unix_ms, rtt_ms, resp->payload.len);
    } else {
        printf("pong delay_ms=%" PRIu32 " rtt_ms=%.3f server_time=%s\n", resp->delay_ms, rtt_ms,
               format_time(resp->server_time_unix_ms, when, sizeof when));
    }
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

/* ------------------------------------------------------------------ budgets ----- */

/* "task t1", "tenant": a scope's last level and id. */
static void print_scope_name(const Ctxguard__V1__Scope *sc)
{
    if (sc == NULL || sc->session_id[0] == '\0') {
        fputs("tenant", stdout);
        return;
    }
    const char *level = "session", *id = sc->session_id;
    if (sc->agent_id[0] != '\0') {
        level = "agent";
        id = sc->agent_id;
    } else if (sc->task_id[0] != '\0') {
        level = "task";
        id = sc->task_id;
    }
    printf("%s ", level);
    print_text(stdout, id);
}

/* The bar part of a usage line: `  [#######.....]  640/1000 (64%)`, or `  (no budget)  used N`
 * (shared by `usage` and the live view of `watch`). */
static void print_usage_bar(bool has_budget, int64_t limit, int64_t used)
{
    if (has_budget && limit > 0) {
        char bar[USAGE_BAR_WIDTH + 1];
        int64_t shown = used < 0 ? 0 : used > limit ? limit : used;
        int filled = (int)((double)shown / (double)limit * USAGE_BAR_WIDTH);
        for (int i = 0; i < USAGE_BAR_WIDTH; i++)
            bar[i] = i < filled ? '#' : '.';
        bar[USAGE_BAR_WIDTH] = '\0';
        printf("  [%s]  %" PRId64 "/%" PRId64 " (%d%%)", bar, used, limit,
               (int)((double)used * 100.0 / (double)limit));
    } else {
        printf("  (no budget)  used %" PRId64, used);
    }
}

/* One line of the usage tree: `task t1  [#######.....]  640/1000 (64%)  reserved 50`, then
 * `  delay 300ms` when delay_ms is not 0. */
static void print_usage_line(int indent, const Ctxguard__V1__Scope *sc, bool has_budget,
                             int64_t limit, int64_t used, int64_t reserved, int64_t allocated,
                             uint32_t delay_ms, bool closed)
{
    printf("%*s", indent * 2, "");
    print_scope_name(sc);
    print_usage_bar(has_budget, limit, used);
    printf("  reserved %" PRId64, reserved);
    if (allocated > 0) /* shares of children with allocate_from_parent */
        printf("  allocated %" PRId64, allocated);
    if (delay_ms > 0)
        printf("  delay %" PRIu32 "ms", delay_ms);
    printf("%s\n", closed ? "  closed" : "");
}

static void print_usage_tree(const Ctxguard__V1__ScopeUsage *u, int indent)
{
    int64_t limit = u->budget && u->budget->settings ? u->budget->settings->limit_tokens : 0;
    print_usage_line(indent, u->scope, u->has_budget, limit, u->used_tokens, u->reserved_tokens,
                     u->allocated_tokens, 0,
                     u->state == CTXGUARD__V1__SCOPE_STATE__SCOPE_STATE_CLOSED);
    for (size_t i = 0; i < u->n_children; i++)
        print_usage_tree(u->children[i], indent + 1);
    if (u->children_truncated)
        printf("%*s(%zu of %" PRIu32 " children shown)\n", (indent + 1) * 2, "", u->n_children,
               u->child_count);
}

/* The settings stored for a scope, into *current (NULL when the scope has no budget yet),
 * and their version. The caller frees *current. Returns EXIT_OK, or the failure's exit code
 * (printed) for anything but NOT_FOUND. */
static int read_budget(struct ctl *ctl, const Ctxguard__V1__Scope *scope,
                       ProtobufCMessage **current, const Ctxguard__V1__BudgetSettings **settings,
                       int64_t *version)
{
    Ctxguard__V1__GetBudgetRequest req = CTXGUARD__V1__GET_BUDGET_REQUEST__INIT;
    struct cg_client_status st;
    struct cg_client *client = ctl_client(ctl);

    *current = NULL;
    *settings = NULL;
    *version = 0;
    if (client == NULL)
        return EXIT_USAGE;
    req.scope = (Ctxguard__V1__Scope *)scope;
    if (cg_client_unary(client, BUDGET_METHOD("GetBudget"), &req.base,
                        &ctxguard__v1__get_budget_response__descriptor, current, &st) != CG_OK) {
        *current = NULL;
        return st.code == CG_NOT_FOUND ? EXIT_OK : fail_status(&st);
    }
    const Ctxguard__V1__GetBudgetResponse *resp = (const void *)*current;
    if (resp->budget != NULL && resp->budget->settings != NULL) {
        *settings = resp->budget->settings;
        *version = resp->budget->version;
    }
    return EXIT_OK;
}

static int cmd_budget_set(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__SetBudgetRequest req = CTXGUARD__V1__SET_BUDGET_REQUEST__INIT;
    Ctxguard__V1__BudgetSettings fresh = CTXGUARD__V1__BUDGET_SETTINGS__INIT;
    Ctxguard__V1__BudgetSettings *settings = &fresh;
    ProtobufCMessage *msg = NULL, *current = NULL;
    const Ctxguard__V1__BudgetSettings *stored = NULL;
    int64_t version = 0;
    struct scope_arg sc;
    const char *limit_text = option_value(cmd, args, "--limit");
    const char *mode = option_value(cmd, args, "--mode");
    const char *warning = option_value(cmd, args, "--warning");
    long limit = 0;
    double ratio = 0;
    int rc;

    if (!parse_scope(args->positional[0], &sc))
        return EXIT_USAGE;
    if (limit_text == NULL && mode == NULL && warning == NULL &&
        option_value(cmd, args, "--allocate") == NULL)
        return usage_error("budget set: nothing to set: give --limit (required for a new "
                           "budget), --mode, --warning or --allocate");
    /* The server owns the bounds and names the field; here only "is it a number". */
    if (limit_text != NULL && !parse_long(limit_text, LONG_MIN, LONG_MAX, &limit))
        return usage_error("--limit must be a number of tokens, not '%s'", limit_text);
    if (mode != NULL && strcmp(mode, "hard") != 0 && strcmp(mode, "soft") != 0 &&
        strcmp(mode, "approval") != 0)
        return usage_error("--mode must be hard, soft or approval, not '%s'", mode);
    if (warning != NULL) {
        char *end = NULL;
        errno = 0;
        ratio = strtod(warning, &end);
        if (errno != 0 || end == warning || *end != '\0')
            return usage_error("--warning must be a ratio such as 0.8, not '%s'", warning);
    }
    /* An existing budget keeps every setting not given here (mode, warning ratio, tiers,
     * cost limit, reset period...): it is read first and written back with its version,
     * so that a change made in between fails (ABORTED) instead of being overwritten. */
    rc = read_budget(ctl, &sc.scope, &current, &stored, &version);
    if (rc)
        goto out;
    if (stored != NULL) {
        settings = (Ctxguard__V1__BudgetSettings *)stored;
        req.expected_version = version;
    } else if (limit_text == NULL) {
        rc = usage_error("budget set: --limit is required for a new budget");
        goto out;
    }
    if (limit_text != NULL)
        settings->limit_tokens = limit;
    if (mode != NULL)
        settings->mode = strcmp(mode, "soft") == 0 ? CTXGUARD__V1__BUDGET_MODE__BUDGET_MODE_SOFT
                         : strcmp(mode, "approval") == 0
                             ? CTXGUARD__V1__BUDGET_MODE__BUDGET_MODE_APPROVAL
                             : CTXGUARD__V1__BUDGET_MODE__BUDGET_MODE_HARD;
    else if (stored == NULL)
        settings->mode = CTXGUARD__V1__BUDGET_MODE__BUDGET_MODE_HARD;
    if (warning != NULL)
        settings->warning_ratio = ratio;
    if (option_value(cmd, args, "--allocate") != NULL)
        settings->allocate_from_parent = true;
    req.scope = &sc.scope;
    req.settings = settings;
    rc = call(ctl, BUDGET_METHOD("SetBudget"), &req.base,
              &ctxguard__v1__set_budget_response__descriptor, &msg);
    if (rc)
        goto out;
    const Ctxguard__V1__SetBudgetResponse *resp = (const void *)msg;
    if (resp->budget == NULL || resp->budget->settings == NULL) {
        rc = fail_answer("budget");
        goto out;
    }
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    const Ctxguard__V1__Budget *b = resp->budget;
    print_scope_name(b->scope);
    printf(": limit %" PRId64 " tokens, %s, warning at %g, version %" PRId64 "%s\n",
           b->settings->limit_tokens,
           b->settings->mode == CTXGUARD__V1__BUDGET_MODE__BUDGET_MODE_SOFT       ? "soft"
           : b->settings->mode == CTXGUARD__V1__BUDGET_MODE__BUDGET_MODE_APPROVAL ? "approval"
                                                                                  : "hard",
           b->settings->warning_ratio, b->version, resp->created ? " (created)" : "");
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    if (current != NULL)
        protobuf_c_message_free_unpacked(current, NULL);
    return rc;
}

/* ----------------------------------------------------- the budget flow (scripts) ---- */

static const char *level_name(int level);

/* Exit codes of check and reserve beyond 0/1/2: the decision, for shell scripts. */
#define EXIT_DENY 3
#define EXIT_APPROVAL 4

static const char *decision_name(int decision)
{
    switch (decision) {
    case CTXGUARD__V1__DECISION__DECISION_ALLOW:
        return "ALLOW";
    case CTXGUARD__V1__DECISION__DECISION_ALLOW_WITH_WARNING:
        return "ALLOW_WITH_WARNING";
    case CTXGUARD__V1__DECISION__DECISION_REQUIRE_APPROVAL:
        return "REQUIRE_APPROVAL";
    case CTXGUARD__V1__DECISION__DECISION_DENY:
        return "DENY";
    default:
        return "UNSPECIFIED";
    }
}

static int decision_exit(int decision)
{
    if (decision == CTXGUARD__V1__DECISION__DECISION_DENY)
        return EXIT_DENY;
    if (decision == CTXGUARD__V1__DECISION__DECISION_REQUIRE_APPROVAL)
        return EXIT_APPROVAL;
    return EXIT_OK;
}

/* A token-count option: absent is 0; anything else must be a number (the server owns the
 * bounds and names the field). */
static bool token_option(const struct command *cmd, const struct cmd_args *args, const char *name,
                         int64_t *out)
{
    const char *text = option_value(cmd, args, name);
    long v = 0;
    *out = 0;
    if (text == NULL)
        return true;
    if (!parse_long(text, LONG_MIN, LONG_MAX, &v)) {
        usage_error("%s must be a number of tokens, not '%s'", name, text);
        return false;
    }
    *out = v;
    return true;
}

/* The options usage_options reads, as rows of a command's option table (commit, record). */
/* clang-format off */
#define USAGE_OPTION_ROWS                                                        \
    {"--input", "N", "input tokens"},                                            \
    {"--output", "N", "output tokens"},                                          \
    {"--cache-read", "N", "cache read tokens"},                                  \
    {"--cache-write", "N", "cache write tokens"},                                \
    {"--cost-micros", "N", "cost in micro-USD (default: from the price table)"}
/* clang-format on */

/* --input/--output/--cache-read/--cache-write/--cost-micros into *usage. */
static bool usage_options(const struct command *cmd, const struct cmd_args *args,
                          Ctxguard__V1__TokenUsage *usage)
{
    return token_option(cmd, args, "--input", &usage->input_tokens) &&
           token_option(cmd, args, "--output", &usage->output_tokens) &&
           token_option(cmd, args, "--cache-read", &usage->cache_read_tokens) &&
           token_option(cmd, args, "--cache-write", &usage->cache_write_tokens) &&
           token_option(cmd, args, "--cost-micros", &usage->cost_micros);
}

/* `DECISION  delay 300ms (held 300ms)  tightest session 85%` and the reasons, on `out`. */
static void print_decision(FILE *out, int decision, uint32_t delay_ms, uint32_t held_ms,
                           int tightest_level, double tightest_ratio,
                           Ctxguard__V1__DecisionReason *const *reasons, size_t n_reasons)
{
    fprintf(out, "%s  delay %" PRIu32 "ms (held %" PRIu32 "ms)", decision_name(decision), delay_ms,
            held_ms);
    if (tightest_level > 0)
        fprintf(out, "  tightest %s %.0f%%", level_name(tightest_level), tightest_ratio * 100.0);
    fputc('\n', out);
    for (size_t i = 0; i < n_reasons; i++) {
        fprintf(out, "  %s: ", level_name((int)reasons[i]->level));
        print_text(out, reasons[i]->message);
        fputc('\n', out);
    }
}

static int cmd_check(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__CheckBudgetRequest req = CTXGUARD__V1__CHECK_BUDGET_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    struct scope_arg sc;
    const char *model = option_value(cmd, args, "--model");

    if (!parse_scope(args->positional[0], &sc))
        return EXIT_USAGE;
    if (!token_option(cmd, args, "--tokens", &req.estimated_tokens) ||
        !token_option(cmd, args, "--output", &req.estimated_output_tokens))
        return EXIT_USAGE;
    req.scope = &sc.scope;
    req.model = (char *)(model != NULL ? model : "");
    req.dry_run = option_value(cmd, args, "--dry-run") != NULL;
    if (option_value(cmd, args, "--return-only") != NULL)
        req.delay_mode = CTXGUARD__V1__DELAY_MODE__DELAY_MODE_RETURN_ONLY;
    int rc = call(ctl, BUDGET_METHOD("CheckBudget"), &req.base,
                  &ctxguard__v1__check_budget_response__descriptor, &msg);
    if (rc)
        return rc;
    const Ctxguard__V1__CheckBudgetResponse *r = (const void *)msg;
    if (ctl->json) {
        rc = print_json(msg);
    } else {
        print_decision(stdout, r->decision, r->backpressure_delay_ms, r->delay_held_ms,
                       r->tightest_level, r->tightest_ratio, r->reasons, r->n_reasons);
        printf("available %" PRId64 " tokens\n", r->available_tokens);
        if (r->approval_id[0] != '\0')
            printf("approval %s\n", r->approval_id);
    }
    if (rc == EXIT_OK)
        rc = decision_exit(r->decision);
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_reserve(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__ReserveRequest req = CTXGUARD__V1__RESERVE_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    struct scope_arg sc;
    const char *model = option_value(cmd, args, "--model");
    const char *key = option_value(cmd, args, "--idempotency-key");
    int64_t ttl = 0;

    if (!parse_scope(args->positional[0], &sc))
        return EXIT_USAGE;
    if (option_value(cmd, args, "--tokens") == NULL)
        return usage_error("reserve: --tokens is required");
    if (!token_option(cmd, args, "--tokens", &req.tokens) ||
        !token_option(cmd, args, "--output", &req.estimated_output_tokens) ||
        !token_option(cmd, args, "--ttl", &ttl))
        return EXIT_USAGE;
    if (ttl < 0 || ttl > UINT32_MAX)
        return usage_error("--ttl must be 0..%" PRIu32 " milliseconds", UINT32_MAX);
    req.ttl_ms = (uint32_t)ttl;
    req.scope = &sc.scope;
    req.model = (char *)(model != NULL ? model : "");
    req.idempotency_key = (char *)(key != NULL ? key : "");
    if (option_value(cmd, args, "--return-only") != NULL)
        req.delay_mode = CTXGUARD__V1__DELAY_MODE__DELAY_MODE_RETURN_ONLY;
    int rc = call(ctl, BUDGET_METHOD("Reserve"), &req.base,
                  &ctxguard__v1__reserve_response__descriptor, &msg);
    if (rc)
        return rc;
    const Ctxguard__V1__ReserveResponse *r = (const void *)msg;
    if (ctl->json) {
        rc = print_json(msg);
    } else {
        /* stdout holds the id alone (rid=$(ctxguardctl reserve ...)); the rest is stderr. */
        if (r->reservation != NULL && r->reservation->reservation_id[0] != '\0')
            printf("%s\n", r->reservation->reservation_id);
        print_decision(stderr, r->decision, r->backpressure_delay_ms, r->delay_held_ms,
                       r->tightest_level, r->tightest_ratio, r->reasons, r->n_reasons);
        if (r->approval_id[0] != '\0')
            fprintf(stderr, "approval %s: wait for its decision, then reserve again\n",
                    r->approval_id);
    }
    if (rc == EXIT_OK)
        rc = decision_exit(r->decision);
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_commit(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__CommitRequest req = CTXGUARD__V1__COMMIT_REQUEST__INIT;
    Ctxguard__V1__TokenUsage usage = CTXGUARD__V1__TOKEN_USAGE__INIT;
    ProtobufCMessage *msg = NULL;
    const char *model = option_value(cmd, args, "--model");

    if (!usage_options(cmd, args, &usage))
        return EXIT_USAGE;
    req.reservation_id = (char *)args->positional[0];
    req.usage = &usage;
    req.model = (char *)(model != NULL ? model : "");
    req.record_if_expired = option_value(cmd, args, "--record-if-expired") != NULL;
    int rc = call(ctl, BUDGET_METHOD("Commit"), &req.base,
                  &ctxguard__v1__commit_response__descriptor, &msg);
    if (rc)
        return rc;
    const Ctxguard__V1__CommitResponse *r = (const void *)msg;
    if (ctl->json)
        rc = print_json(msg);
    else
        printf("committed: ledger %s, released %" PRId64 ", overrun %" PRId64 "%s%s\n",
               r->ledger_entry_id, r->released_tokens, r->overrun_tokens,
               r->replayed ? " (replayed)" : "",
               r->reservation_expired ? " (the reservation had expired)" : "");
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_release(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__ReleaseRequest req = CTXGUARD__V1__RELEASE_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;

    req.reservation_id = (char *)args->positional[0];
    int rc = call(ctl, BUDGET_METHOD("Release"), &req.base,
                  &ctxguard__v1__release_response__descriptor, &msg);
    if (rc)
        return rc;
    const Ctxguard__V1__ReleaseResponse *r = (const void *)msg;
    if (ctl->json)
        rc = print_json(msg);
    else
        printf("released %" PRId64 " tokens%s\n", r->released_tokens,
               r->replayed ? " (replayed)" : "");
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_record(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__RecordUsageRequest req = CTXGUARD__V1__RECORD_USAGE_REQUEST__INIT;
    Ctxguard__V1__TokenUsage usage = CTXGUARD__V1__TOKEN_USAGE__INIT;
    ProtobufCMessage *msg = NULL;
    struct scope_arg sc;
    const char *model = option_value(cmd, args, "--model");
    const char *key = option_value(cmd, args, "--idempotency-key");

    if (!parse_scope(args->positional[0], &sc))
        return EXIT_USAGE;
    if (!usage_options(cmd, args, &usage))
        return EXIT_USAGE;
    req.scope = &sc.scope;
    req.usage = &usage;
    req.model = (char *)(model != NULL ? model : "");
    req.idempotency_key = (char *)(key != NULL ? key : "");
    int rc = call(ctl, BUDGET_METHOD("RecordUsage"), &req.base,
                  &ctxguard__v1__record_usage_response__descriptor, &msg);
    if (rc)
        return rc;
    const Ctxguard__V1__RecordUsageResponse *r = (const void *)msg;
    if (ctl->json)
        rc = print_json(msg);
    else
        printf("recorded: ledger %s%s\n", r->ledger_entry_id, r->replayed ? " (replayed)" : "");
    protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

/* Every token of a usage, cache reads and writes included. */
static int64_t usage_total_tokens(const Ctxguard__V1__TokenUsage *u)
{
    return u == NULL
               ? 0
               : u->input_tokens + u->output_tokens + u->cache_read_tokens + u->cache_write_tokens;
}

/* One step of a history: its start (UTC), a bar scaled to the largest step, its tokens,
 * calls and cost. */
static void print_history_step(const Ctxguard__V1__UsagePoint *p, int64_t most, bool days)
{
    char when[24];
    struct tm tm;
    time_t secs = (time_t)(p->start_unix_ms / 1000);
    if (gmtime_r(&secs, &tm) == NULL ||
        strftime(when, sizeof when, days ? "%Y-%m-%d" : "%Y-%m-%d %H:%M", &tm) == 0)
        snprintf(when, sizeof when, "%" PRId64, p->start_unix_ms);
    int64_t tokens = usage_total_tokens(p->usage);
    char bar[HISTORY_BAR_WIDTH + 1];
    int filled = most > 0 ? (int)((double)tokens / (double)most * HISTORY_BAR_WIDTH + 0.5) : 0;
    if (tokens > 0 && filled == 0)
        filled = 1;
    for (int i = 0; i < HISTORY_BAR_WIDTH; i++)
        bar[i] = i < filled ? '#' : ' ';
    bar[HISTORY_BAR_WIDTH] = '\0';
    printf("%-16s |%s| %12" PRId64 " tokens %6" PRId64 " calls", when, bar, tokens, p->entries);
    if (p->usage != NULL && p->usage->cost_micros > 0)
        printf("  $%.6f", (double)p->usage->cost_micros / 1e6);
    printf("\n");
}

/* usage --history: GetUsageHistory over the last --since (default 1h) in steps of --step
 * (default: the server's choice), drawn as a bar per step. */
static int cmd_usage_history(struct ctl *ctl, const struct command *cmd,
                             const struct cmd_args *args, Ctxguard__V1__Scope *scope)
{
    Ctxguard__V1__GetUsageHistoryRequest req = CTXGUARD__V1__GET_USAGE_HISTORY_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    const char *since = option_value(cmd, args, "--since");
    const char *step = option_value(cmd, args, "--step");
    int64_t since_ms = 3600 * 1000, step_ms = 0;
    int rc;

    if (since != NULL && !parse_duration_ms(since, &since_ms))
        return usage_error("--since must be a duration like 30m, 6h or 7d (at most 365d), not '%s'",
                           since);
    if (step != NULL && (!parse_duration_ms(step, &step_ms) || step_ms % 60000 != 0))
        return usage_error("--step must be a whole number of minutes like 60s, 5m, 1h or 1d, not "
                           "'%s'",
                           step);
    int64_t now_ms = cg_wall_ms();
    req.scope = scope;
    req.to_unix_ms = now_ms;
    req.from_unix_ms = now_ms - since_ms;
    req.step_seconds = (uint32_t)(step_ms / 1000);
    rc = call(ctl, BUDGET_METHOD("GetUsageHistory"), &req.base,
              &ctxguard__v1__get_usage_history_response__descriptor, &msg);
    if (rc)
        goto out;
    const Ctxguard__V1__GetUsageHistoryResponse *resp = (const void *)msg;
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    int64_t most = 0;
    for (size_t i = 0; i < resp->n_points; i++)
        if (usage_total_tokens(resp->points[i]->usage) > most)
            most = usage_total_tokens(resp->points[i]->usage);
    char from[40], to[40];
    printf("%s .. %s, steps of %us\n", format_time(resp->from_unix_ms, from, sizeof from),
           format_time(resp->to_unix_ms, to, sizeof to), resp->step_seconds);
    bool days = resp->step_seconds % 86400 == 0;
    for (size_t i = 0; i < resp->n_points; i++)
        print_history_step(resp->points[i], most, days);
    printf("total: %" PRId64 " tokens (input %" PRId64 ", output %" PRId64 ", cache read %" PRId64
           ", cache write %" PRId64 "), %" PRId64 " calls",
           usage_total_tokens(resp->total), resp->total ? resp->total->input_tokens : 0,
           resp->total ? resp->total->output_tokens : 0,
           resp->total ? resp->total->cache_read_tokens : 0,
           resp->total ? resp->total->cache_write_tokens : 0, resp->total_entries);
    if (resp->total != NULL && resp->total->cost_micros > 0)
        printf(", $%.6f", (double)resp->total->cost_micros / 1e6);
    printf("\n");
    if (resp->retained_from_unix_ms > resp->from_unix_ms)
        printf("note: buckets before %s are past the server's retention and read as 0\n",
               format_time(resp->retained_from_unix_ms, from, sizeof from));
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_usage(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__GetUsageRequest req = CTXGUARD__V1__GET_USAGE_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    struct scope_arg sc;
    const char *depth_text = option_value(cmd, args, "--depth");
    long depth = USAGE_DEPTH_DEFAULT;
    int rc;

    if (!parse_scope(args->positional_count > 0 ? args->positional[0] : "", &sc))
        return EXIT_USAGE;
    if (option_value(cmd, args, "--history") != NULL)
        return cmd_usage_history(ctl, cmd, args, &sc.scope);
    if (option_value(cmd, args, "--since") != NULL || option_value(cmd, args, "--step") != NULL)
        return usage_error("--since and --step go with --history");
    if (depth_text != NULL && !parse_long(depth_text, 0, (long)UINT32_MAX, &depth))
        return usage_error("--depth must be a number of levels, not '%s'", depth_text);
    req.scope = &sc.scope;
    req.depth = (uint32_t)depth;
    req.include_closed = option_value(cmd, args, "--closed") != NULL;
    rc = call(ctl, BUDGET_METHOD("GetUsage"), &req.base,
              &ctxguard__v1__get_usage_response__descriptor, &msg);
    if (rc)
        goto out;
    const Ctxguard__V1__GetUsageResponse *resp = (const void *)msg;
    if (resp->root == NULL) {
        rc = fail_answer("root");
        goto out;
    }
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    for (size_t i = 0; i < resp->n_path; i++) {
        const Ctxguard__V1__LevelStatus *l = resp->path[i];
        print_usage_line((int)i, l->scope, l->has_budget, l->limit_tokens, l->used_tokens,
                         l->reserved_tokens, l->allocated_tokens, 0,
                         l->state == CTXGUARD__V1__SCOPE_STATE__SCOPE_STATE_CLOSED);
    }
    print_usage_tree(resp->root, (int)resp->n_path);
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static const char *level_name(int level);

/* watch: WatchUsage until the stream ends or the user interrupts (SIGINT, SIGTERM, SIGHUP:
 * exit 0). Two outputs: a line per event (`--lines`, --json, or stdout not a terminal), or
 * a live view redrawn in place on every event (`--live`, or stdout a terminal). */

#define WATCH_POLL_MS 200     /* how often a waiting read looks at the interrupt flag */
#define LIVE_MAX_SCOPES 1000  /* scopes remembered by the live view */
#define LIVE_SHOW_SCOPES 200  /* scopes drawn at most (fewer when the terminal is shorter) */
#define LIVE_NOTES 5          /* notable events kept for the footer */
#define LIVE_NOTE_MAX 240     /* bytes of one footer line (truncated beyond) */
#define LIVE_SNAPSHOT_DEPTH 4 /* tenant, session, task, agent */
#define LIVE_STDOUT_BUF 65536 /* one write per frame, so a redraw does not flicker */
#define LIVE_FIXED_ROWS 6     /* header, blank, "... more", blank, "recent:", bottom line */
#define ANSI_HOME_CLEAR "\033[H\033[J"
#define ANSI_HIDE_CURSOR "\033[?25l"
#define ANSI_SHOW_CURSOR "\033[?25h"

static volatile sig_atomic_t watch_interrupted;

static void watch_on_signal(int sig)
{
    (void)sig;
    watch_interrupted = 1;
}

/* Ends the watch on SIGINT/SIGTERM/SIGHUP at the next read poll, between two writes: the
 * output is never cut in the middle of a line or an escape sequence. */
static void watch_catch_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = watch_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART; /* a write to the terminal resumes instead of failing */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

/* The latest known status of one scope. */
struct live_scope {
    char ids[3][SCOPE_ID_MAX + 1]; /* session, task, agent; "" below the scope's level */
    bool has_budget;
    bool closed;
    int64_t limit;
    int64_t used;
    int64_t reserved;
    uint32_t delay_ms;
};

struct live_view {
    const char *target;
    const char *scope_text;
    int base_depth; /* levels below the tenant of the watched scope: indentation 0 */
    int64_t at_ms;  /* time of the last event or heartbeat */
    uint64_t events;
    bool untracked; /* a scope was seen after LIVE_MAX_SCOPES were remembered */
    size_t n_scopes;
    size_t n_notes;   /* 0..LIVE_NOTES */
    size_t next_note; /* the ring's slot for the next note */
    char notes[LIVE_NOTES][LIVE_NOTE_MAX];
    struct live_scope scopes[LIVE_MAX_SCOPES]; /* in tree order */
};

static int scope_depth(const char *const ids[3])
{
    int depth = 0;
    while (depth < 3 && ids[depth][0] != '\0')
        depth++;
    return depth;
}

/* Tree order: a parent (its lower ids "") sorts before its children, siblings by id. */
static int live_compare(const char *const a[3], const char ids[3][SCOPE_ID_MAX + 1])
{
    for (int i = 0; i < 3; i++) {
        int c = strcmp(a[i], ids[i]);
        if (c != 0)
            return c;
    }
    return 0;
}

/* The entry of sc, added in tree order when new; NULL when the view is full. */
static struct live_scope *live_scope_of(struct live_view *v, const Ctxguard__V1__Scope *sc)
{
    const char *ids[3] = {"", "", ""};
    if (sc != NULL) {
        ids[0] = sc->session_id != NULL ? sc->session_id : "";
        ids[1] = ids[0][0] != '\0' && sc->task_id != NULL ? sc->task_id : "";
        ids[2] = ids[1][0] != '\0' && sc->agent_id != NULL ? sc->agent_id : "";
    }
    size_t lo = 0, hi = v->n_scopes;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = live_compare(ids, v->scopes[mid].ids);
        if (c == 0)
            return &v->scopes[mid];
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    if (v->n_scopes >= LIVE_MAX_SCOPES) {
        v->untracked = true;
        return NULL;
    }
    memmove(&v->scopes[lo + 1], &v->scopes[lo], (v->n_scopes - lo) * sizeof v->scopes[0]);
    v->n_scopes++;
    struct live_scope *ls = &v->scopes[lo];
    memset(ls, 0, sizeof *ls);
    for (int i = 0; i < 3; i++)
        snprintf(ls->ids[i], sizeof ls->ids[i], "%s", ids[i]);
    return ls;
}

static void live_take_usage(struct live_view *v, const Ctxguard__V1__ScopeUsage *u, int depth)
{
    struct live_scope *ls = live_scope_of(v, u->scope);
    if (ls != NULL) {
        ls->has_budget = u->has_budget;
        ls->limit = u->budget && u->budget->settings ? u->budget->settings->limit_tokens : 0;
        ls->used = u->used_tokens;
        ls->reserved = u->reserved_tokens;
        ls->delay_ms = u->backpressure_delay_ms;
        ls->closed = u->state == CTXGUARD__V1__SCOPE_STATE__SCOPE_STATE_CLOSED;
    }
    if (depth + 1 >= LIVE_SNAPSHOT_DEPTH)
        return;
    for (size_t i = 0; i < u->n_children; i++) {
        if (u->children[i] != NULL)
            live_take_usage(v, u->children[i], depth + 1);
    }
}

static void live_take_status(struct live_view *v, const Ctxguard__V1__LevelStatus *l,
                             const Ctxguard__V1__Scope *event_scope)
{
    struct live_scope *ls = live_scope_of(v, l->scope != NULL ? l->scope : event_scope);
    if (ls == NULL)
        return;
    ls->has_budget = l->has_budget;
    ls->limit = l->limit_tokens;
    ls->used = l->used_tokens;
    ls->reserved = l->reserved_tokens;
    ls->delay_ms = l->backpressure_delay_ms;
    ls->closed = l->state == CTXGUARD__V1__SCOPE_STATE__SCOPE_STATE_CLOSED;
}

static bool event_is_notable(Ctxguard__V1__UsageEventType type)
{
    switch (type) {
    case CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_THRESHOLD_CROSSED:
    case CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_WARNING:
    case CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_EXHAUSTED:
    case CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_APPROVAL_REQUESTED:
    case CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_APPROVAL_DECIDED:
    case CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_RESET:
    case CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_SCOPE_CLOSED:
        return true;
    default:
        return false;
    }
}

/* "threshold crossed": an event type in words. */
static void event_type_words(Ctxguard__V1__UsageEventType type, char *buf, size_t len)
{
    const ProtobufCEnumValue *tv = protobuf_c_enum_descriptor_get_value(
        &ctxguard__v1__usage_event_type__descriptor, (int)type);
    const char *name = tv ? tv->name + strlen("USAGE_EVENT_TYPE_") : "?";
    size_t i = 0;
    for (; name[i] != '\0' && i + 1 < len; i++) {
        char c = name[i];
        buf[i] = c == '_' ? ' ' : c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
    }
    buf[i] = '\0';
}

/* One footer line: `12:00:01.250Z  warning  task s1/t1  at 0.80  <message>`. Kept raw;
 * made safe for the terminal when drawn. */
static void live_note(struct live_view *v, const Ctxguard__V1__UsageEvent *e)
{
    char when[40], type[40], threshold[40] = "";
    const Ctxguard__V1__Scope *sc = e->scope;
    const char *s = sc && sc->session_id ? sc->session_id : "";
    const char *t = s[0] && sc->task_id ? sc->task_id : "";
    const char *a = t[0] && sc->agent_id ? sc->agent_id : "";
    const char *clock = format_time(e->occurred_at_unix_ms, when, sizeof when);
    const char *tee = strchr(clock, 'T');

    event_type_words(e->type, type, sizeof type);
    if (e->threshold_ratio > 0)
        snprintf(threshold, sizeof threshold, "  at %.2f%s", e->threshold_ratio,
                 e->falling ? " falling" : "");
    /* The message, unless it only repeats the type. */
    const char *message = e->message != NULL && strcmp(e->message, type) != 0 ? e->message : "";
    snprintf(v->notes[v->next_note], LIVE_NOTE_MAX, "%s  %s  %s%s%s%s%s%s%s%s%s%s",
             tee != NULL ? tee + 1 : clock, type, level_name((int)e->level), s[0] ? " " : "", s,
             t[0] ? "/" : "", t, a[0] ? "/" : "", a, threshold, message[0] != '\0' ? "  " : "",
             message);
    v->next_note = (v->next_note + 1) % LIVE_NOTES;
    if (v->n_notes < LIVE_NOTES)
        v->n_notes++;
}

static int64_t now_unix_ms(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_REALTIME, &ts) != 0)
        return 0;
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void live_take_event(struct live_view *v, const Ctxguard__V1__UsageEvent *e)
{
    v->at_ms = e->occurred_at_unix_ms > 0 ? e->occurred_at_unix_ms : now_unix_ms();
    if (e->type == CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_HEARTBEAT)
        return; /* the stream is alive: only the header's time moves */
    v->events++;
    if (e->snapshot != NULL)
        live_take_usage(v, e->snapshot, 0);
    if (e->status != NULL)
        live_take_status(v, e->status, e->scope);
    if (event_is_notable(e->type))
        live_note(v, e);
}

/* How many scope rows fit: the terminal's height less the rest of the frame (and one row
 * so that the last newline does not scroll the header away); LIVE_SHOW_SCOPES at most. */
static size_t live_rows_for_scopes(const struct live_view *v)
{
    struct winsize ws;
    size_t fixed = LIVE_FIXED_ROWS + (v->n_notes > 0 ? v->n_notes : 1);
    size_t rows = LIVE_SHOW_SCOPES;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0)
        rows = ws.ws_row > fixed ? ws.ws_row - fixed : 1;
    return rows < LIVE_SHOW_SCOPES ? rows : LIVE_SHOW_SCOPES;
}

static void live_draw(const struct live_view *v)
{
    char when[40];
    size_t show = live_rows_for_scopes(v);

    fputs(ANSI_HOME_CLEAR, stdout);
    fputs(PROG " watch  ", stdout);
    print_text(stdout, v->target);
    fputs("  scope ", stdout);
    print_text(stdout, v->scope_text);
    printf("  at %s  events %" PRIu64 "\n\n", format_time(v->at_ms, when, sizeof when), v->events);
    if (v->n_scopes == 0)
        fputs("(waiting for the first event)\n", stdout);
    for (size_t i = 0; i < v->n_scopes && i < show; i++) {
        const struct live_scope *ls = &v->scopes[i];
        const char *ids[3] = {ls->ids[0], ls->ids[1], ls->ids[2]};
        Ctxguard__V1__Scope sc = CTXGUARD__V1__SCOPE__INIT;
        int indent = scope_depth(ids) - v->base_depth;
        sc.session_id = (char *)ids[0];
        sc.task_id = (char *)ids[1];
        sc.agent_id = (char *)ids[2];
        print_usage_line(indent > 0 ? indent : 0, &sc, ls->has_budget, ls->limit, ls->used,
                         ls->reserved, 0, ls->delay_ms, ls->closed);
    }
    if (v->n_scopes > show || v->untracked)
        printf("... %zu more scopes%s\n", v->n_scopes > show ? v->n_scopes - show : 0,
               v->untracked ? " (and more not tracked)" : "");
    fputs("\nrecent:\n", stdout);
    if (v->n_notes == 0)
        fputs("  (no threshold, warning, exhausted, approval, reset or close yet)\n", stdout);
    for (size_t i = 0; i < v->n_notes; i++) {
        size_t slot = (v->next_note + LIVE_NOTES - v->n_notes + i) % LIVE_NOTES;
        fputs("  ", stdout);
        print_text(stdout, v->notes[slot]);
        fputc('\n', stdout);
    }
    fflush(stdout);
}

/* A line of the line-per-event output. */
static void print_event_line(const Ctxguard__V1__UsageEvent *e)
{
    const ProtobufCEnumValue *tv = protobuf_c_enum_descriptor_get_value(
        &ctxguard__v1__usage_event_type__descriptor, (int)e->type);
    const char *type = tv ? tv->name + strlen("USAGE_EVENT_TYPE_") : "?";
    const Ctxguard__V1__Scope *s = e->scope;
    printf("%-19s %-8s %s/%s/%s", type, level_name((int)e->level),
           s && s->session_id[0] ? s->session_id : "-", s && s->task_id[0] ? s->task_id : "-",
           s && s->agent_id[0] ? s->agent_id : "-");
    if (e->sequence > 0)
        printf(" #%lld", (long long)e->sequence);
    if (e->status != NULL)
        printf(" used=%lld reserved=%lld limit=%lld (%.0f%%)", (long long)e->status->used_tokens,
               (long long)e->status->reserved_tokens, (long long)e->status->limit_tokens,
               e->status->usage_ratio * 100);
    if (e->threshold_ratio > 0)
        printf(" threshold=%.2f%s", e->threshold_ratio, e->falling ? " falling" : "");
    if (e->snapshot != NULL)
        printf(" used=%lld reserved=%lld children=%zu", (long long)e->snapshot->used_tokens,
               (long long)e->snapshot->reserved_tokens, e->snapshot->n_children);
    printf("\n");
}

static int cmd_watch(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__WatchUsageRequest req = CTXGUARD__V1__WATCH_USAGE_REQUEST__INIT;
    struct scope_arg sc;
    struct cg_client_status st;
    struct cg_client_stream *stream = NULL;
    struct live_view *view = NULL;
    const char *scope_text = args->positional_count > 0 ? args->positional[0] : "";
    bool want_live = option_value(cmd, args, "--live") != NULL;
    bool want_lines = option_value(cmd, args, "--lines") != NULL;

    if (want_live && want_lines)
        return usage_error("watch: --live and --lines exclude each other");
    if (want_live && ctl->json)
        return usage_error("watch: --live has no JSON form (--json prints an object per event)");
    bool live = want_live || (!want_lines && !ctl->json && isatty(STDOUT_FILENO));
    if (!parse_scope(scope_text, &sc))
        return EXIT_USAGE;
    struct cg_client *client = ctl_client(ctl);
    if (client == NULL)
        return EXIT_USAGE;
    if (live) {
        view = calloc(1, sizeof *view);
        if (view == NULL) {
            fprintf(stderr, PROG ": out of memory\n");
            return EXIT_FAIL;
        }
        view->target = ctl->target != NULL ? ctl->target : CG_CLIENT_DEFAULT_TARGET;
        view->scope_text =
            scope_text[0] != '\0' && strcmp(scope_text, "-") != 0 ? scope_text : "tenant";
        const char *ids[3] = {sc.ids[0], sc.ids[1], sc.ids[2]};
        view->base_depth = scope_depth(ids);
    }
    req.scope = &sc.scope;
    req.include_descendants = live || option_value(cmd, args, "--descendants") != NULL;
    req.send_snapshot = true;
    if (cg_client_stream_open(client, BUDGET_METHOD("WatchUsage"), &req.base, NULL, &stream, &st) !=
        CG_OK) {
        free(view);
        return fail_status(&st);
    }
    watch_catch_signals();
    if (live) {
        /* Before anything is written: stdout's own buffer holds a whole frame. */
        setvbuf(stdout, NULL, _IOFBF, LIVE_STDOUT_BUF);
        fputs(ANSI_HIDE_CURSOR, stdout);
        live_draw(view);
    }
    int rc = EXIT_OK;
    while (!watch_interrupted) {
        ProtobufCMessage *msg = NULL;
        cg_status read = cg_client_stream_read(stream, WATCH_POLL_MS,
                                               &ctxguard__v1__usage_event__descriptor, &msg, &st);
        if (msg == NULL) {
            if (read == CG_DEADLINE_EXCEEDED && st.local && !cg_client_stream_done(stream))
                continue; /* nothing yet: look at the interrupt flag, then wait again */
            if (read != CG_OK) {
                if (live) {
                    fputs(ANSI_SHOW_CURSOR, stdout);
                    fflush(stdout);
                    live = false;
                }
                rc = fail_status(&st);
            }
            break;
        }
        const Ctxguard__V1__UsageEvent *e = (const void *)msg;
        if (live) {
            live_take_event(view, e);
            live_draw(view);
        } else {
            if (ctl->json)
                print_json(msg);
            else
                print_event_line(e);
            fflush(stdout);
        }
        protobuf_c_message_free_unpacked(msg, NULL);
    }
    if (live) {
        fputs(ANSI_SHOW_CURSOR, stdout);
        fflush(stdout);
    }
    cg_client_stream_free(stream);
    free(view);
    return rc;
}

/* ------------------------------------------------------------------ approvals --- */

#define APPROVALS_PAGE 100

static const char *approval_state_name(int state)
{
    switch (state) {
    case CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_PENDING:
        return "pending";
    case CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_APPROVED:
        return "approved";
    case CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_DENIED:
        return "denied";
    case CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_EXPIRED:
        return "expired";
    default:
        return "unknown";
    }
}

static const char *level_name(int level)
{
    static const char *const names[] = {"?", "tenant", "session", "task", "agent"};
    return level >= 1 && level <= 4 ? names[level] : names[0];
}

/* approve and deny: ResolveApproval with the decision; prints the approval after it. */
static int resolve_approval(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args,
                            int decision)
{
    Ctxguard__V1__ResolveApprovalRequest req = CTXGUARD__V1__RESOLVE_APPROVAL_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    const char *tokens = option_value(cmd, args, "--tokens");
    const char *note = option_value(cmd, args, "--note");
    const char *by = option_value(cmd, args, "--by");
    long granted = 0;
    int rc;

    /* The server owns the bounds and names the field; here only "is it a number". */
    if (tokens != NULL && !parse_long(tokens, LONG_MIN, LONG_MAX, &granted))
        return usage_error("--tokens must be a number of tokens, not '%s'", tokens);
    req.approval_id = (char *)args->positional[0];
    req.decision = (Ctxguard__V1__ApprovalState)decision;
    req.granted_tokens = granted;
    req.note = (char *)(note != NULL ? note : "");
    req.decided_by = (char *)(by != NULL ? by : "");
    rc = call(ctl, BUDGET_METHOD("ResolveApproval"), &req.base,
              &ctxguard__v1__resolve_approval_response__descriptor, &msg);
    if (rc)
        goto out;
    const Ctxguard__V1__ResolveApprovalResponse *resp = (const void *)msg;
    if (resp->approval == NULL) {
        rc = fail_answer("approval");
        goto out;
    }
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    const Ctxguard__V1__Approval *a = resp->approval;
    printf("approval ");
    print_text(stdout, a->approval_id);
    printf(": %s", approval_state_name(a->state));
    if (a->state == CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_APPROVED)
        printf(", +%" PRId64 " tokens on the %s limit", a->granted_tokens, level_name(a->level));
    printf(" by ");
    print_text(stdout, a->decided_by);
    printf("%s\n", resp->replayed ? " (already decided so)" : "");
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_approve(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    return resolve_approval(ctl, cmd, args, CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_APPROVED);
}

static int cmd_deny(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    return resolve_approval(ctl, cmd, args, CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_DENIED);
}

/* "s1/t1/a1", or "-" for the tenant. */
static void print_scope_path(const Ctxguard__V1__Scope *sc)
{
    if (sc == NULL || sc->session_id[0] == '\0') {
        fputs("-", stdout);
        return;
    }
    print_text(stdout, sc->session_id);
    if (sc->task_id[0] != '\0') {
        fputc('/', stdout);
        print_text(stdout, sc->task_id);
    }
    if (sc->agent_id[0] != '\0') {
        fputc('/', stdout);
        print_text(stdout, sc->agent_id);
    }
}

static int cmd_approvals(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__ListApprovalsRequest req = CTXGUARD__V1__LIST_APPROVALS_REQUEST__INIT;
    Ctxguard__V1__ApprovalState pending = CTXGUARD__V1__APPROVAL_STATE__APPROVAL_STATE_PENDING;
    struct scope_arg sc;
    char *token = NULL;
    int rc = EXIT_OK;

    if (!parse_scope(args->positional_count > 0 ? args->positional[0] : "", &sc))
        return EXIT_USAGE;
    req.scope = &sc.scope;
    req.include_descendants = true;
    if (option_value(cmd, args, "--pending") != NULL) {
        req.states = &pending;
        req.n_states = 1;
    }
    req.page_size = APPROVALS_PAGE;
    if (!ctl->json)
        printf("%-36s  %-8s  %-7s  %10s  %10s  %-24s  %s\n", "APPROVAL_ID", "STATE", "LEVEL",
               "REQUESTED", "GRANTED", "REQUESTED_AT", "SCOPE");
    for (int page = 0; page < LIST_MAX_PAGES; page++) {
        ProtobufCMessage *msg = NULL;
        req.page_token = token != NULL ? token : "";
        rc = call(ctl, BUDGET_METHOD("ListApprovals"), &req.base,
                  &ctxguard__v1__list_approvals_response__descriptor, &msg);
        if (rc)
            break;
        const Ctxguard__V1__ListApprovalsResponse *resp = (const void *)msg;
        for (size_t i = 0; i < resp->n_approvals; i++) {
            const Ctxguard__V1__Approval *a = resp->approvals[i];
            if (ctl->json) {
                if ((rc = print_json(&a->base)) != EXIT_OK)
                    break;
                continue;
            }
            char when[40];
            print_cell(a->approval_id, 36);
            print_cell(approval_state_name(a->state), 8);
            print_cell(level_name(a->level), 7);
            printf("%10" PRId64 "  %10" PRId64 "  ", a->requested_tokens, a->granted_tokens);
            print_cell(format_time(a->requested_at_unix_ms, when, sizeof when), 24);
            print_scope_path(a->scope);
            fputc('\n', stdout);
        }
        free(token);
        token = resp->next_page_token[0] != '\0' ? strdup(resp->next_page_token) : NULL;
        protobuf_c_message_free_unpacked(msg, NULL);
        if (rc != EXIT_OK || token == NULL)
            break;
    }
    free(token);
    return rc;
}

/* ------------------------------------------------------------------ audit ------- */

#define AUDIT_PAGE 100
#define AUDIT_LIMIT_DEFAULT 100
#define AUDIT_LIMIT_MAX 100000

/* Days from 1970-01-01 to the civil date y-m-d (proleptic Gregorian; H. Hinnant). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

/* A time argument: unix milliseconds (digits), or RFC 3339 "2024-05-01T12:00:00Z" with
 * optional fraction (milliseconds kept) and a Z or ±HH:MM offset. False when malformed. */
static bool parse_time_ms(const char *s, int64_t *out)
{
    long ms_digits = 0;
    if (strspn(s, "0123456789") == strlen(s) && parse_long(s, 1, LONG_MAX, &ms_digits)) {
        *out = ms_digits;
        return true;
    }
    int y, mo, d, h, mi, sec, n = 0;
    if (sscanf(s, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &n) != 6 || n != 19 ||
        mo < 1 || mo > 12 || d < 1 || d > 31 || h > 23 || mi > 59 || sec > 60)
        return false;
    const char *p = s + n;
    int64_t millis = 0;
    if (*p == '.') {
        int digits = 0;
        for (p++; *p >= '0' && *p <= '9'; p++, digits++)
            if (digits < 3)
                millis = millis * 10 + (*p - '0');
        if (digits == 0)
            return false;
        for (; digits < 3; digits++)
            millis *= 10;
    }
    int64_t offset_min = 0;
    if (*p == 'Z' || *p == 'z') {
        p++;
    } else if (*p == '+' || *p == '-') {
        int oh, om, on = 0;
        if (sscanf(p + 1, "%2d:%2d%n", &oh, &om, &on) != 2 || on != 5 || oh > 23 || om > 59)
            return false;
        offset_min = (*p == '-' ? -1 : 1) * (oh * 60 + om);
        p += 6;
    } else {
        return false;
    }
    if (*p != '\0')
        return false;
    int64_t secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec - offset_min * 60;
    *out = secs * 1000 + millis;
    return *out > 0;
}

/* One row for a terminal: time, actor and role, kind, scope, target, before -> after. */
static void print_audit_event(const Ctxguard__V1__AuditEvent *e)
{
    char when[40], actor[64];
    snprintf(actor, sizeof actor, "%s (%s)", e->actor_key_id[0] != '\0' ? e->actor_key_id : "admin",
             e->actor_role);
    print_cell(format_time(e->at_unix_ms, when, sizeof when), 24);
    print_cell(actor, 30);
    print_cell(e->kind, 23);
    print_scope_path(e->scope);
    fputs("  ", stdout);
    print_cell(e->target[0] != '\0' ? e->target : "-", 16);
    print_text(stdout, e->before_json[0] != '\0' ? e->before_json : "-");
    fputs(" -> ", stdout);
    print_text(stdout, e->after_json[0] != '\0' ? e->after_json : "-");
    fputc('\n', stdout);
}

static int cmd_audit(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__ListAuditEventsRequest req = CTXGUARD__V1__LIST_AUDIT_EVENTS_REQUEST__INIT;
    const char *scope_text = option_value(cmd, args, "--scope");
    const char *since = option_value(cmd, args, "--since");
    const char *until = option_value(cmd, args, "--until");
    const char *limit_text = option_value(cmd, args, "--limit");
    const char *actor = option_value(cmd, args, "--actor");
    const char *kind = option_value(cmd, args, "--kind");
    struct scope_arg sc;
    long limit = AUDIT_LIMIT_DEFAULT;
    char *token = NULL;
    int rc = EXIT_OK;

    req.tenant_id = args->positional_count > 0 ? (char *)args->positional[0] : "";
    if (scope_text != NULL) {
        if (!parse_scope(scope_text, &sc))
            return EXIT_USAGE;
        req.scope = &sc.scope;
    }
    if (actor != NULL)
        req.actor_key_id = (char *)actor;
    if (kind != NULL)
        req.kind = (char *)kind;
    if (since != NULL && !parse_time_ms(since, &req.since_unix_ms))
        return usage_error("--since must be unix milliseconds or RFC 3339 "
                           "(2024-05-01T12:00:00Z), not '%s'",
                           since);
    if (until != NULL && !parse_time_ms(until, &req.until_unix_ms))
        return usage_error("--until must be unix milliseconds or RFC 3339 "
                           "(2024-05-01T12:00:00Z), not '%s'",
                           until);
    if (limit_text != NULL && !parse_long(limit_text, 1, AUDIT_LIMIT_MAX, &limit))
        return usage_error("--limit must be 1..%d, not '%s'", AUDIT_LIMIT_MAX, limit_text);

    if (ctl->json)
        fputs("{\"events\":[", stdout);
    else
        printf("%-24s  %-30s  %-23s  %s\n", "TIME", "ACTOR (ROLE)", "KIND",
               "SCOPE  TARGET  BEFORE -> AFTER");
    long shown = 0;
    for (int page = 0; page < LIST_MAX_PAGES && shown < limit; page++) {
        ProtobufCMessage *msg = NULL;
        req.page_token = token != NULL ? token : "";
        req.page_size = (uint32_t)(limit - shown < AUDIT_PAGE ? limit - shown : AUDIT_PAGE);
        rc = call(ctl, ADMIN_METHOD("ListAuditEvents"), &req.base,
                  &ctxguard__v1__list_audit_events_response__descriptor, &msg);
        if (rc)
            break;
        const Ctxguard__V1__ListAuditEventsResponse *resp = (const void *)msg;
        for (size_t i = 0; i < resp->n_events && shown < limit; i++, shown++) {
            if (!ctl->json) {
                print_audit_event(resp->events[i]);
                continue;
            }
            if (shown > 0)
                fputc(',', stdout);
            if (cg_json_write_message(stdout, &resp->events[i]->base) != CG_OK) {
                rc = EXIT_FAIL;
                break;
            }
        }
        free(token);
        token = resp->next_page_token[0] != '\0' ? strdup(resp->next_page_token) : NULL;
        protobuf_c_message_free_unpacked(msg, NULL);
        if (rc != EXIT_OK || token == NULL)
            break;
    }
    free(token);
    if (ctl->json && rc == EXIT_OK)
        fputs("]}\n", stdout);
    return rc;
}

/* ------------------------------------------------------------------ count ------- */

#define COUNT_FILE_MAX (64L << 20) /* the server's own cap is smaller; this bounds our memory */

/* Reads a whole file ("-": stdin) into a NUL-terminated heap buffer. NULL after reporting. */
static char *read_file(const char *path, size_t *len)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf != NULL) {
        if (n + 1 >= cap) {
            if (cap >= (size_t)COUNT_FILE_MAX) {
                fprintf(stderr, PROG ": %s: larger than %ld bytes\n", path, COUNT_FILE_MAX);
                free(buf);
                buf = NULL;
                break;
            }
            char *grown = realloc(buf, cap * 2);
            if (grown == NULL) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                fprintf(stderr, PROG ": %s: %s\n", path, strerror(errno));
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    if (f != stdin)
        fclose(f);
    if (buf == NULL)
        return NULL;
    buf[n] = '\0';
    if (memchr(buf, '\0', n) != NULL) {
        fprintf(stderr, PROG ": %s: contains NUL bytes (not text)\n", path);
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* Whether a JSON string literal at s (after its opening quote) equals word; *end gets the
 * byte after the closing quote. Escapes are skipped, not decoded. */
static bool json_string_is(const char *s, const char *word, const char **end)
{
    const char *p = s;
    while (*p != '\0' && *p != '"')
        p += (*p == '\\' && p[1] != '\0') ? 2 : 1;
    *end = *p == '"' ? p + 1 : p;
    size_t n = strlen(word);
    return (size_t)(p - s) == n && memcmp(s, word, n) == 0;
}

/* Which format a key (at depth, 1 = top level) or a "type" value marks, or NULL. */
static const char *format_mark(const char *s, bool is_key, bool after_type_key, int depth)
{
    static const struct {
        const char *word;
        const char *format;
        int top_only; /* 1: a top-level key; 0: a key anywhere; -1: a "type" value */
    } marks[] = {
        {"system", "anthropic", 1},
        {"input_schema", "anthropic", 0},
        {"tool_use", "anthropic", -1},
        {"tool_result", "anthropic", -1},
        {"contents", "gemini", 1},
        {"systemInstruction", "gemini", 1},
        {"system_instruction", "gemini", 1},
        {"parts", "gemini", 0},
        {"functionCall", "gemini", 0},
        {"functionResponse", "gemini", 0},
        {"function_response", "gemini", 0},
        {"inlineData", "gemini", 0},
        {"inline_data", "gemini", 0},
        {"input", "responses", 1},
        {"instructions", "responses", 1},
        {"function_call", "responses", -1},
        {"function_call_output", "responses", -1},
        {"input_text", "responses", -1},
        {"output_text", "responses", -1},
        {"input_image", "responses", -1},
    };
    const char *end;
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        bool applies = marks[i].top_only < 0 ? !is_key && after_type_key
                                             : is_key && (marks[i].top_only == 0 || depth == 1);
        if (applies && json_string_is(s, marks[i].word, &end))
            return marks[i].format;
    }
    return NULL;
}

/* The JSON format of a conversation file: "anthropic", "gemini", "responses" or "openai", by
 * the first mark met (Anthropic: a top-level "system", "input_schema", a tool_use/tool_result
 * block; Gemini: "contents", "parts", "functionCall"...; Responses: a top-level "input" or
 * "instructions", items of type function_call, input_text...). Everything else is read as
 * OpenAI chat (the formats agree on plain text messages, so the count is the same). */
static const char *json_format_of(const char *json)
{
    int depth = 0;
    bool after_type_key = false;
    for (const char *p = json; *p != '\0';) {
        char c = *p;
        if (c == '{' || c == '[') {
            depth++;
            p++;
        } else if (c == '}' || c == ']') {
            depth--;
            p++;
        } else if (c == '"') {
            const char *end, *dummy;
            json_string_is(p + 1, "", &end);
            const char *q = end;
            while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
                q++;
            bool is_key = *q == ':';
            const char *f = format_mark(p + 1, is_key, after_type_key, depth);
            if (f != NULL)
                return f;
            after_type_key = is_key && json_string_is(p + 1, "type", &dummy);
            p = end;
        } else {
            p++;
        }
    }
    return "openai";
}

/* Puts json in conv's field for format ("openai", "anthropic", "responses", "gemini"). */
static void conversation_set(Ctxguard__V1__Conversation *conv, const char *format, char *json)
{
    if (strcmp(format, "anthropic") == 0) {
        conv->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_ANTHROPIC_JSON;
        conv->anthropic_json = json;
    } else if (strcmp(format, "responses") == 0) {
        conv->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_RESPONSES_JSON;
        conv->responses_json = json;
    } else if (strcmp(format, "gemini") == 0) {
        conv->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_GEMINI_JSON;
        conv->gemini_json = json;
    } else {
        conv->content_case = CTXGUARD__V1__CONVERSATION__CONTENT_OPENAI_JSON;
        conv->openai_json = json;
    }
}

/* The JSON text of a Conversation in any JSON format; "" for structured messages. */
static const char *conversation_json(const Ctxguard__V1__Conversation *c)
{
    if (c == NULL)
        return "";
    switch (c->content_case) {
    case CTXGUARD__V1__CONVERSATION__CONTENT_OPENAI_JSON:
        return c->openai_json;
    case CTXGUARD__V1__CONVERSATION__CONTENT_ANTHROPIC_JSON:
        return c->anthropic_json;
    case CTXGUARD__V1__CONVERSATION__CONTENT_RESPONSES_JSON:
        return c->responses_json;
    case CTXGUARD__V1__CONVERSATION__CONTENT_GEMINI_JSON:
        return c->gemini_json;
    default:
        return "";
    }
}

static const char *count_method_name(Ctxguard__V1__TokenCountMethod m)
{
    switch (m) {
    case CTXGUARD__V1__TOKEN_COUNT_METHOD__TOKEN_COUNT_METHOD_EXACT:
        return "exact";
    case CTXGUARD__V1__TOKEN_COUNT_METHOD__TOKEN_COUNT_METHOD_ESTIMATED:
        return "estimated";
    case CTXGUARD__V1__TOKEN_COUNT_METHOD__TOKEN_COUNT_METHOD_CALIBRATED:
        return "calibrated";
    default:
        return "unspecified";
    }
}

static int cmd_count(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__CountTokensRequest req = CTXGUARD__V1__COUNT_TOKENS_REQUEST__INIT;
    Ctxguard__V1__Conversation conv = CTXGUARD__V1__CONVERSATION__INIT;
    ProtobufCMessage *msg = NULL;
    const char *model = option_value(cmd, args, "--model");
    const char *encoding = option_value(cmd, args, "--encoding");
    bool as_text = option_value(cmd, args, "--text") != NULL;
    int rc;

    if (encoding != NULL) {
        if (strcmp(encoding, "cl100k_base") == 0)
            req.encoding = CTXGUARD__V1__TOKEN_ENCODING__TOKEN_ENCODING_CL100K_BASE;
        else if (strcmp(encoding, "o200k_base") == 0)
            req.encoding = CTXGUARD__V1__TOKEN_ENCODING__TOKEN_ENCODING_O200K_BASE;
        else
            return usage_error("--encoding must be cl100k_base or o200k_base, not '%s'", encoding);
    }
    if (model != NULL)
        req.model = (char *)model;
    req.allow_special_tokens = option_value(cmd, args, "--special") != NULL;
    size_t len = 0;
    char *data = read_file(args->positional[0], &len);
    if (data == NULL)
        return EXIT_FAIL;
    const char *format = "text";
    if (as_text) {
        req.text = data;
    } else {
        const char *p = data;
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
            p++;
        if (*p != '{' && *p != '[') {
            free(data);
            return usage_error("%s is not a JSON conversation (use --text for plain text)",
                               args->positional[0]);
        }
        format = json_format_of(data);
        conversation_set(&conv, format, data);
        req.conversation = &conv;
    }
    rc = call(ctl, CONTEXT_METHOD("CountTokens"), &req.base,
              &ctxguard__v1__count_tokens_response__descriptor, &msg);
    free(data);
    if (rc)
        goto out;
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    const Ctxguard__V1__CountTokensResponse *r = (const void *)msg;
    printf("%-12s %" PRId64 "\n", "total:", r->total_tokens);
    printf("%-12s %s", "method:", count_method_name(r->method));
    if (r->method == CTXGUARD__V1__TOKEN_COUNT_METHOD__TOKEN_COUNT_METHOD_EXACT)
        printf(" (%s)\n", r->encoding == CTXGUARD__V1__TOKEN_ENCODING__TOKEN_ENCODING_CL100K_BASE
                              ? "cl100k_base"
                              : "o200k_base");
    else
        printf(" (profile %s, +/- %" PRId64 " tokens)\n", r->estimator_profile,
               r->error_bound_tokens);
    if (r->calibration != NULL)
        printf("%-12s factor %.4f from %" PRId64 " provider counts\n",
               "calibration:", r->calibration->factor, r->calibration->samples);
    print_field("format:", format);
    if (r->context_window_tokens > 0)
        printf("%-12s %" PRId64 "\n", "window:", r->context_window_tokens);
    if (r->estimate_id[0] != '\0')
        print_field("estimate_id:", r->estimate_id);
    if (r->breakdown != NULL)
        printf("%-12s content %" PRId64 ", framing %" PRId64 ", tools %" PRId64 ", images %" PRId64
               ", text %" PRId64 "\n",
               "breakdown:", r->breakdown->content_tokens, r->breakdown->overhead_tokens,
               r->breakdown->tool_definition_tokens, r->breakdown->image_tokens,
               r->breakdown->text_tokens);
    if (r->n_message_tokens > 0) {
        printf("messages:\n");
        for (size_t i = 0; i < r->n_message_tokens; i++)
            printf("  %-6zu %" PRId64 "\n", i, r->message_tokens[i]);
    }
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

/* ------------------------------------------------------------------ summaries --- */

#define SUMMARIZE_TIMEOUT_MS 120000L /* an LLM summary of a long session takes a while */

static const char *enum_short(const ProtobufCEnumDescriptor *d, int value, const char *prefix)
{
    const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(d, value);
    if (v == NULL)
        return "?";
    size_t n = strlen(prefix);
    return strncmp(v->name, prefix, n) == 0 ? v->name + n : v->name;
}

static int cmd_summarize(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__SummarizeRequest req = CTXGUARD__V1__SUMMARIZE_REQUEST__INIT;
    Ctxguard__V1__Conversation conv = CTXGUARD__V1__CONVERSATION__INIT;
    ProtobufCMessage *msg = NULL;
    const char *target = option_value(cmd, args, "--tokens");
    const char *kind = option_value(cmd, args, "--summarizer");
    const char *format = option_value(cmd, args, "--format");
    long target_tokens = 0;

    /* Any number goes to the server, which owns the 64..2000 rule and names the field. */
    if (target != NULL && !parse_long(target, LONG_MIN, LONG_MAX, &target_tokens))
        return usage_error("--tokens must be a number of tokens, not '%s'", target);
    req.target_tokens = target_tokens;
    if (kind == NULL || strcmp(kind, "auto") == 0)
        req.summarizer = CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_AUTO;
    else if (strcmp(kind, "llm") == 0)
        req.summarizer = CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_LLM;
    else if (strcmp(kind, "extractive") == 0)
        req.summarizer = CTXGUARD__V1__SUMMARIZER_KIND__SUMMARIZER_KIND_EXTRACTIVE;
    else
        return usage_error("--summarizer must be auto, llm or extractive, not '%s'", kind);
    /* Without --format the file's shape decides, as for count and compress (an Anthropic
     * file read as OpenAI JSON would lose its top-level system prompt). */
    if (format != NULL && strcmp(format, "anthropic") != 0 && strcmp(format, "openai") != 0 &&
        strcmp(format, "responses") != 0 && strcmp(format, "gemini") != 0)
        return usage_error("--format must be openai, anthropic, responses or gemini, not '%s'",
                           format);
    const char *focus = option_value(cmd, args, "--focus");
    const char *language = option_value(cmd, args, "--language");
    const char *model = option_value(cmd, args, "--model");
    req.focus = (char *)(focus != NULL ? focus : "");
    req.language = (char *)(language != NULL ? language : "");
    req.model = (char *)(model != NULL ? model : "");

    size_t len = 0;
    char *json = read_file(args->positional[0], &len);
    if (json == NULL)
        return EXIT_FAIL;
    if (strlen(json) != len) {
        free(json);
        fprintf(stderr, PROG ": %s holds a NUL byte: not a JSON conversation\n",
                args->positional[0]);
        return EXIT_FAIL;
    }
    conversation_set(&conv, format != NULL ? format : json_format_of(json), json);
    req.conversation = &conv;
    if (!ctl->timeout_given)
        ctl->timeout_ms = SUMMARIZE_TIMEOUT_MS;
    int rc = call(ctl, CONTEXT_METHOD("Summarize"), &req.base,
                  &ctxguard__v1__summarize_response__descriptor, &msg);
    free(json);
    if (rc)
        goto out;
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    const Ctxguard__V1__SummarizeResponse *resp = (const void *)msg;
    /* The summary keeps its line breaks; other control characters are shown as '?'. */
    for (const char *p = resp->summary; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        fputc(c == '\n' || (c >= 0x20 && c != 0x7f) ? c : '?', stdout);
    }
    printf("\n\n-- summarizer=%s", enum_short(&ctxguard__v1__summarizer_kind__descriptor,
                                              (int)resp->summarizer_used, "SUMMARIZER_KIND_"));
    if (resp->fallback_reason != 0) {
        printf(" fallback=%s (",
               enum_short(&ctxguard__v1__summary_fallback_reason__descriptor,
                          (int)resp->fallback_reason, "SUMMARY_FALLBACK_REASON_"));
        print_text(stdout, resp->fallback_detail);
        printf(")");
    }
    printf(" language=");
    print_text(stdout, resp->language);
    printf(" tokens=%" PRId64 " input_tokens=%" PRId64 " messages=%" PRId64 "%s",
           resp->summary_tokens, resp->input_tokens, resp->messages_summarized,
           resp->target_met ? "" : " (over target)");
    if (resp->llm_attempts > 0)
        printf(" llm_attempts=%" PRIu32 " chunks=%" PRIu32, resp->llm_attempts, resp->chunks);
    for (size_t i = 0; i < resp->n_redactions; i++)
        printf("%s%s=%" PRId64, i == 0 ? " redacted: " : " ",
               enum_short(&ctxguard__v1__pii_type__descriptor, (int)resp->redactions[i]->type,
                          "PII_TYPE_"),
               resp->redactions[i]->count);
    printf("\n");
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

/* ------------------------------------------------------------------ compress --- */

/* Writes len bytes of text to path ("-": standard output). Nonzero after a message. */
static int write_text(const char *path, const char *text)
{
    FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "wb");
    if (f == NULL) {
        fprintf(stderr, PROG ": cannot write %s: %s\n", path, strerror(errno));
        return EXIT_FAIL;
    }
    size_t n = strlen(text);
    bool ok = fwrite(text, 1, n, f) == n && fputc('\n', f) != EOF;
    if (f != stdout)
        ok = fclose(f) == 0 && ok;
    if (!ok) {
        fprintf(stderr, PROG ": cannot write %s: %s\n", path, strerror(errno));
        return EXIT_FAIL;
    }
    return 0;
}

static int cmd_compress(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__CompressRequest req = CTXGUARD__V1__COMPRESS_REQUEST__INIT;
    Ctxguard__V1__Conversation conv = CTXGUARD__V1__CONVERSATION__INIT;
    Ctxguard__V1__CompressionPolicy policy = CTXGUARD__V1__COMPRESSION_POLICY__INIT;
    ProtobufCMessage *msg = NULL;
    const char *model = option_value(cmd, args, "--model");
    const char *window = option_value(cmd, args, "--window");
    const char *target = option_value(cmd, args, "--target-ratio");
    const char *strategy = option_value(cmd, args, "--strategy");
    const char *session = option_value(cmd, args, "--session");
    const char *out_path = option_value(cmd, args, "--out");
    long window_tokens = 0;
    if (window != NULL && !parse_long(window, 1, LONG_MAX, &window_tokens))
        return usage_error("--window must be a number of tokens, not '%s'", window);
    req.context_window_tokens = window_tokens;
    if (target != NULL) {
        char *end = NULL;
        double r = strtod(target, &end);
        if (end == target || *end != '\0' || !(r > 0 && r <= 1))
            return usage_error("--target-ratio must be in (0, 1], not '%s'", target);
        policy.target_ratio = r;
    }
    if (strategy != NULL && strcmp(strategy, "summarizing") == 0)
        policy.strategy = CTXGUARD__V1__COMPRESSION_STRATEGY__COMPRESSION_STRATEGY_SUMMARIZING;
    else if (strategy != NULL && strcmp(strategy, "trimming") == 0)
        policy.strategy = CTXGUARD__V1__COMPRESSION_STRATEGY__COMPRESSION_STRATEGY_TRIMMING;
    else if (strategy != NULL)
        return usage_error("--strategy must be summarizing or trimming, not '%s'", strategy);
    req.policy = &policy;
    req.model = (char *)(model != NULL ? model : "");
    req.session_id = (char *)(session != NULL ? session : "");
    req.force = option_value(cmd, args, "--force") != NULL;
    req.dry_run = option_value(cmd, args, "--dry-run") != NULL;

    size_t len = 0;
    char *data = read_file(args->positional[0], &len);
    if (data == NULL)
        return EXIT_FAIL;
    conversation_set(&conv, json_format_of(data), data);
    req.conversation = &conv;
    if (!ctl->timeout_given)
        ctl->timeout_ms = SUMMARIZE_TIMEOUT_MS; /* a summary layer may call the LLM */
    int rc = call(ctl, CONTEXT_METHOD("Compress"), &req.base,
                  &ctxguard__v1__compress_response__descriptor, &msg);
    free(data);
    if (rc)
        goto out;
    const Ctxguard__V1__CompressResponse *resp = (const void *)msg;
    const Ctxguard__V1__Conversation *c = resp->conversation;
    const char *json = conversation_json(c);
    if (out_path != NULL && (rc = write_text(out_path, json)) != 0)
        goto out;
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    const Ctxguard__V1__CompressionReport *r = resp->report;
    if (r == NULL)
        goto out;
    FILE *o = out_path != NULL && strcmp(out_path, "-") == 0 ? stderr : stdout;
    fprintf(o, "tokens: %" PRId64 " -> %" PRId64 " (target %" PRId64 ", %s)\n", r->tokens_before,
            r->tokens_after, r->target_tokens, r->target_reached ? "reached" : "not reached");
    fprintf(o, "messages: %" PRId64 " -> %" PRId64 "  trim boundary: %" PRId64 " -> %" PRId64 "\n",
            r->messages_before, r->messages_after, r->trim_boundary_before, r->trim_boundary_after);
    for (size_t i = 0; i < r->n_layers; i++) {
        const Ctxguard__V1__LayerResult *l = r->layers[i];
        fprintf(
            o, "  %-26s %-10s saved %8" PRId64,
            enum_short(&ctxguard__v1__compression_layer__descriptor, (int)l->layer,
                       "COMPRESSION_LAYER_"),
            enum_short(&ctxguard__v1__layer_outcome__descriptor, (int)l->outcome, "LAYER_OUTCOME_"),
            l->tokens_saved);
        if (l->detail[0] != '\0') {
            fprintf(o, "  ");
            print_text(o, l->detail);
        }
        fprintf(o, "\n");
    }
    for (size_t i = 0; i < r->n_warnings; i++) {
        fprintf(o, "warning %s: ",
                enum_short(&ctxguard__v1__compression_warning_code__descriptor,
                           (int)r->warnings[i]->code, "COMPRESSION_WARNING_CODE_"));
        print_text(o, r->warnings[i]->message);
        fprintf(o, "\n");
    }
    if (out_path == NULL)
        rc = write_text("-", json);
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

/* ------------------------------------------------------------------ notify ------ */

#define NOTIFY_EVENTS_MAX 32    /* the most event types a channel names (the server's cap) */
#define NOTIFY_EVENTS_TEXT 1024 /* room for NOTIFY_EVENTS_MAX names and their commas */
#define NOTIFY_PAGE_MAX 1000    /* ListNotificationDeliveries' largest page */
#define NOTIFY_NAME_MAX 32      /* longer than any event type's name */

/* enum_short in lower case ("NOTIFICATION_CHANNEL_KIND_WEBHOOK" -> "webhook") into buf. */
static const char *enum_lower(const ProtobufCEnumDescriptor *d, int value, const char *prefix,
                              char *buf, size_t len)
{
    const char *s = enum_short(d, value, prefix);
    size_t i = 0;
    for (; s[i] != '\0' && i + 1 < len; i++)
        buf[i] = s[i] >= 'A' && s[i] <= 'Z' ? (char)(s[i] - 'A' + 'a') : s[i];
    buf[i] = '\0';
    return buf;
}

static const char *event_type_name(int type, char *buf, size_t len)
{
    return enum_lower(&ctxguard__v1__usage_event_type__descriptor, type, "USAGE_EVENT_TYPE_", buf,
                      len);
}

static const char *channel_kind_name(int kind, char *buf, size_t len)
{
    return enum_lower(&ctxguard__v1__notification_channel_kind__descriptor, kind,
                      "NOTIFICATION_CHANNEL_KIND_", buf, len);
}

static const char *delivery_state_name(int state, char *buf, size_t len)
{
    return enum_lower(&ctxguard__v1__notification_delivery_state__descriptor, state,
                      "NOTIFICATION_DELIVERY_STATE_", buf, len);
}

/* Whether a channel may subscribe to an event type: all but the stream's own (SNAPSHOT,
 * USAGE_CHANGED, HEARTBEAT), as the server decides. Taken from the enum rather than listed
 * here so that a new event type needs no change of this client. */
static bool notify_event_is_sendable(int type)
{
    switch (type) {
    case CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_UNSPECIFIED:
    case CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_SNAPSHOT:
    case CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_USAGE_CHANGED:
    case CTXGUARD__V1__USAGE_EVENT_TYPE__USAGE_EVENT_TYPE_HEARTBEAT:
        return false;
    default:
        return true;
    }
}

/* The usage error of an --events name that is no sendable event type; lists those. Returns
 * EXIT_USAGE. */
static int notify_event_unknown(const char *name, size_t len)
{
    const ProtobufCEnumDescriptor *d = &ctxguard__v1__usage_event_type__descriptor;
    char known[1024] = "";
    size_t used = 0;
    for (unsigned i = 0; i < d->n_values && used < sizeof known; i++) {
        char lower[NOTIFY_NAME_MAX];
        if (!notify_event_is_sendable(d->values[i].value))
            continue;
        int n = snprintf(known + used, sizeof known - used, "%s%s", used > 0 ? ", " : "",
                         event_type_name(d->values[i].value, lower, sizeof lower));
        if (n < 0)
            break;
        used += (size_t)n;
    }
    return usage_error("--events: unknown event '%.*s' (known: %s)", (int)len, name, known);
}

/* "warning,exhausted" (any case) into types, at most NOTIFY_EVENTS_MAX. Returns EXIT_OK, or
 * EXIT_USAGE after a message naming the name that is not a sendable event type. */
static int parse_notify_events(const char *text, Ctxguard__V1__UsageEventType *types, size_t *n_out)
{
    const char *p = text;
    *n_out = 0;
    do {
        size_t len = strcspn(p, ",");
        char name[sizeof "USAGE_EVENT_TYPE_" + NOTIFY_NAME_MAX] = "USAGE_EVENT_TYPE_";
        size_t at = strlen(name);
        for (size_t i = 0; i < len && at + 1 < sizeof name; i++)
            name[at++] = p[i] >= 'a' && p[i] <= 'z' ? (char)(p[i] - 'a' + 'A') : p[i];
        name[at] = '\0';
        const ProtobufCEnumValue *v = len < NOTIFY_NAME_MAX
                                          ? protobuf_c_enum_descriptor_get_value_by_name(
                                                &ctxguard__v1__usage_event_type__descriptor, name)
                                          : NULL;
        if (v == NULL || !notify_event_is_sendable(v->value))
            return notify_event_unknown(p, len);
        if (*n_out >= NOTIFY_EVENTS_MAX)
            return usage_error("--events names at most %d event types", NOTIFY_EVENTS_MAX);
        types[(*n_out)++] = (Ctxguard__V1__UsageEventType)v->value;
        p += len;
    } while (*p++ == ',');
    return EXIT_OK;
}

/* A channel's event types as "warning,exhausted"; "default" for the default set. */
static const char *notify_events_text(const Ctxguard__V1__NotificationChannel *c, char *buf,
                                      size_t len)
{
    size_t used = 0;
    snprintf(buf, len, "default");
    for (size_t i = 0; i < c->n_event_types; i++) {
        char name[NOTIFY_NAME_MAX];
        int n = snprintf(buf + used, len - used, "%s%s", i > 0 ? "," : "",
                         event_type_name(c->event_types[i], name, sizeof name));
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    return buf;
}

/* A channel's scope prefix as "session[/task]"; "tenant" for the whole tenant. */
static const char *notify_scope_text(const Ctxguard__V1__Scope *sc, char *buf, size_t len)
{
    if (sc == NULL || sc->session_id == NULL || sc->session_id[0] == '\0') {
        snprintf(buf, len, "tenant");
        return buf;
    }
    return key_scope_text(sc, buf, len);
}

static void print_notify_channel(const Ctxguard__V1__NotificationChannel *c)
{
    char kind[32], when[40];
    char events[NOTIFY_EVENTS_TEXT];
    char scope[2 * SCOPE_ID_MAX + 2];
    print_field("channel_id:", c->channel_id);
    print_field("kind:", channel_kind_name(c->kind, kind, sizeof kind));
    print_field("url_hint:", c->url_hint);
    print_field("events:", notify_events_text(c, events, sizeof events));
    print_field("scope:", notify_scope_text(c->scope_prefix, scope, sizeof scope));
    print_field("description:", c->description);
    print_field("created_at:", format_time(c->created_at_unix_ms, when, sizeof when));
}

/* The request of `notify add` from its options. Returns EXIT_OK, or EXIT_USAGE after a
 * message. types and sc hold what req points to. */
static int notify_add_request(const struct command *cmd, const struct cmd_args *args,
                              Ctxguard__V1__CreateNotificationChannelRequest *req,
                              Ctxguard__V1__UsageEventType *types, struct scope_arg *sc)
{
    const char *webhook = option_value(cmd, args, "--webhook");
    const char *slack = option_value(cmd, args, "--slack");
    const char *events = option_value(cmd, args, "--events");
    const char *scope_text = option_value(cmd, args, "--scope");
    const char *description = option_value(cmd, args, "--description");
    int rc;

    if ((webhook == NULL) == (slack == NULL))
        return usage_error("notify add needs one of --webhook URL or --slack URL (not both)");
    req->kind = webhook != NULL
                    ? CTXGUARD__V1__NOTIFICATION_CHANNEL_KIND__NOTIFICATION_CHANNEL_KIND_WEBHOOK
                    : CTXGUARD__V1__NOTIFICATION_CHANNEL_KIND__NOTIFICATION_CHANNEL_KIND_SLACK;
    req->url = (char *)(webhook != NULL ? webhook : slack);
    if (events != NULL) {
        if ((rc = parse_notify_events(events, types, &req->n_event_types)) != EXIT_OK)
            return rc;
        req->event_types = types;
    }
    if (scope_text != NULL) {
        /* A channel watches a session or a task (and below): at most two ids. */
        if (!parse_scope(scope_text, sc))
            return EXIT_USAGE;
        if (sc->scope.tenant || sc->ids[2][0] != '\0')
            return usage_error("--scope must be SESSION or SESSION/TASK, not '%s'", scope_text);
        req->scope_prefix = &sc->scope;
    }
    if (description != NULL)
        req->description = (char *)description;
    return EXIT_OK;
}

static int cmd_notify_add(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    Ctxguard__V1__CreateNotificationChannelRequest req =
        CTXGUARD__V1__CREATE_NOTIFICATION_CHANNEL_REQUEST__INIT;
    Ctxguard__V1__UsageEventType types[NOTIFY_EVENTS_MAX];
    ProtobufCMessage *msg = NULL;
    struct scope_arg sc;
    int rc = notify_add_request(cmd, args, &req, types, &sc);

    if (rc)
        return rc;
    rc = call(ctl, BUDGET_METHOD("CreateNotificationChannel"), &req.base,
              &ctxguard__v1__create_notification_channel_response__descriptor, &msg);
    if (rc)
        goto out;
    const Ctxguard__V1__CreateNotificationChannelResponse *resp = (const void *)msg;
    bool webhook =
        req.kind == CTXGUARD__V1__NOTIFICATION_CHANNEL_KIND__NOTIFICATION_CHANNEL_KIND_WEBHOOK;
    if (resp->channel == NULL || (webhook && resp->signing_secret[0] == '\0')) {
        rc = fail_answer(webhook ? "channel or signing secret" : "channel");
        goto out;
    }
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    print_notify_channel(resp->channel);
    if (webhook) {
        print_field("secret:", resp->signing_secret);
        printf("\nThe signing secret above is shown only this once: store it now. Receivers\n"
               "check the Ctxguard-Signature header with it; no command shows it again.\n");
    }
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_notify_list(struct ctl *ctl, const struct command *cmd, const struct cmd_args *args)
{
    (void)cmd;
    (void)args;
    Ctxguard__V1__ListNotificationChannelsRequest req =
        CTXGUARD__V1__LIST_NOTIFICATION_CHANNELS_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    int rc = call(ctl, BUDGET_METHOD("ListNotificationChannels"), &req.base,
                  &ctxguard__v1__list_notification_channels_response__descriptor, &msg);
    if (rc)
        goto out;
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    const Ctxguard__V1__ListNotificationChannelsResponse *resp = (const void *)msg;
    printf("%-36s  %-7s  %-30s  %-24s  %-24s  %s\n", "CHANNEL_ID", "KIND", "URL", "EVENTS", "SCOPE",
           "DESCRIPTION");
    for (size_t i = 0; i < resp->n_channels; i++) {
        const Ctxguard__V1__NotificationChannel *c = resp->channels[i];
        char kind[32];
        char events[NOTIFY_EVENTS_TEXT];
        char scope[2 * SCOPE_ID_MAX + 2];
        print_cell(c->channel_id, 36);
        print_cell(channel_kind_name(c->kind, kind, sizeof kind), 7);
        print_cell(c->url_hint, 30);
        print_cell(notify_events_text(c, events, sizeof events), 24);
        print_cell(notify_scope_text(c->scope_prefix, scope, sizeof scope), 24);
        print_text(stdout, c->description);
        fputc('\n', stdout);
    }
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_notify_delete(struct ctl *ctl, const struct command *cmd,
                             const struct cmd_args *args)
{
    (void)cmd;
    Ctxguard__V1__DeleteNotificationChannelRequest req =
        CTXGUARD__V1__DELETE_NOTIFICATION_CHANNEL_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;

    req.channel_id = (char *)args->positional[0];
    int rc = call(ctl, BUDGET_METHOD("DeleteNotificationChannel"), &req.base,
                  &ctxguard__v1__delete_notification_channel_response__descriptor, &msg);
    if (rc)
        goto out;
    const Ctxguard__V1__DeleteNotificationChannelResponse *resp = (const void *)msg;
    if (resp->channel == NULL) {
        rc = fail_answer("channel");
        goto out;
    }
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    char kind[32];
    printf("deleted %s channel ", channel_kind_name(resp->channel->kind, kind, sizeof kind));
    print_text(stdout, resp->channel->channel_id);
    printf(" (");
    print_text(stdout, resp->channel->url_hint);
    printf(")\ndropped %" PRId64 " undelivered (pending or dead) deliveries\n",
           resp->dropped_deliveries);
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

/* One row of `notify deliveries`; the free text (the last error) comes last. */
static void print_notify_delivery(const Ctxguard__V1__NotificationDelivery *d)
{
    char type[NOTIFY_NAME_MAX], state[NOTIFY_NAME_MAX], status[16], when[40];
    snprintf(status, sizeof status, "%" PRIu32, d->last_status);
    print_cell(d->delivery_id, 36);
    print_cell(d->channel_id, 36);
    print_cell(event_type_name(d->event_type, type, sizeof type), 19);
    print_cell(delivery_state_name(d->state, state, sizeof state), 9);
    printf("%8" PRIu32 "  ", d->attempts);
    print_cell(d->last_status != 0 ? status : "-", 6);
    print_cell(format_time(d->created_at_unix_ms, when, sizeof when), 24);
    print_text(stdout, d->last_error[0] != '\0' ? d->last_error : "-");
    fputc('\n', stdout);
}

/* The request of `notify deliveries` from its options. Returns EXIT_OK, or EXIT_USAGE
 * after a message. */
static int notify_deliveries_request(const struct command *cmd, const struct cmd_args *args,
                                     Ctxguard__V1__ListNotificationDeliveriesRequest *req)
{
    const char *state = option_value(cmd, args, "--state");
    const char *channel = option_value(cmd, args, "--channel");
    const char *page_size = option_value(cmd, args, "--page-size");
    const char *page_token = option_value(cmd, args, "--page-token");
    long size = 0;

    if (state != NULL) {
        char name[NOTIFY_NAME_MAX];
        for (int s = 1;
             s <= CTXGUARD__V1__NOTIFICATION_DELIVERY_STATE__NOTIFICATION_DELIVERY_STATE_DEAD; s++)
            if (strcmp(state, delivery_state_name(s, name, sizeof name)) == 0)
                req->state = (Ctxguard__V1__NotificationDeliveryState)s;
        if (req->state == 0)
            return usage_error("--state must be pending, delivered or dead, not '%s'", state);
    }
    if (page_size != NULL && !parse_long(page_size, 1, NOTIFY_PAGE_MAX, &size))
        return usage_error("--page-size must be 1..%d, not '%s'", NOTIFY_PAGE_MAX, page_size);
    req->page_size = (uint32_t)size;
    if (channel != NULL)
        req->channel_id = (char *)channel;
    if (page_token != NULL)
        req->page_token = (char *)page_token;
    return EXIT_OK;
}

static int cmd_notify_deliveries(struct ctl *ctl, const struct command *cmd,
                                 const struct cmd_args *args)
{
    Ctxguard__V1__ListNotificationDeliveriesRequest req =
        CTXGUARD__V1__LIST_NOTIFICATION_DELIVERIES_REQUEST__INIT;
    ProtobufCMessage *msg = NULL;
    int rc = notify_deliveries_request(cmd, args, &req);

    if (rc)
        return rc;
    rc = call(ctl, BUDGET_METHOD("ListNotificationDeliveries"), &req.base,
              &ctxguard__v1__list_notification_deliveries_response__descriptor, &msg);
    if (rc)
        goto out;
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    const Ctxguard__V1__ListNotificationDeliveriesResponse *resp = (const void *)msg;
    printf("%-36s  %-36s  %-19s  %-9s  %8s  %-6s  %-24s  %s\n", "DELIVERY_ID", "CHANNEL_ID",
           "EVENT", "STATE", "ATTEMPTS", "STATUS", "CREATED_AT", "LAST_ERROR");
    for (size_t i = 0; i < resp->n_deliveries; i++)
        print_notify_delivery(resp->deliveries[i]);
    if (resp->next_page_token[0] != '\0') {
        printf("\nnext page: --page-token ");
        print_text(stdout, resp->next_page_token);
        fputc('\n', stdout);
    }
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static int cmd_notify_redrive(struct ctl *ctl, const struct command *cmd,
                              const struct cmd_args *args)
{
    Ctxguard__V1__RedriveNotificationDeliveriesRequest req =
        CTXGUARD__V1__REDRIVE_NOTIFICATION_DELIVERIES_REQUEST__INIT;
    const char *channel = option_value(cmd, args, "--channel");
    bool all_dead = option_value(cmd, args, "--all-dead") != NULL;
    ProtobufCMessage *msg = NULL;

    if (args->positional_count == 0 && !all_dead)
        return usage_error("notify redrive needs DELIVERY_ID... or --all-dead");
    if (args->positional_count > 0 && all_dead)
        return usage_error("notify redrive takes DELIVERY_ID... or --all-dead, not both");
    /* Ids name their deliveries already: the server applies the channel to --all-dead only. */
    if (channel != NULL && !all_dead)
        return usage_error("--channel goes with --all-dead");
    req.delivery_ids = (char **)args->positional;
    req.n_delivery_ids = (size_t)args->positional_count;
    req.all_dead = all_dead;
    if (channel != NULL)
        req.channel_id = (char *)channel;
    int rc = call(ctl, BUDGET_METHOD("RedriveNotificationDeliveries"), &req.base,
                  &ctxguard__v1__redrive_notification_deliveries_response__descriptor, &msg);
    if (rc)
        goto out;
    if (ctl->json) {
        rc = print_json(msg);
        goto out;
    }
    const Ctxguard__V1__RedriveNotificationDeliveriesResponse *resp = (const void *)msg;
    printf("%" PRId64 " dead deliveries made pending again\n", resp->redriven);
out:
    if (msg != NULL)
        protobuf_c_message_free_unpacked(msg, NULL);
    return rc;
}

static const struct command commands[] = {
    {.words = "health",
     .arg_usage = "[SERVICE]",
     .summary = "serving status of the server (or SERVICE); exit 0 only when SERVING",
     .key = KEY_FLAG_ONLY,
     .max_positional = 1,
     .run = cmd_health},
    {.words = "tenant create",
     .arg_usage = "NAME",
     .summary = "create a tenant; prints its id",
     .key = KEY_ADMIN,
     .min_positional = 1,
     .max_positional = 1,
     .options = {{"--time-zone", "TZ", "IANA time zone for budget resets (default UTC)"}},
     .run = cmd_tenant_create},
    {.words = "tenant get",
     .arg_usage = "TENANT_ID",
     .summary = "show a tenant",
     .key = KEY_ADMIN,
     .min_positional = 1,
     .max_positional = 1,
     .run = cmd_tenant_get},
    {.words = "tenant settings",
     .arg_usage = "TENANT_ID",
     .summary = "show or change a tenant's settings: PII, retention (options not given are "
                "kept)",
     .key = KEY_ADMIN,
     .min_positional = 1,
     .max_positional = 1,
     .options = {{"--redact", "TYPE,...",
                  "PII types redacted before summarizing: all, or email, phone, card_number, "
                  "ssn, ipv4, ipv6, api_key, secret"},
                 {"--redact-artifacts", "on|off", "also redact offloaded artifacts before storing"},
                 {"--retention-days", "N",
                  "delete sessions idle for N days, whole (0: keep them)"}},
     .run = cmd_tenant_settings},
    {.words = "tenant list",
     .arg_usage = "",
     .summary = "list all tenants, oldest first",
     .key = KEY_ADMIN,
     .options = {{"--page-size", "N", "tenants fetched per call, 1..1000"}},
     .run = cmd_tenant_list},
    {.words = "key create",
     .arg_usage = "TENANT_ID",
     .summary = "create an API key; prints its secret once (TENANT_ID - : the tenant of a tenant"
                " admin or operator --key)",
     .key = KEY_ADMIN,
     .min_positional = 1,
     .max_positional = 1,
     .options = {{"--name", "NAME", "label of the key"},
                 {"--role", "ROLE",
                  "agent (the default: spends and reads), viewer, operator or admin"},
                 {"--scope", "SESSION[/TASK]", "bind the key to a session or a task"},
                 {"--expires", "DURATION", "lifetime: 90s, 30m, 2h, 7d (default: never)"}},
     .run = cmd_key_create},
    {.words = "key list",
     .arg_usage = "TENANT_ID",
     .summary = "list a tenant's API keys with role, scope, expiry and last use (never their"
                " secrets; TENANT_ID - : the key's own tenant)",
     .key = KEY_ADMIN,
     .min_positional = 1,
     .max_positional = 1,
     .run = cmd_key_list},
    {.words = "key revoke",
     .arg_usage = "TENANT_ID KEY_ID",
     .summary = "revoke an API key",
     .key = KEY_ADMIN,
     .min_positional = 2,
     .max_positional = 2,
     .run = cmd_key_revoke},
    {.words = "whoami",
     .arg_usage = "",
     .summary = "who the key belongs to",
     .key = KEY_ANY,
     .run = cmd_whoami},
    {.words = "ping",
     .arg_usage = "",
     .summary = "round trip through the server's reply timer",
     .key = KEY_ADMIN,
     .options = {{"--delay", "MS", "how long the server holds the reply"}},
     .run = cmd_ping},
    {.words = "budget set",
     .arg_usage = "SCOPE",
     .summary = "create the budget of SCOPE (session[/task[/agent]], - for the tenant), or change"
                " the settings given (an existing budget keeps the others)",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .options = {{"--limit", "N", "token limit (required for a new budget)"},
                 {"--mode", "MODE", "hard (default for a new budget), soft or approval"},
                 {"--warning", "R", "warning ratio in (0, 1] (default 0.8)"},
                 {"--allocate", NULL, "carve the limit out of the parent (allocate_from_parent)"}},
     .run = cmd_budget_set},
    {.words = "check",
     .arg_usage = "SCOPE",
     .summary = "may SCOPE spend N tokens? prints the decision; exit 0 allow, 3 deny, 4 approval"
                " required",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .options = {{"--tokens", "N", "estimated input tokens"},
                 {"--output", "N", "estimated output tokens"},
                 {"--model", "M", "model (prices the estimate for cost limits)"},
                 {"--return-only", NULL,
                  "answer at once instead of waiting the backpressure delay"},
                 {"--dry-run", NULL, "never open an approval"}},
     .run = cmd_check},
    {.words = "reserve",
     .arg_usage = "SCOPE",
     .summary = "hold N tokens on SCOPE's path; prints the reservation id alone on stdout; exit"
                " 0 held, 3 deny, 4 approval required",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .options = {{"--tokens", "N", "tokens to hold (required)"},
                 {"--output", "N", "estimated output tokens"},
                 {"--model", "M", "model"},
                 {"--ttl", "MS", "expiry of the hold in ms (default: the budget's)"},
                 {"--idempotency-key", "K", "a retry with the same key returns the same hold"},
                 {"--return-only", NULL,
                  "answer at once instead of waiting the backpressure delay"}},
     .run = cmd_reserve},
    {.words = "commit",
     .arg_usage = "RESERVATION_ID",
     .summary = "record what the call spent and settle the hold",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .options = {USAGE_OPTION_ROWS,
                 {"--model", "M", "model"},
                 {"--record-if-expired", NULL, "record the usage even if the hold expired"}},
     .run = cmd_commit},
    {.words = "release",
     .arg_usage = "RESERVATION_ID",
     .summary = "give a hold back unused (the call failed or was not made)",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .run = cmd_release},
    {.words = "record",
     .arg_usage = "SCOPE",
     .summary = "record spend without a reservation",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .options = {USAGE_OPTION_ROWS,
                 {"--model", "M", "model"},
                 {"--idempotency-key", "K", "a retry with the same key records once"}},
     .run = cmd_record},
    {.words = "usage",
     .arg_usage = "[SCOPE]",
     .summary = "the usage tree under SCOPE (default the tenant), a bar per level",
     .key = KEY_TENANT,
     .max_positional = 1,
     .options = {{"--depth", "N", "levels below SCOPE, 0..3 (default 3)"},
                 {"--closed", NULL, "include closed scopes"},
                 {"--history", NULL, "spend over time instead: a bar per step"},
                 {"--since", "DUR", "with --history: how far back, e.g. 30m, 6h, 7d (default 1h)"},
                 {"--step", "DUR", "with --history: step length, whole minutes (default: chosen)"}},
     .run = cmd_usage},
    {.words = "watch",
     .arg_usage = "[SCOPE]",
     .summary = "live events of SCOPE (default the tenant) until interrupted: a view redrawn "
                "per event on a terminal, else a line per event",
     .key = KEY_TENANT,
     .max_positional = 1,
     .options = {{"--descendants", NULL, "also the events of every scope below it (lines)"},
                 {"--live", NULL,
                  "redraw the usage of SCOPE and below in place (default on a terminal)"},
                 {"--lines", NULL, "a line per event (default when stdout is not a terminal)"}},
     .run = cmd_watch},
    {.words = "approve",
     .arg_usage = "APPROVAL_ID",
     .summary = "approve a pending approval: its level's limit grows by the granted tokens",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .options = {{"--tokens", "N", "tokens to grant (default: the requested amount)"},
                 {"--note", "TEXT", "a note kept with the decision"},
                 {"--by", "NAME", "who decides (default: the key's id)"}},
     .run = cmd_approve},
    {.words = "deny",
     .arg_usage = "APPROVAL_ID",
     .summary = "deny a pending approval: requests over that limit get DENY until it changes",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .options = {{"--note", "TEXT", "a note kept with the decision"},
                 {"--by", "NAME", "who decides (default: the key's id)"}},
     .run = cmd_deny},
    {.words = "audit",
     .arg_usage = "[TENANT_ID]",
     .summary = "the audit trail, newest first: who changed which budget, approval, key or "
                "setting, when, before -> after (TENANT_ID required with the admin key)",
     .key = KEY_ADMIN,
     .max_positional = 1,
     .options = {{"--scope", "S[/T[/A]]", "only that scope and the scopes under it"},
                 {"--actor", "KEY_ID", "only changes by that key (admin: the server's admin key)"},
                 {"--kind", "KIND", "only that kind (budget_set, api_key_created, ...)"},
                 {"--since", "TIME", "at or after TIME (unix ms or RFC 3339)"},
                 {"--until", "TIME", "before TIME"},
                 {"--limit", "N", "at most N rows (default 100)"}},
     .run = cmd_audit},
    {.words = "approvals",
     .arg_usage = "[SCOPE]",
     .summary = "approvals under SCOPE (default the tenant), newest first",
     .key = KEY_TENANT,
     .max_positional = 1,
     .options = {{"--pending", NULL, "only pending ones"}},
     .run = cmd_approvals},
    {.words = "notify add",
     .arg_usage = "",
     .summary = "add a notification channel: budget events POSTed to a signed webhook or to Slack;"
                " prints a webhook's signing secret once (tenant admin key)",
     .key = KEY_TENANT,
     .options = {{"--webhook", "URL", "a webhook: each event as JSON, signed (Ctxguard-Signature)"},
                 {"--slack", "URL", "a Slack incoming webhook: each event as a text message"},
                 {"--events", "LIST",
                  "comma-separated event types as named after USAGE_EVENT_TYPE_, in lower "
                  "case: warning, exhausted, threshold_crossed, approval_requested, ... (a "
                  "wrong name lists them all; default: the server's default set)"},
                 {"--scope", "SESSION[/TASK]",
                  "only the events of that session or task and below (default: the tenant)"},
                 {"--description", "TEXT", "a label, at most 200 bytes"}},
     .run = cmd_notify_add},
    {.words = "notify list",
     .arg_usage = "",
     .summary = "the notification channels, oldest first: kind, host, events, scope (never the"
                " signing secret)",
     .key = KEY_TENANT,
     .run = cmd_notify_list},
    {.words = "notify delete",
     .arg_usage = "CHANNEL_ID",
     .summary = "delete a notification channel and its undelivered deliveries (tenant admin key)",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .run = cmd_notify_delete},
    {.words = "notify deliveries",
     .arg_usage = "",
     .summary = "one page of notification deliveries, newest first: event, state, attempts, last"
                " HTTP status and error",
     .key = KEY_TENANT,
     .options = {{"--state", "STATE", "only pending, delivered or dead ones"},
                 {"--channel", "ID", "only that channel's"},
                 {"--page-size", "N", "1..1000 (default 100)"},
                 {"--page-token", "T", "the page after the one that printed T"}},
     .run = cmd_notify_deliveries},
    {.words = "notify redrive",
     .arg_usage = "[DELIVERY_ID...]",
     .summary = "send dead deliveries again (the same delivery ids): those named, or --all-dead",
     .key = KEY_TENANT,
     .max_positional = MAX_POSITIONAL,
     .options = {{"--all-dead", NULL, "every dead delivery"},
                 {"--channel", "ID", "with --all-dead: only that channel's"}},
     .run = cmd_notify_redrive},
    {.words = "session delete",
     .arg_usage = "SESSION_ID",
     .summary = "delete a compression session whole: history, artifacts, boundary, "
                "compaction records (operator or admin key)",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .run = cmd_session_delete},
    {.words = "count",
     .arg_usage = "FILE",
     .summary = "tokens of FILE (- for stdin): a JSON conversation (OpenAI chat or Responses, "
                "Anthropic, Gemini: told apart by its content), or plain text with --text; total, "
                "method, per message",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .options = {{"--model", "M", "the model (tokenizer or estimator profile, window)"},
                 {"--encoding", "E", "count exactly with cl100k_base or o200k_base"},
                 {"--text", NULL, "FILE is plain text, counted bare"},
                 {"--special", NULL, "special-token strings count as their special token"}},
     .run = cmd_count},
    {.words = "summarize",
     .arg_usage = "FILE",
     .summary = "a structured summary of the conversation in FILE (OpenAI chat or Responses, "
                "Anthropic or Gemini JSON, told apart by its content; - for stdin), PII redacted "
                "first",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .options = {{"--tokens", "N", "summary size in tokens, 64..2000 (default 400)"},
                 {"--summarizer", "KIND", "auto (default), llm or extractive"},
                 {"--focus", "TEXT", "what to emphasise"},
                 {"--language", "TAG", "language to write in (default: the conversation's)"},
                 {"--model", "NAME", "the conversation's model, for token counts"},
                 {"--format", "FORMAT",
                  "openai, anthropic, responses or gemini JSON (default: from the file)"}},
     .run = cmd_summarize},
    {.words = "compress",
     .arg_usage = "FILE",
     .summary = "shrink the conversation in FILE (OpenAI chat or Responses, Anthropic or Gemini "
                "JSON; - for stdin) with the cascade; prints the report and the result (or writes "
                "it with --out)",
     .key = KEY_TENANT,
     .min_positional = 1,
     .max_positional = 1,
     .options = {{"--model", "NAME", "the model the conversation is for"},
                 {"--window", "N", "its context window in tokens (default: the model's)"},
                 {"--target-ratio", "R", "target as a share of the effective window, (0, 1]"},
                 {"--strategy", "S", "summarizing (default) or trimming"},
                 {"--session", "ID", "keep history, boundary and artifacts under this session"},
                 {"--out", "FILE",
                  "write the result there (- for stdout; the report then "
                  "goes to stderr)"},
                 {"--force", NULL, "compress even under the trigger"},
                 {"--dry-run", NULL, "store nothing"}},
     .run = cmd_compress},
};

#define COMMAND_COUNT (sizeof commands / sizeof commands[0])

/* ------------------------------------------------------------------ help -------- */

static const char *key_note(enum key_source key)
{
    switch (key) {
    case KEY_ADMIN:
        return "admin key";
    case KEY_ANY:
        return "tenant or admin key";
    case KEY_TENANT:
        return "tenant key";
    case KEY_FLAG_ONLY:
        break;
    }
    return "no key needed";
}

/* "tenant create NAME [--time-zone TZ]" into buf. */
static const char *command_synopsis(const struct command *cmd, char *buf, size_t len)
{
    size_t used = 0;
    int n = snprintf(buf, len, "%s%s%s", cmd->words, cmd->arg_usage[0] != '\0' ? " " : "",
                     cmd->arg_usage);
    if (n < 0 || (size_t)n >= len)
        return buf;
    used = (size_t)n;
    for (int i = 0; i < MAX_CMD_OPTIONS && cmd->options[i].name != NULL; i++) {
        const struct cmd_option *o = &cmd->options[i];
        n = snprintf(buf + used, len - used, " [%s%s%s]", o->name, o->value_name ? " " : "",
                     o->value_name ? o->value_name : "");
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    return buf;
}

/* The whole help, or with group non-NULL ("tenant", "budget") only that group's commands. */
static void print_usage(FILE *out, const char *group)
{
    char synopsis[160];
    size_t group_len = group != NULL ? strlen(group) : 0;

    if (group != NULL) {
        fprintf(out, "usage: " PROG " [OPTIONS] %s ...   (`" PROG " --help` for all)\n\n", group);
        for (size_t i = 0; i < COMMAND_COUNT; i++) {
            const struct command *cmd = &commands[i];
            if (strncmp(cmd->words, group, group_len) != 0 ||
                (cmd->words[group_len] != ' ' && cmd->words[group_len] != '\0'))
                continue;
            fprintf(out, "  %s\n      %s (%s)\n", command_synopsis(cmd, synopsis, sizeof synopsis),
                    cmd->summary, key_note(cmd->key));
        }
        return;
    }

    fprintf(out,
            "usage: " PROG " [OPTIONS] COMMAND [ARGS]\n"
            "\n"
            "The command-line client of ctxguard.\n"
            "\n"
            "Options (accepted anywhere before `--`):\n"
            "  --target HOST:PORT  server address (env CTXGUARD_TARGET; default %s)\n"
            "  --key KEY           API key, sent as `authorization: Bearer KEY` (env\n"
            "                      CTXGUARD_KEY; admin commands use CTXGUARD_ADMIN_KEY first)\n"
            "  --tls-ca FILE       use TLS and trust the CA certificates in FILE (PEM)\n"
            "  --timeout MS        deadline of each call (default %d)\n"
            "  --json              machine-readable output: one JSON object on stdout\n"
            "  -h, --help          this text; `" PROG " COMMAND --help` for one command\n"
            "  --version           the version\n"
            "\n"
            "Commands:\n",
            CG_CLIENT_DEFAULT_TARGET, CG_CLIENT_DEFAULT_TIMEOUT_MS);
    for (size_t i = 0; i < COMMAND_COUNT; i++) {
        const struct command *cmd = &commands[i];
        fprintf(out, "  %s\n      %s (%s)\n", command_synopsis(cmd, synopsis, sizeof synopsis),
                cmd->summary, key_note(cmd->key));
    }
    fprintf(out,
            "\n"
            "Exit status: 0 success; 1 the call failed (stderr: \"" PROG ": STATUS: message\")\n"
            "or health is not SERVING; 2 usage error; check and reserve: 3 DENY, 4 approval\n"
            "required.\n");
}

static void print_command_usage(FILE *out, const struct command *cmd)
{
    char synopsis[160];

    fprintf(out, "usage: " PROG " [OPTIONS] %s\n\n%s (%s)\n",
            command_synopsis(cmd, synopsis, sizeof synopsis), cmd->summary, key_note(cmd->key));
    for (int i = 0; i < MAX_CMD_OPTIONS && cmd->options[i].name != NULL; i++) {
        const struct cmd_option *o = &cmd->options[i];
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", o->name, o->value_name ? " " : "",
                 o->value_name ? o->value_name : "");
        fprintf(out, "  %-22s %s\n", left, o->help);
    }
}

/* ------------------------------------------------------------------ main -------- */

/* Splits "--name=value" into its name (copied into buf) and value. Returns the name. */
static const char *split_option(const char *arg, char *buf, size_t len, const char **value)
{
    const char *eq = strchr(arg, '=');
    *value = NULL;
    if (eq == NULL || (size_t)(eq - arg) >= len)
        return arg;
    memcpy(buf, arg, (size_t)(eq - arg));
    buf[eq - arg] = '\0';
    *value = eq + 1;
    return buf;
}

/* Whether the command's words are the first words of words[0..count). */
static bool command_matches(const struct command *cmd, const char *const *words, int count,
                            int *used)
{
    const char *p = cmd->words;
    int n = 0;
    while (*p != '\0') {
        size_t len = strcspn(p, " ");
        if (n >= count || strlen(words[n]) != len || strncmp(words[n], p, len) != 0)
            return false;
        n++;
        p += len;
        if (*p == ' ')
            p++;
    }
    *used = n;
    return true;
}

int main(int argc, char **argv)
{
    struct ctl ctl = {0};
    const char *rest[MAX_ARGS];
    bool rest_is_positional[MAX_ARGS];
    int rest_count = 0;
    bool want_help = false;
    bool after_dashes = false;
    char name_buf[64];
    int rc = EXIT_OK;

    ctl.target = env_nonempty("CTXGUARD_TARGET");
    ctl.timeout_ms = CG_CLIENT_DEFAULT_TIMEOUT_MS;
    if (argc > MAX_ARGS)
        return usage_error("too many arguments (more than %d)", MAX_ARGS - 1);

    /* Pass 1: global options anywhere; everything else kept in order for the command. */
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        const char *value = NULL;
        if (after_dashes || arg[0] != '-' || arg[1] == '\0') {
            rest_is_positional[rest_count] = after_dashes;
            rest[rest_count++] = arg;
            continue;
        }
        if (strcmp(arg, "--") == 0) {
            after_dashes = true;
            continue;
        }
        const char *name = split_option(arg, name_buf, sizeof name_buf, &value);
        bool takes_value = strcmp(name, "--target") == 0 || strcmp(name, "--key") == 0 ||
                           strcmp(name, "--tls-ca") == 0 || strcmp(name, "--timeout") == 0;
        if (takes_value && value == NULL) {
            if (i + 1 >= argc)
                return usage_error("%s needs a value", name);
            value = argv[++i];
        }
        if (strcmp(name, "--target") == 0) {
            ctl.target = value;
        } else if (strcmp(name, "--key") == 0) {
            ctl.key_flag = value;
        } else if (strcmp(name, "--tls-ca") == 0) {
            ctl.tls_ca = value;
        } else if (strcmp(name, "--timeout") == 0) {
            if (!parse_long(value, 1, MAX_TIMEOUT_MS, &ctl.timeout_ms))
                return usage_error("--timeout must be 1..86400000 milliseconds, not '%s'", value);
            ctl.timeout_given = true;
        } else if (strcmp(arg, "--json") == 0) {
            ctl.json = true;
        } else if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            want_help = true;
        } else if (strcmp(arg, "--version") == 0) {
            printf(PROG " %s\n", CG_VERSION);
            return EXIT_OK;
        } else {
            /* A command option: the command decides once it is known. */
            rest_is_positional[rest_count] = false;
            rest[rest_count++] = arg;
        }
    }

    /* The command: the longest row whose words start the leading plain words. */
    const char *words[MAX_WORDS];
    int word_count = 0;
    while (word_count < MAX_WORDS && word_count < rest_count && rest[word_count][0] != '-' &&
           !rest_is_positional[word_count]) {
        words[word_count] = rest[word_count];
        word_count++;
    }
    const struct command *cmd = NULL;
    int used = 0;
    for (size_t i = 0; i < COMMAND_COUNT; i++) {
        int n = 0;
        if (command_matches(&commands[i], words, word_count, &n) && n > used) {
            cmd = &commands[i];
            used = n;
        }
    }
    if (cmd == NULL) {
        if (want_help && word_count > 0) {
            /* "budget --help": the group's commands, when words[0] names a group. */
            size_t len = strlen(words[0]);
            for (size_t i = 0; i < COMMAND_COUNT; i++) {
                if (strncmp(commands[i].words, words[0], len) == 0 &&
                    commands[i].words[len] == ' ') {
                    print_usage(stdout, words[0]);
                    return EXIT_OK;
                }
            }
        }
        if (want_help || rest_count == 0) {
            print_usage(want_help ? stdout : stderr, NULL);
            return want_help ? EXIT_OK : EXIT_USAGE;
        }
        if (word_count > 0) {
            /* "tenant" alone or "tenant frobnicate": list what the group has. */
            bool group = false;
            for (size_t i = 0; i < COMMAND_COUNT; i++) {
                size_t len = strlen(words[0]);
                if (strncmp(commands[i].words, words[0], len) == 0 &&
                    commands[i].words[len] == ' ') {
                    if (!group && word_count > 1)
                        fprintf(stderr, PROG ": unknown command '%s %s'; '%s' has:\n", words[0],
                                words[1], words[0]);
                    else if (!group)
                        fprintf(stderr, PROG ": '%s' needs a subcommand:\n", words[0]);
                    group = true;
                    char synopsis[160];
                    fprintf(stderr, "  " PROG " %s\n",
                            command_synopsis(&commands[i], synopsis, sizeof synopsis));
                }
            }
            if (group)
                return EXIT_USAGE;
        }
        if (rest[0][0] == '-' && !rest_is_positional[0])
            return usage_error("unknown option '%s'", rest[0]);
        return usage_error("unknown command '%s'", rest[0]);
    }
    if (want_help) {
        print_command_usage(stdout, cmd);
        return EXIT_OK;
    }

    /* Pass 2: the command's options, with getopt_long over a table made from the command's
     * row (values as `--opt V` or `--opt=V`, options and arguments in any order, unique
     * prefixes accepted), then its positional arguments in order. What came after `--` in
     * pass 1 stays positional: it goes after a `--` here too. */
    struct cmd_args args = {0};
    struct option longopts[MAX_CMD_OPTIONS + 1];
    int nopts = 0;
    for (; nopts < MAX_CMD_OPTIONS && cmd->options[nopts].name != NULL; nopts++) {
        longopts[nopts] = (struct option){cmd->options[nopts].name + 2,
                                          cmd->options[nopts].value_name != NULL ? required_argument
                                                                                 : no_argument,
                                          NULL, 1000 + nopts};
    }
    longopts[nopts] = (struct option){NULL, 0, NULL, 0};
    char *argv2[MAX_ARGS + 2];
    int argc2 = 0;
    argv2[argc2++] = (char *)cmd->words;
    bool dashes_added = false;
    for (int i = used; i < rest_count; i++) {
        if (rest_is_positional[i] && !dashes_added) {
            argv2[argc2++] = "--";
            dashes_added = true;
        }
        argv2[argc2++] = (char *)rest[i];
    }
    argv2[argc2] = NULL;
    opterr = 0;
    optind = 0; /* GNU: start afresh */
    int opt;
    while ((opt = getopt_long(argc2, argv2, ":", longopts, NULL)) != -1) {
        if (opt >= 1000 && opt < 1000 + nopts) {
            args.option_values[opt - 1000] = optarg != NULL ? optarg : "";
            continue;
        }
        const char *bad = argv2[optind - 1];
        if (opt == ':') {
            rc = usage_error("%s needs a value", bad);
        } else if (optopt >= 1000 && optopt < 1000 + nopts) {
            rc = usage_error("%s takes no value", cmd->options[optopt - 1000].name);
        } else {
            fprintf(stderr, PROG ": %s: unknown or ambiguous option '", cmd->words);
            print_text(stderr, bad);
            fprintf(stderr, "'\n");
            print_command_usage(stderr, cmd);
            rc = EXIT_USAGE;
        }
        return rc;
    }
    for (int i = optind; i < argc2; i++) {
        if (args.positional_count >= cmd->max_positional ||
            args.positional_count >= MAX_POSITIONAL) {
            fprintf(stderr, PROG ": %s: unexpected argument '", cmd->words);
            print_text(stderr, argv2[i]);
            fprintf(stderr, "'\n");
            print_command_usage(stderr, cmd);
            return EXIT_USAGE;
        }
        args.positional[args.positional_count++] = argv2[i];
    }
    if (args.positional_count < cmd->min_positional) {
        fprintf(stderr, PROG ": %s: missing arguments\n", cmd->words);
        print_command_usage(stderr, cmd);
        return EXIT_USAGE;
    }

    switch (cmd->key) {
    case KEY_FLAG_ONLY:
        ctl.key = ctl.key_flag;
        break;
    case KEY_TENANT:
        ctl.key = ctl.key_flag ? ctl.key_flag : env_nonempty("CTXGUARD_KEY");
        break;
    case KEY_ADMIN:
        ctl.key = ctl.key_flag ? ctl.key_flag : env_nonempty("CTXGUARD_ADMIN_KEY");
        if (ctl.key == NULL)
            ctl.key = env_nonempty("CTXGUARD_KEY");
        break;
    case KEY_ANY:
        ctl.key = ctl.key_flag ? ctl.key_flag : env_nonempty("CTXGUARD_KEY");
        if (ctl.key == NULL)
            ctl.key = env_nonempty("CTXGUARD_ADMIN_KEY");
        break;
    }
    /* Without a key the server can only refuse: say which variable to set instead. */
    if (ctl.key == NULL && (cmd->key == KEY_ADMIN || cmd->key == KEY_TENANT)) {
        if (cmd->key == KEY_ADMIN)
            return usage_error("'%s' needs the admin key (the server's admin_key): set "
                               "CTXGUARD_ADMIN_KEY or pass --key",
                               cmd->words);
        return usage_error("'%s' needs a tenant API key (cgk_...): set CTXGUARD_KEY or pass --key",
                           cmd->words);
    }

    /* gRPC's log lines repeat what the status message says; GRPC_VERBOSITY brings them back. */
    if (getenv("GRPC_VERBOSITY") == NULL)
        cg_client_set_grpc_logging(false);
    rc = cmd->run(&ctl, cmd, &args);
    cg_client_free(ctl.client);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, PROG ": cannot write output: %s\n", strerror(errno));
        if (rc == EXIT_OK)
            rc = EXIT_FAIL;
    }
    return rc;
}
