/* llm_internal.h - what the files of server/llm share; not for other layers.
 *
 * llm.c (HTTP, the only file with curl), llm_json.c (request and answer bodies, jansson)
 * and llm_breaker.c (the shared breaker behind a mutex).
 */
#ifndef CG_LLM_LLM_INTERNAL_H
#define CG_LLM_LLM_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

#include "core/breaker.h"
#include "llm/llm.h"

/* libcurl's global initialisation, once per process (llm.c): false when it failed.
 * Thread-safe. */
bool cg__llm_curl_ready(void);

/* The chat-completions request body {model, messages, temperature[, max_tokens]} as compact
 * JSON (temperature printed with 4 significant digits; max_tokens only when > 0). NULL
 * with detail (of detail_cap bytes) saying why when a message has no role, is not valid
 * UTF-8, or memory runs out. The caller frees the result with free(). Thread-safe. */
char *cg__llm_request_json(const char *model, double temperature, int max_tokens,
                           const struct cg_llm_message *messages, size_t n, char *detail,
                           size_t detail_cap);

/* Asks the breaker (NULL: no breaker, always allowed) for a ticket. When it refuses, detail
 * says when the next probe may go. Thread-safe. */
bool cg__llm_breaker_acquire(struct cg_llm_breaker *breaker, struct cg_breaker_ticket *ticket,
                             char *detail, size_t detail_cap);

/* Reports a call's outcome: success or failure when counted, otherwise the ticket is given
 * back (the breaker learns nothing). Logs when the state opens or closes, with rid.
 * NULL breaker: nothing. Thread-safe. */
void cg__llm_breaker_report(struct cg_llm_breaker *breaker, struct cg_breaker_ticket ticket,
                            bool counted, bool success, const char *rid);

#endif
