/* http.c - the HTTP listener on libmicrohttpd (http.h): the only file that includes
 * <microhttpd.h>.
 *
 * Life of a request. MHD calls on_request several times per request: first when the
 * headers are in (a request object is made), then once per piece of body (kept, up to
 * max_body_bytes: a longer body closes the connection), then with no more body: the route
 * is found and its handler runs. The answer (cg_http_respond) is stored in the request; if
 * it is there when the handler returns it is queued at once, otherwise the connection is
 * suspended and the answer, from whichever thread gives it, resumes it, whereupon MHD calls
 * on_request again and the answer is queued. A lock orders the two sides. on_completed
 * frees the request when MHD is done with the connection's request.
 */
#include "transport/http.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/crypto.h"
#include "base/health.h"
#include "base/log.h"
#include "base/metrics.h"

#define DEFAULT_MAX_CONNECTIONS 64
#define DEFAULT_IDLE_TIMEOUT_S 30
#define DEFAULT_MAX_BODY (64 * 1024)
/* Per connection: the request line, the headers and MHD's own buffers. A longer request
 * line or more headers than fit is answered 414/431 by MHD itself. */
#define CONNECTION_MEMORY (32 * 1024)
#define PEM_MAX (1u << 20)
#define BUILTIN_ROUTES 3
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct cg_http {
    struct MHD_Daemon *daemon;
    int port;
    size_t max_body;
    struct cg_metrics *metrics;
    const struct cg_health *health;
    struct cg_http_route *routes; /* the built-in ones, then the caller's */
    size_t nroutes;
    char *tls_cert, *tls_key; /* PEM text, kept while the daemon runs (MHD borrows it) */
};

struct cg_http_request {
    struct cg_http *http;
    struct MHD_Connection *conn;
    const char *path; /* MHD's, valid for the request */
    unsigned method;
    size_t body_bytes;
    char *body; /* what came, NUL-terminated (NULL: none) */
    bool dispatched;

    pthread_mutex_t lock; /* the fields below: the answer may come from another thread */
    bool suspended;
    bool answered;
    struct MHD_Response *response; /* NULL with answered: the answer could not be made */
    unsigned status;
};

/* ---------------------------------------------------------------- answers --------- */

static unsigned method_bit(const char *method)
{
    if (strcmp(method, MHD_HTTP_METHOD_GET) == 0)
        return CG_HTTP_GET;
    if (strcmp(method, MHD_HTTP_METHOD_HEAD) == 0)
        return CG_HTTP_HEAD;
    if (strcmp(method, MHD_HTTP_METHOD_POST) == 0)
        return CG_HTTP_POST;
    return CG_HTTP_OTHER;
}

/* Stores the answer r (NULL: it could not be made) in req and resumes the connection when
 * the handler had returned meanwhile. */
static cg_status answer(struct cg_http_request *req, int status, struct MHD_Response *r,
                        const char *content_type, const char *const *headers)
{
    if (r != NULL) {
        if (content_type != NULL)
            MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
        MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
        MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
        for (size_t i = 0; headers != NULL && headers[i] != NULL && headers[i + 1] != NULL; i += 2)
            MHD_add_response_header(r, headers[i], headers[i + 1]);
    }
    pthread_mutex_lock(&req->lock);
    req->response = r;
    req->status = (unsigned)status;
    req->answered = true;
    bool resume = req->suspended;
    req->suspended = false;
    struct MHD_Connection *conn = req->conn;
    pthread_mutex_unlock(&req->lock);
    /* Suspended: MHD cannot finish the request before this resume, so conn is valid. */
    if (resume)
        MHD_resume_connection(conn);
    return r == NULL ? CG_NOMEM : CG_OK;
}

cg_status cg_http_respond(struct cg_http_request *req, int status, const char *content_type,
                          char *body, size_t len)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(len, body != NULL ? body : "", MHD_RESPMEM_MUST_FREE);
    if (body == NULL && r != NULL) {
        /* Nothing to free: an empty answer. */
        MHD_destroy_response(r);
        r = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
    }
    if (r == NULL)
        free(body);
    return answer(req, status, r, content_type, NULL);
}

