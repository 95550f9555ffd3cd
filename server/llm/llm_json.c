/* llm_json.c - the JSON of chat completions: the request body built, the answer read. With
 * jansson; no I/O. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "llm/llm_internal.h"

char *cg__llm_request_json(const char *model, double temperature, int max_tokens,
                           const struct cg_llm_message *messages, size_t n, char *detail,
                           size_t detail_cap)
{
    char *text = NULL;
    json_t *root = json_object();
    json_t *list = json_array();
    if (root == NULL || list == NULL ||
        json_object_set_new(root, "model", json_string(model)) != 0 ||
        json_object_set(root, "messages", list) != 0)
        goto nomem;
    for (size_t i = 0; i < n; i++) {
        const struct cg_llm_message *m = &messages[i];
        if (m->role == NULL || (m->content == NULL && m->content_len > 0)) {
            snprintf(detail, detail_cap, "message %zu has no role or content", i);
            goto out;
        }
        json_t *role = json_string(m->role);
        json_t *content = json_stringn(m->content ? m->content : "", m->content_len);
        if (role == NULL || content == NULL) {
            json_decref(role);
            json_decref(content);
            snprintf(detail, detail_cap, "message %zu is not valid UTF-8", i);
            goto out;
        }
        /* The _new setters take their value even when they fail, so nothing leaks. */
        json_t *msg = json_object();
        int bad = json_object_set_new(msg, "role", role);
        bad |= json_object_set_new(msg, "content", content);
        bad |= json_array_append_new(list, msg);
        if (msg == NULL || bad)
            goto nomem;
    }
    if (json_object_set_new(root, "temperature", json_real(temperature)) != 0 ||
        (max_tokens > 0 && json_object_set_new(root, "max_tokens", json_integer(max_tokens)) != 0))
        goto nomem;
    /* Four significant digits print 0.2 as 0.2, not 0.20000000000000001. */
    text = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(4));
    if (text == NULL)
        goto nomem;
    goto out;
nomem:
    snprintf(detail, detail_cap, "out of memory building the request");
out:
    json_decref(list);
    json_decref(root);
    return text;
}

static bool all_space(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\n' && s[i] != '\r')
            return false;
    return true;
}

cg_llm_result cg_llm_parse_answer(const char *body, size_t len, struct cg_llm_reply *reply)
{
    cg_llm_result result = CG_LLM_INVALID_OUTPUT;
    json_error_t jerr;
    json_t *root = json_loadb(body ? body : "", body ? len : 0, 0, &jerr);
    if (root == NULL || !json_is_object(root)) {
        snprintf(reply->detail, sizeof reply->detail, "the answer is not a JSON object");
        goto out;
    }
    json_t *choices = json_object_get(root, "choices");
    if (!json_is_array(choices) || json_array_size(choices) == 0) {
        snprintf(reply->detail, sizeof reply->detail, "the answer has no choices");
        goto out;
    }
    json_t *choice = json_array_get(choices, 0);
    json_t *message = json_is_object(choice) ? json_object_get(choice, "message") : NULL;
    json_t *content = json_is_object(message) ? json_object_get(message, "content") : NULL;
    if (!json_is_string(content)) {
        snprintf(reply->detail, sizeof reply->detail, "the answer has no message content");
        goto out;
    }
    const char *text = json_string_value(content);
    size_t text_len = json_string_length(content);
    if (text_len == 0 || all_space(text, text_len)) {
        snprintf(reply->detail, sizeof reply->detail, "the answer's content is empty");
        goto out;
    }
    /* json_loadb rejects \u0000 by default, so text has no NUL before len. */
    reply->content = malloc(text_len + 1);
    if (reply->content == NULL) {
        snprintf(reply->detail, sizeof reply->detail, "out of memory reading the answer");
        result = CG_LLM_ERROR;
        goto out;
    }
    memcpy(reply->content, text, text_len);
    reply->content[text_len] = '\0';
    reply->content_len = text_len;

    json_t *finish = json_object_get(choice, "finish_reason");
    if (json_is_string(finish))
        snprintf(reply->finish_reason, sizeof reply->finish_reason, "%s",
                 json_string_value(finish));
    json_t *usage = json_object_get(root, "usage");
    if (json_is_object(usage)) {
        json_t *p = json_object_get(usage, "prompt_tokens");
        json_t *c = json_object_get(usage, "completion_tokens");
        if (json_is_integer(p) && json_integer_value(p) >= 0)
            reply->prompt_tokens = json_integer_value(p);
        if (json_is_integer(c) && json_integer_value(c) >= 0)
            reply->completion_tokens = json_integer_value(c);
    }
    result = CG_LLM_OK;
out:
    json_decref(root);
    return result;
}
