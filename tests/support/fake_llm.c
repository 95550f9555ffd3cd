/* fake_llm.c - starting, reading and stopping tests/support/fake_llm.py. */
#include "fake_llm.h"

#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PYTHON "/usr/bin/python3"
#define SCRIPT CG_SOURCE_DIR "/tests/support/fake_llm.py"
#define POLL_STEP_MS 10

static void pause_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
        ;
}

static int read_port(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    int port = 0;
    if (fscanf(f, "%d", &port) != 1)
        port = 0;
    fclose(f);
    return port;
}

void cg_fake_llm_start(struct cg_fake_llm *f)
{
    memset(f, 0, sizeof *f);
    snprintf(f->dir, sizeof f->dir, "/tmp/cg_fake_llm_XXXXXX");
    cr_assert_not_null(mkdtemp(f->dir), "mkdtemp: %s", strerror(errno));
    snprintf(f->port_file, sizeof f->port_file, "%s/port", f->dir);
    snprintf(f->log_file, sizeof f->log_file, "%s/requests.jsonl", f->dir);
    char err_file[128];
    snprintf(err_file, sizeof err_file, "%s/stderr", f->dir);

    pid_t parent = getpid();
    pid_t pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        /* The server must not outlive a test that crashed. */
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(1);
        int null_fd = open("/dev/null", O_RDWR);
        int err_fd = open(err_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (null_fd >= 0) {
            dup2(null_fd, 0);
            dup2(null_fd, 1);
        }
        if (err_fd >= 0)
            dup2(err_fd, 2);
        execl(PYTHON, PYTHON, SCRIPT, "--port-file", f->port_file, "--log-file", f->log_file,
              (char *)NULL);
        _exit(127);
    }
    f->pid = pid;
    /* Readiness: the port file appears, complete, once the socket is bound and listening. */
    for (int waited = 0; waited < 15000; waited += POLL_STEP_MS) {
        f->port = read_port(f->port_file);
        if (f->port > 0)
            break;
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            f->pid = 0;
            cr_assert_fail("fake_llm.py exited before listening (see %s)", err_file);
        }
        pause_ms(POLL_STEP_MS);
    }
    cr_assert_gt(f->port, 0, "fake_llm.py wrote no port within 15 s");
    snprintf(f->base_url, sizeof f->base_url, "http://127.0.0.1:%d/v1", f->port);
}

void cg_fake_llm_stop(struct cg_fake_llm *f)
{
    if (f->pid > 0) {
        kill(f->pid, SIGTERM);
        int status;
        bool gone = false;
        for (int waited = 0; waited < 5000 && !gone; waited += POLL_STEP_MS) {
            if (waitpid(f->pid, &status, WNOHANG) == f->pid)
                gone = true;
            else
                pause_ms(POLL_STEP_MS);
        }
        if (!gone) {
            kill(f->pid, SIGKILL);
            waitpid(f->pid, &status, 0);
        }
        f->pid = 0;
    }
    if (f->dir[0] != '\0') {
        const char *names[] = {"port", "port.tmp", "requests.jsonl", "stderr"};
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
            char path[160];
            snprintf(path, sizeof path, "%s/%s", f->dir, names[i]);
            unlink(path);
        }
        rmdir(f->dir);
        f->dir[0] = '\0';
    }
}

json_t *cg_fake_llm_requests(const struct cg_fake_llm *f)
{
    json_t *all = json_array();
    cr_assert_not_null(all);
    FILE *in = fopen(f->log_file, "r");
    if (in == NULL)
        return all; /* no request yet */
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, in)) > 0) {
        /* The server writes whole lines; a line without its newline is still being written
         * and is left for the next read. */
        if (line[len - 1] != '\n')
            break;
        json_error_t jerr;
        json_t *entry = json_loadb(line, (size_t)len, 0, &jerr);
        cr_assert_not_null(entry, "bad request log line: %s", jerr.text);
        json_array_append_new(all, entry);
    }
    free(line);
    fclose(in);
    return all;
}

size_t cg_fake_llm_count(const struct cg_fake_llm *f)
{
    json_t *all = cg_fake_llm_requests(f);
    size_t n = json_array_size(all);
    json_decref(all);
    return n;
}

size_t cg_fake_llm_wait_count(const struct cg_fake_llm *f, size_t n, int timeout_ms)
{
    size_t have = cg_fake_llm_count(f);
    for (int waited = 0; have < n && waited < timeout_ms; waited += POLL_STEP_MS) {
        pause_ms(POLL_STEP_MS);
        have = cg_fake_llm_count(f);
    }
    return have;
}

void cg_fake_llm_control(const struct cg_fake_llm *f, const char *behaviour)
{
    char body[512], request[1024];
    int blen = snprintf(body, sizeof body, "{\"behaviour\": \"%s\"}", behaviour);
    cr_assert(blen > 0 && (size_t)blen < sizeof body && strchr(behaviour, '"') == NULL);
    int rlen = snprintf(request, sizeof request,
                        "POST /control HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                        "application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
                        blen, body);
    cr_assert(rlen > 0 && (size_t)rlen < sizeof request);

    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert(fd >= 0);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)f->port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0, "connect: %s",
                 strerror(errno));
    cr_assert_eq(write(fd, request, (size_t)rlen), rlen);
    char reply[256] = {0};
    size_t got = 0;
    ssize_t n;
    while (got < sizeof reply - 1 && (n = read(fd, reply + got, sizeof reply - 1 - got)) > 0)
        got += (size_t)n;
    close(fd);
    cr_assert(strncmp(reply, "HTTP/1.1 200", 12) == 0 || strncmp(reply, "HTTP/1.0 200", 12) == 0,
              "control answered: %.60s", reply);
}
