/* webhook.c - the notifier's HTTP client (webhook.h). */
#include "llm/webhook.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "llm/llm_internal.h"

#define RESPONSE_MAX (64 * 1024) /* an answer's body is read up to this and dropped */

struct cg_webhook {
    CURL *curl;
    struct cg_webhook_opts opts;
    char user_agent[64];
    char errbuf[CURL_ERROR_SIZE];
    size_t received;
    bool refused; /* the last connection went to a refused address */
};

static size_t drop_body(char *data, size_t size, size_t n, void *ctx)
{
    (void)data;
    struct cg_webhook *w = ctx;
    size_t len = size * n;
    w->received += len;
    return w->received > RESPONSE_MAX ? 0 : len; /* 0 ends the transfer: enough was read */
}

/* Whether an address is one of the server's own networks. */
static bool private_address(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET) {
        uint32_t a = ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr);
        return (a >> 24) == 0 || (a >> 24) == 10 || (a >> 24) == 127 ||
               (a >> 20) == (172u << 4 | 1) || (a >> 16) == (192u << 8 | 168) ||
               (a >> 16) == (169u << 8 | 254) || (a >> 22) == (100u << 2 | 1) || /* 100.64/10 */
               a == 0xFFFFFFFFu;
    }
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_LOOPBACK(a) || IN6_IS_ADDR_UNSPECIFIED(a) || IN6_IS_ADDR_LINKLOCAL(a) ||
            IN6_IS_ADDR_SITELOCAL(a) || (a->s6_addr[0] & 0xFE) == 0xFC)
            return true;
        if (IN6_IS_ADDR_V4MAPPED(a)) {
            struct sockaddr_in v4 = {.sin_family = AF_INET};
            memcpy(&v4.sin_addr, &a->s6_addr[12], 4);
            return private_address((const struct sockaddr *)&v4);
        }
        return false;
    }
    return true; /* anything else (unix sockets): not a webhook */
}

static curl_socket_t open_socket(void *ctx, curlsocktype purpose, struct curl_sockaddr *addr)
{
    struct cg_webhook *w = ctx;
    if (purpose != CURLSOCKTYPE_IPCXN || (!w->opts.allow_private && private_address(&addr->addr))) {
        w->refused = true;
        return CURL_SOCKET_BAD;
    }
    return socket(addr->family, addr->socktype, addr->protocol);
}

static int close_socket(void *ctx, curl_socket_t fd)
{
    (void)ctx;
    return close(fd);
}

struct cg_webhook *cg_webhook_new(const struct cg_webhook_opts *opts)
{
    if (!cg__llm_curl_ready())
        return NULL;
    struct cg_webhook *w = calloc(1, sizeof *w);
    if (w == NULL)
        return NULL;
    w->opts = *opts;
    snprintf(w->user_agent, sizeof w->user_agent, "%s",
             opts->user_agent ? opts->user_agent : "ctxguard-webhook");
    w->opts.user_agent = w->user_agent;
    if ((w->curl = curl_easy_init()) == NULL) {
        free(w);
        return NULL;
    }
    CURL *c = w->curl;
    CURLcode rc = CURLE_OK;
    rc |= curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    rc |= curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    rc |= curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    /* Straight to the receiver, whatever the environment's *_proxy variables say: the
     * private-address check (open_socket) must see the receiver's address, not a proxy's. */
    rc |= curl_easy_setopt(c, CURLOPT_PROXY, "");
    rc |= curl_easy_setopt(c, CURLOPT_USERAGENT, w->user_agent);
    rc |= curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, drop_body);
    rc |= curl_easy_setopt(c, CURLOPT_WRITEDATA, w);
    rc |= curl_easy_setopt(c, CURLOPT_ERRORBUFFER, w->errbuf);
    rc |= curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_socket);
    rc |= curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, w);
    rc |= curl_easy_setopt(c, CURLOPT_CLOSESOCKETFUNCTION, close_socket);
    rc |= curl_easy_setopt(c, CURLOPT_CLOSESOCKETDATA, w);
    rc |= curl_easy_setopt(c, CURLOPT_POST, 1L);
    rc |= curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)opts->timeout_ms);
    rc |= curl_easy_setopt(
        c, CURLOPT_CONNECTTIMEOUT_MS,
        (long)(opts->connect_timeout_ms > 0 ? opts->connect_timeout_ms : opts->timeout_ms));
    if (rc != CURLE_OK) {
        cg_webhook_free(w);
        return NULL;
    }
    return w;
}

void cg_webhook_free(struct cg_webhook *w)
{
    if (w == NULL)
        return;
    if (w->curl != NULL)
        curl_easy_cleanup(w->curl);
    free(w);
}

bool cg_webhook_post(struct cg_webhook *w, const char *url, const char *body, size_t len,
                     const char *const *headers, int n, struct cg_webhook_result *out)
{
    memset(out, 0, sizeof *out);
    /* "Expect:" off: a body over 1 KB would otherwise wait for a 100 Continue that many
     * receivers never send. */
    struct curl_slist *list = curl_slist_append(NULL, "Content-Type: application/json");
    if (list != NULL) {
        struct curl_slist *next = curl_slist_append(list, "Expect:");
        if (next == NULL)
            curl_slist_free_all(list);
        list = next;
    }
    for (int i = 0; list != NULL && i < n; i++) {
        struct curl_slist *next = curl_slist_append(list, headers[i]);
        if (next == NULL) {
            curl_slist_free_all(list);
            list = NULL;
            break;
        }
        list = next;
    }
    if (list == NULL) {
        snprintf(out->error, sizeof out->error, "out of memory");
        return false;
    }
    w->errbuf[0] = '\0';
    w->received = 0;
    w->refused = false;
    CURL *c = w->curl;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, list);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, NULL);
    curl_slist_free_all(list);
    out->status = (int)status;
    /* A body cut short by RESPONSE_MAX still brought its status. */
    if (rc == CURLE_WRITE_ERROR && status != 0)
        rc = CURLE_OK;
    if (rc != CURLE_OK) {
        if (w->refused)
            snprintf(out->error, sizeof out->error,
                     "refused: the URL's host is a loopback, private or link-local address "
                     "(notify_allow_private_addresses)");
        else
            snprintf(out->error, sizeof out->error, "%s",
                     w->errbuf[0] ? w->errbuf : curl_easy_strerror(rc));
        return false;
    }
    if (status < 200 || status > 299) {
        snprintf(out->error, sizeof out->error, "HTTP %ld", status);
        return false;
    }
    return true;
}
