/* fake_llm.h - tests/support/fake_llm.py as a child process: a real OpenAI-compatible HTTP
 * server on a loopback port of its own, whose behaviour the test picks with the model name
 * (see fake_llm.py) or cg_fake_llm_control, and which records every request it received.
 *
 * Each server lives in its own temporary directory (port file, request log, stderr) removed
 * by cg_fake_llm_stop. The child gets SIGTERM if the test process dies. The helpers fail the
 * running Criterion test on any error; use them from the test's main thread.
 */
#ifndef CG_TESTS_FAKE_LLM_H
#define CG_TESTS_FAKE_LLM_H

#include <stddef.h>
#include <sys/types.h>

#include <jansson.h>

struct cg_fake_llm {
    pid_t pid;
    int port;
    char dir[64];
    char port_file[128];
    char log_file[128];
    char base_url[64]; /* "http://127.0.0.1:PORT/v1" */
};

/* Starts the server and waits (bounded) until it has written its port. */
void cg_fake_llm_start(struct cg_fake_llm *f);

/* Stops the server (SIGTERM, SIGKILL after 5 s) and removes its directory. Idempotent. */
void cg_fake_llm_stop(struct cg_fake_llm *f);

/* The requests received so far, oldest first, as a JSON array of the objects described in
 * fake_llm.py. The caller owns the reference (json_decref). */
json_t *cg_fake_llm_requests(const struct cg_fake_llm *f);

/* How many chat requests the server has received so far. */
size_t cg_fake_llm_count(const struct cg_fake_llm *f);

/* Waits up to timeout_ms for at least n requests to be recorded (for requests whose client
 * gave up before the server answered); returns the count then. */
size_t cg_fake_llm_wait_count(const struct cg_fake_llm *f, size_t n, int timeout_ms);

/* Sets the behaviour of every following request whatever its model ("" clears it), through
 * POST /control. */
void cg_fake_llm_control(const struct cg_fake_llm *f, const char *behaviour);

#endif
