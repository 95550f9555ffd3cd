/* fuzz_json_fast.c - the fast JSON reader against jansson: for every input, with and without
 * JSON_ALLOW_NUL, the fast reader either gives up or returns exactly jansson's value (same
 * compact dump, keys in the same order), and its check agrees with it; for valid UTF-8 input,
 * told so (CG_JSON_FAST_UTF8_CHECKED), it returns the same value. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/json_fast.h"
#include "core/utf8.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *text = (const char *)data;
    for (int i = 0; i < 2; i++) {
        size_t flags = JSON_DECODE_ANY | (i ? JSON_ALLOW_NUL : 0);
        json_t *fast = cg_json_fast_load(text, size, flags, 0);
        int checked = cg_json_fast_check(text, size, flags, false, 0);
        if ((checked == 1) != (fast != NULL))
            __builtin_trap();
        json_t *slow = json_loadb(text, size, flags, NULL);
        if (checked == -1 && slow != NULL) /* a sure no must be jansson's no */
            __builtin_trap();
        if (fast == NULL) {
            json_decref(slow);
            continue;
        }
        if (slow == NULL)
            __builtin_trap();
        char *a = json_dumps(slow, JSON_COMPACT | JSON_ENCODE_ANY);
        char *b = json_dumps(fast, JSON_COMPACT | JSON_ENCODE_ANY);
        if (a == NULL || b == NULL || strcmp(a, b) != 0 || !json_equal(slow, fast))
            __builtin_trap();
        if (cg_utf8_valid(text, size, NULL)) { /* told it is UTF-8: the same value */
            json_t *told = cg_json_fast_load(text, size, flags | CG_JSON_FAST_UTF8_CHECKED, 0);
            if (told == NULL || !json_equal(told, fast))
                __builtin_trap();
            json_decref(told);
        }
        free(a);
        free(b);
        json_decref(slow);
        json_decref(fast);
    }
    return 0;
}