cg_status cg_http_respond_static(struct cg_http_request *req, int status, const char *content_type,
                                 const void *body, size_t len, const char *const *headers)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, (void *)(body != NULL ? body : ""), MHD_RESPMEM_PERSISTENT);
    return answer(req, status, r, content_type, headers);
}

/* ---------------------------------------------------------------- streams -------- */

#define STREAM_BLOCK (16 * 1024) /* what the producer may write at a time */

struct cg_http_stream {
    cg_http_stream_read_cb read;
    cg_http_stream_done_cb done;
    void *ctx;
    pthread_mutex_t lock;        /* the fields below: wakes come from other threads */
    struct MHD_Connection *conn; /* set when answered; valid while the response is */
    bool suspended;              /* waiting for a wake */
    bool woken;                  /* a wake came while the producer ran: read again */
};

struct cg_http_stream *cg_http_stream_new(cg_http_stream_read_cb read, cg_http_stream_done_cb done,
                                          void *ctx)
{
    struct cg_http_stream *s = calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->read = read;
    s->done = done;
    s->ctx = ctx;
    pthread_mutex_init(&s->lock, NULL);
    return s;
}

/* Whether the client closed its side (or the connection broke): a sleeping connection is
 * not watched by MHD, so each wake looks (a peek that takes nothing; bytes of a pipelined
 * request are not an end). */
static bool peer_gone(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (info == NULL)
        return false;
    char c;
    ssize_t n = recv(info->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* MHD's content reader: the producer's bytes; with nothing to send now the connection is
 * suspended (MHD would call again at once) until cg_http_stream_wake. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct cg_http_stream *s = cls;
    if (peer_gone(s->conn))
        return MHD_CONTENT_READER_END_WITH_ERROR; /* done runs: its slot is free at once */
    long n = s->read(s->ctx, buf, max);
    if (n > 0)
        return (ssize_t)n;
    if (n < 0)
        return MHD_CONTENT_READER_END_OF_STREAM;
    pthread_mutex_lock(&s->lock);
    if (s->woken) {
        s->woken = false; /* something came meanwhile: MHD calls again */
    } else {
        s->suspended = true;
        MHD_suspend_connection(s->conn);
    }
    pthread_mutex_unlock(&s->lock);
    return 0;
}

static void stream_free(void *cls)
{
    struct cg_http_stream *s = cls;
    s->done(s->ctx);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void cg_http_stream_wake(struct cg_http_stream *s)
{
    pthread_mutex_lock(&s->lock);
    bool resume = s->suspended;
    s->suspended = false;
    s->woken = !resume;
    struct MHD_Connection *conn = s->conn;
    pthread_mutex_unlock(&s->lock);
    /* Suspended: MHD cannot finish the connection before this resume, so conn is valid. */
    if (resume)
        MHD_resume_connection(conn);
}

cg_status cg_http_respond_stream(struct cg_http_request *req, int status, const char *content_type,
                                 const char *const *headers, struct cg_http_stream *s)
{
    pthread_mutex_lock(&s->lock);
    s->conn = req->conn;
    pthread_mutex_unlock(&s->lock);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, STREAM_BLOCK,
                                                               stream_read, s, stream_free);
    if (r == NULL)
        stream_free(s);
    return answer(req, status, r, content_type, headers);
}

cg_status cg_http_respond_text(struct cg_http_request *req, int status, const char *text)
{
    size_t len = strlen(text);
    char *copy = malloc(len + 1);
    if (copy != NULL)
        memcpy(copy, text, len + 1);
    return cg_http_respond(req, status, "text/plain; charset=utf-8", copy, copy != NULL ? len : 0);
}

const char *cg_http_request_path(const struct cg_http_request *req)
{
    return req->path;
}

unsigned cg_http_request_method(const struct cg_http_request *req)
{
    return req->method;
}

const char *cg_http_request_header(struct cg_http_request *req, const char *name)
{
    return MHD_lookup_connection_value(req->conn, MHD_HEADER_KIND, name);
}

const char *cg_http_request_body(const struct cg_http_request *req, size_t *len)
{
    *len = req->body_bytes;
    return req->body;
}

struct args_walk {
    cg_http_arg_cb cb;
    void *ctx;
    bool stopped;
};

static enum MHD_Result walk_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value)
{
    (void)kind;
    struct args_walk *w = cls;
    if (!w->cb(w->ctx, key, value != NULL ? value : "")) {
        w->stopped = true;
        return MHD_NO;
    }
    return MHD_YES;
}

