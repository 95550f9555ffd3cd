/* fuzz_llm_answer.c - what comes back from an LLM endpoint: the chat-completions body
 * parser of llm/ and the Retry-After / retry-after-ms header parsers of core/backoff. */
#include <stdint.h>
#include <string.h>

#include "core/backoff.h"
#include "llm/llm.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct cg_llm_reply reply;
    memset(&reply, 0, sizeof reply);
    reply.prompt_tokens = -1;
    reply.completion_tokens = -1;
    cg_llm_result r = cg_llm_parse_answer((const char *)data, size, &reply);
    if (r == CG_LLM_OK) {
        /* An accepted answer is NUL-terminated, of the stated length, and not empty. */
        if (reply.content == NULL || reply.content_len == 0 ||
            strlen(reply.content) != reply.content_len)
            __builtin_trap();
    } else if (reply.content != NULL) {
        __builtin_trap();
    }
    if (reply.prompt_tokens < -1 || reply.completion_tokens < -1)
        __builtin_trap();
    cg_llm_reply_cleanup(&reply);

    int64_t ms;
    if (cg_backoff_parse_retry_after((const char *)data, size, 1700000000000LL, &ms) &&
        (ms < 0 || ms > CG_BACKOFF_DELAY_MAX_MS))
        __builtin_trap();
    if (cg_backoff_parse_retry_after_ms((const char *)data, size, &ms) &&
        (ms < 0 || ms > CG_BACKOFF_DELAY_MAX_MS))
        __builtin_trap();
    return 0;
}