bool cg_http_request_args(struct cg_http_request *req, cg_http_arg_cb cb, void *ctx)
{
    struct args_walk w = {cb, ctx, false};
    MHD_get_connection_values(req->conn, MHD_GET_ARGUMENT_KIND, walk_arg, &w);
    return !w.stopped;
}

/* ---------------------------------------------------------------- built-in routes - */

static void healthz(struct cg_http_request *req, void *ctx)
{
    (void)ctx;
    cg_http_respond_text(req, MHD_HTTP_OK, "ok\n");
}

static void readyz(struct cg_http_request *req, void *ctx)
{
    const struct cg_http *http = ctx;
    if (http->health != NULL && cg_health_is_serving(http->health))
        cg_http_respond_text(req, MHD_HTTP_OK, "ready\n");
    else
        cg_http_respond_text(req, MHD_HTTP_SERVICE_UNAVAILABLE,
                             "not ready: PostgreSQL unreachable, or shutting down\n");
}

static void metrics(struct cg_http_request *req, void *ctx)
{
    struct cg_http *http = ctx;
    char *text = NULL;
    size_t len = 0;
    struct cg_err err;
    cg_err_clear(&err);
    if (http->metrics == NULL) {
        cg_http_respond_text(req, MHD_HTTP_NOT_FOUND, "no metrics\n");
        return;
    }
    if (cg_metrics_render(http->metrics, &text, &len, &err) != CG_OK) {
        cg_log(CG_LOG_WARN, "http", NULL, "cannot render the metrics: %s", cg_err_text(&err));
        cg_http_respond_text(req, MHD_HTTP_INTERNAL_SERVER_ERROR, "cannot render the metrics\n");
        return;
    }
    cg_http_respond(req, MHD_HTTP_OK, METRICS_CONTENT_TYPE, text, len);
}

/* ---------------------------------------------------------------- dispatch -------- */

static const struct cg_http_route *find_route(const struct cg_http *http, const char *path)
{
    for (size_t i = 0; i < http->nroutes; i++) {
        const struct cg_http_route *r = &http->routes[i];
        size_t n = strlen(r->path);
        bool prefix = n > 0 && r->path[n - 1] == '/';
        if (prefix ? strncmp(path, r->path, n) == 0 : strcmp(path, r->path) == 0)
            return r;
    }
    return NULL;
}

/* The Allow header of a route: its methods, as names. */
static void allow_header(unsigned methods, char *out, size_t cap)
{
    snprintf(out, cap, "%s%s%s", methods & CG_HTTP_GET ? "GET, " : "",
             methods & CG_HTTP_HEAD ? "HEAD, " : "", methods & CG_HTTP_POST ? "POST, " : "");
    size_t n = strlen(out);
    if (n >= 2)
        out[n - 2] = '\0';
}

/* Finds the route and runs its handler, or answers 404/405 itself. */
static void dispatch(struct cg_http *http, struct cg_http_request *req)
{
    req->dispatched = true;
    const struct cg_http_route *route = find_route(http, req->path);
    if (route == NULL) {
        cg_http_respond_text(req, MHD_HTTP_NOT_FOUND, "not found\n");
        return;
    }
    if ((route->methods & req->method) == 0) {
        char allow[32];
        allow_header(route->methods, allow, sizeof allow);
        cg_http_respond_text(req, MHD_HTTP_METHOD_NOT_ALLOWED, "method not allowed\n");
        pthread_mutex_lock(&req->lock);
        if (req->response != NULL)
            MHD_add_response_header(req->response, MHD_HTTP_HEADER_ALLOW, allow);
        pthread_mutex_unlock(&req->lock);
        return;
    }
    route->handler(req, route->ctx);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    struct cg_http *http = cls;
    struct cg_http_request *req = *con_cls;
    if (req == NULL) {
        /* The headers are in: make the request, answer on a later call. */
        if ((req = calloc(1, sizeof *req)) == NULL)
            return MHD_NO;
        req->http = http;
        req->conn = conn;
        req->path = url;
        req->method = method_bit(method);
        pthread_mutex_init(&req->lock, NULL);
        *con_cls = req;
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        /* Kept for the route, up to max_body; a longer one ends the connection. */
        size_t n = *upload_data_size;
        *upload_data_size = 0;
        if (req->body_bytes + n > http->max_body)
            return MHD_NO;
        char *grown = realloc(req->body, req->body_bytes + n + 1);
        if (grown == NULL)
            return MHD_NO;
        memcpy(grown + req->body_bytes, upload_data, n);
        req->body_bytes += n;
        grown[req->body_bytes] = '\0';
        req->body = grown;
        return MHD_YES;
    }
    if (!req->dispatched)
        dispatch(http, req);
    pthread_mutex_lock(&req->lock);
    if (!req->answered) {
        /* The handler answers later, from another thread: resumed by cg_http_respond. */
        req->suspended = true;
        MHD_suspend_connection(conn);
        pthread_mutex_unlock(&req->lock);
        return MHD_YES;
    }
    struct MHD_Response *r = req->response;
    req->response = NULL;
    pthread_mutex_unlock(&req->lock);
    if (r == NULL)
        return MHD_NO; /* the answer could not be made: close the connection */
    enum MHD_Result rc = MHD_queue_response(conn, req->status, r);
    MHD_destroy_response(r); /* MHD holds its own reference until sent */
    return rc;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)conn;
    (void)toe;
    struct cg_http_request *req = *con_cls;
    if (req == NULL)
        return;
    if (req->response != NULL)
        MHD_destroy_response(req->response);
    pthread_mutex_destroy(&req->lock);
    free(req->body);
    free(req);
    *con_cls = NULL;
}

static void on_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    cg_log(CG_LOG_WARN, "http", NULL, "libmicrohttpd: %s", line);
}

/* ---------------------------------------------------------------- process metrics - */

/* The standard process_* families (as Prometheus' client libraries name them), read from
 * /proc and getrusage when scraped. NaN when a figure cannot be read: left out. */

static double process_cpu_seconds(void *ctx)
{
    (void)ctx;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0)
        return NAN;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Field `index` (0: size, 1: resident) of /proc/self/statm, in bytes. */
static double statm_bytes(int index)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return NAN;
    unsigned long long pages[2] = {0, 0};
    int got = fscanf(f, "%llu %llu", &pages[0], &pages[1]);
    fclose(f);
    if (got != 2)
        return NAN;
    return (double)pages[index] * (double)sysconf(_SC_PAGESIZE);
}

static double process_resident_bytes(void *ctx)
{
    (void)ctx;
    return statm_bytes(1);
}

static double process_virtual_bytes(void *ctx)
{
    (void)ctx;
    return statm_bytes(0);
}

static double process_open_fds(void *ctx)
{
    (void)ctx;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return NAN;
    double n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        if (e->d_name[0] != '.')
            n++;
    closedir(d);
    return n - 1; /* the directory's own descriptor */
}

static double process_max_fds(void *ctx)
{
    (void)ctx;
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
        return NAN;
    return (double)rl.rlim_cur;
}

/* The boot time (btime of /proc/stat) plus the process's start (field 22 of
 * /proc/self/stat, in clock ticks since boot). */
static double process_start_time(void *ctx)
{
    (void)ctx;
    char buf[1024];
    FILE *f = fopen("/proc/self/stat", "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
    unsigned long long ticks = 0;
    for (int field = 2; p != NULL && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (p == NULL || sscanf(p + 1, "%llu", &ticks) != 1)
        return NAN;
    unsigned long long btime = 0;
    bool found = false;
    if ((f = fopen("/proc/stat", "r")) != NULL) {
        char line[256];
        while (!found && fgets(line, sizeof line, f) != NULL)
            found = sscanf(line, "btime %llu", &btime) == 1;
        fclose(f);
    }
    long hz = sysconf(_SC_CLK_TCK);
    if (!found || hz <= 0)
        return NAN;
    return (double)btime + (double)ticks / (double)hz;
}

static cg_status register_process_metrics(struct cg_metrics *m, struct cg_err *err)
{
    static const struct {
        const char *name, *help;
        cg_metric_type type;
        cg_metrics_read_cb read;
    } rows[] = {
        {"process_cpu_seconds_total", "Total user and system CPU time spent in seconds.",
         CG_METRIC_COUNTER, process_cpu_seconds},
        {"process_resident_memory_bytes", "Resident memory size in bytes.", CG_METRIC_GAUGE,
         process_resident_bytes},
        {"process_virtual_memory_bytes", "Virtual memory size in bytes.", CG_METRIC_GAUGE,
         process_virtual_bytes},
        {"process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
         CG_METRIC_GAUGE, process_start_time},
        {"process_open_fds", "Number of open file descriptors.", CG_METRIC_GAUGE, process_open_fds},
        {"process_max_fds", "Maximum number of open file descriptors.", CG_METRIC_GAUGE,
         process_max_fds},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++) {
        cg_status st = cg_metrics_callback(m, rows[i].name, rows[i].help, rows[i].type,
                                           rows[i].read, NULL, err);
        if (st != CG_OK)
            return st;
    }
    return CG_OK;
}

/* ---------------------------------------------------------------- start/stop ------ */

/* host:port or [v6]:port resolved to a socket address (numeric port; a host name is
 * looked up once, here). */
static cg_status resolve_listen(const char *listen, struct sockaddr_storage *addr,
                                struct cg_err *err)
{
    char host[256];
    const char *colon = strrchr(listen, ':');
    size_t hlen = colon ? (size_t)(colon - listen) : 0;
    const char *h = listen;
    if (hlen >= 2 && listen[0] == '[' && listen[hlen - 1] == ']') {
        h++;
        hlen -= 2;
    }
    if (colon == NULL || hlen >= sizeof host)
        return cg_err_set(err, CG_CONFIG,
                          "config key 'http_listen' (CTXGUARD_HTTP_LISTEN): '%.60s' is not "
                          "host:port",
                          listen);
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(hlen > 0 ? host : NULL, colon + 1, &hints, &res);
    if (rc != 0 || res == NULL)
        return cg_err_set(err, CG_CONFIG,
                          "config key 'http_listen' (CTXGUARD_HTTP_LISTEN): cannot resolve "
                          "'%.60s': %s",
                          listen, gai_strerror(rc));
    memset(addr, 0, sizeof *addr);
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    return CG_OK;
}

static char *read_pem(const char *path, const char *key, struct cg_err *err)
{
    FILE *f = fopen(path, "rb");
    char *buf = f ? malloc(PEM_MAX + 1) : NULL;
    size_t n = buf ? fread(buf, 1, PEM_MAX + 1, f) : 0;
    if (f)
        fclose(f);
    if (buf == NULL || n == 0 || n > PEM_MAX) {
        free(buf);
        cg_err_set(err, CG_CONFIG, "config key '%s': cannot read '%.80s' (or empty, or over 1 MiB)",
                   key, path);
        return NULL;
    }
    buf[n] = '\0';
    return buf;
}

/* Reads and checks the TLS pair into *cert and *key (the caller frees both). */
static cg_status load_tls(const struct cg_http_opts *opts, char **cert, char **key,
                          struct cg_err *err)
{
    if (!MHD_is_feature_supported(MHD_FEATURE_TLS))
        return cg_err_set(err, CG_CONFIG,
                          "config key 'http_tls_cert': this libmicrohttpd has no TLS support");
    if ((*cert = read_pem(opts->tls_cert, "http_tls_cert", err)) == NULL ||
        (*key = read_pem(opts->tls_key, "http_tls_key", err)) == NULL)
        return CG_CONFIG;
    struct cg_err inner;
    cg_err_clear(&inner);
    if (cg_tls_check(*cert, *key, NULL, &inner) != CG_OK) {
        /* Its message names the gRPC keys: say which of ours instead. */
        const char *why = strstr(inner.msg, ": ");
        return cg_err_set(err, CG_CONFIG, "config keys 'http_tls_cert'/'http_tls_key': %s",
                          why ? why + 2 : inner.msg);
    }
    return CG_OK;
}

/* The route table: the built-in routes, then the caller's. */
static cg_status make_routes(struct cg_http *http, const struct cg_http_opts *opts,
                             struct cg_err *err)
{
    http->nroutes = BUILTIN_ROUTES + opts->nroutes;
    http->routes = calloc(http->nroutes, sizeof *http->routes);
    if (http->routes == NULL)
        return cg_err_set(err, CG_NOMEM, "out of memory");
    unsigned read_only = CG_HTTP_GET | CG_HTTP_HEAD;
    http->routes[0] = (struct cg_http_route){"/healthz", read_only, healthz, http};
    http->routes[1] = (struct cg_http_route){"/readyz", read_only, readyz, http};
    http->routes[2] = (struct cg_http_route){"/metrics", read_only, metrics, http};
    for (size_t i = 0; i < opts->nroutes; i++)
        http->routes[BUILTIN_ROUTES + i] = opts->routes[i];
    return CG_OK;
}

static struct MHD_Daemon *start_daemon(struct cg_http *http, const struct cg_http_opts *opts,
                                       const struct sockaddr_storage *addr, char *cert, char *key)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    if (addr->ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    struct MHD_OptionItem tls[] = {{MHD_OPTION_HTTPS_MEM_KEY, 0, key},
                                   {MHD_OPTION_HTTPS_MEM_CERT, 0, cert},
                                   {MHD_OPTION_END, 0, NULL}};
    if (cert != NULL)
        flags |= MHD_USE_TLS;
    unsigned max_conn = opts->max_connections ? opts->max_connections : DEFAULT_MAX_CONNECTIONS;
    unsigned idle = opts->idle_timeout_s ? opts->idle_timeout_s : DEFAULT_IDLE_TIMEOUT_S;
    return MHD_start_daemon(flags, 0, NULL, NULL, on_request, http, MHD_OPTION_SOCK_ADDR,
                            (const struct sockaddr *)addr, MHD_OPTION_CONNECTION_LIMIT, max_conn,
                            MHD_OPTION_CONNECTION_TIMEOUT, idle, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
                            (size_t)CONNECTION_MEMORY, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
                            (void *)NULL, MHD_OPTION_EXTERNAL_LOGGER, on_log, (void *)NULL,
                            MHD_OPTION_ARRAY, cert != NULL ? tls : &tls[2], MHD_OPTION_END);
}

struct cg_http *cg_http_start(const struct cg_http_opts *opts, struct cg_err *err)
{
    struct cg_http *http = calloc(1, sizeof *http);
    struct sockaddr_storage addr;
    bool tls = opts->tls_cert != NULL && opts->tls_cert[0] != '\0';
    cg_status st = http == NULL ? cg_err_set(err, CG_NOMEM, "out of memory") : CG_OK;
    if (st == CG_OK) {
        http->max_body = opts->max_body_bytes ? opts->max_body_bytes : DEFAULT_MAX_BODY;
        http->metrics = opts->metrics;
        http->health = opts->health;
        st = make_routes(http, opts, err);
    }
    if (st == CG_OK && opts->metrics != NULL)
        st = register_process_metrics(opts->metrics, err);
    if (st == CG_OK)
        st = resolve_listen(opts->listen, &addr, err);
    if (st == CG_OK && tls)
        st = load_tls(opts, &http->tls_cert, &http->tls_key, err);
    if (st == CG_OK &&
        (http->daemon = start_daemon(http, opts, &addr, http->tls_cert, http->tls_key)) == NULL)
        st = cg_err_set(err, CG_CONFIG,
                        "config key 'http_listen' (CTXGUARD_HTTP_LISTEN): cannot listen on "
                        "'%.80s' (is another process listening on that port?)",
                        opts->listen);
    if (st != CG_OK) {
        cg_http_stop(http);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(http->daemon, MHD_DAEMON_INFO_BIND_PORT);
    http->port = info != NULL ? info->port : 0;
    return http;
}

int cg_http_port(const struct cg_http *http)
{
    return http->port;
}

void cg_http_stop(struct cg_http *http)
{
    if (http == NULL)
        return;
    if (http->daemon != NULL)
        MHD_stop_daemon(http->daemon);
    free(http->routes);
    free(http->tls_cert);
    if (http->tls_key != NULL)
        explicit_bzero(http->tls_key, strlen(http->tls_key)); /* a private key */
    free(http->tls_key);
    free(http);
}
