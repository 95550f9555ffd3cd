/* test_redact_conv.c - the redacted copy of a conversation (core/redact_conv): every text a
 * summarizer reads is redacted with the session's labels, ids and names are kept, images are
 * left out, the source is untouched, and a cap is an error naming the conversation. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json.h"
#include "core/redact_conv.h"

static struct cg_conv *read_conv(const char *json)
{
    struct cg_conv *conv = NULL;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_json_read(CG_CONV_JSON_OPENAI, json, strlen(json), NULL, &conv, &err),
                 CG_OK, "%s", err.msg);
    return conv;
}

static char *str(const struct cg_str *s)
{
    return strndup(s->ptr != NULL ? s->ptr : "", s->len);
}

static void assert_text(const struct cg_str *s, const char *want)
{
    char *got = str(s);
    cr_assert_str_eq(got, want);
    free(got);
}

static const char *CHAT =
    "{\"messages\": ["
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"Mail jane@example.com "
    "about it\"}, {\"type\": \"image_url\", \"image_url\": {\"url\": "
    "\"https://example.com/a.png\"}}]},"
    "{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"call_1\", "
    "\"type\": \"function\", \"function\": {\"name\": \"send_mail\", \"arguments\": "
    "\"{\\\"to\\\": \\\"jane@example.com\\\"}\"}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"sent; call +1 415 555 "
    "0100 if it bounces\"},"
    "{\"role\": \"user\", \"content\": \"and copy bob@example.com\"}]}";

struct fixture {
    struct cg_redact_options options;
    struct cg_redact_session *session;
    struct cg_redact_buf buf;
    struct cg_redact_counts counts;
};

static void fixture_init(struct fixture *f, size_t cap)
{
    memset(f, 0, sizeof *f);
    cg_redact_options_init(&f->options);
    f->session = malloc(sizeof *f->session);
    cr_assert_not_null(f->session);
    cg_redact_session_init(f->session, 1, 2);
    cg_redact_buf_init(&f->buf, cap);
}

/* The redacted copy of src with f's options, which must succeed. */
static struct cg_conv *redact_ok(struct fixture *f, const struct cg_conv *src)
{
    struct cg_conv *out = NULL;
    struct cg_err err = {0};
    cr_assert_eq(cg_redact_conv(&f->options, f->session, &f->buf, &f->counts, src, &out, &err),
                 CG_OK, "%s", err.msg);
    return out;
}

static void fixture_cleanup(struct fixture *f)
{
    cg_redact_buf_cleanup(&f->buf);
    free(f->session);
}

Test(redact_conv, every_text_is_redacted_and_labels_hold_across_messages, .timeout = 10)
{
    struct cg_conv *src = read_conv(CHAT);
    struct fixture f;
    fixture_init(&f, 1 << 20);
    struct cg_conv *out = redact_ok(&f, src);
    cr_assert_eq(out->n_messages, src->n_messages);

    cr_assert_eq(out->messages[0].n_parts, 1, "the image is left out");
    assert_text(&out->messages[0].parts[0].u.text, "Mail <EMAIL_1> about it");

    const struct cg_part *call = &out->messages[1].parts[0];
    cr_assert_eq(call->kind, CG_PART_TOOL_CALL);
    char *id = str(&call->u.tool_call.id), *name = str(&call->u.tool_call.name);
    char *args = str(&call->u.tool_call.arguments);
    cr_assert_str_eq(id, "call_1", "ids are kept");
    cr_assert_str_eq(name, "send_mail", "names are kept");
    cr_assert_not_null(strstr(args, "<EMAIL_1>"), "the same value, the same label: %s", args);
    cr_assert_null(strstr(args, "jane@"), "%s", args);
    free(id);
    free(name);
    free(args);

    const struct cg_part *result = &out->messages[2].parts[0];
    cr_assert_eq(result->kind, CG_PART_TOOL_RESULT);
    assert_text(&result->u.tool_result.content, "sent; call <PHONE_1> if it bounces");
    assert_text(&out->messages[3].parts[0].u.text, "and copy <EMAIL_2>");

    cr_assert_eq(f.counts.by_type[CG_PII_EMAIL], 3);
    cr_assert_eq(f.counts.by_type[CG_PII_PHONE], 1);
    /* The source is untouched. */
    assert_text(&src->messages[0].parts[0].u.text, "Mail jane@example.com about it");
    cr_assert_eq(src->messages[0].n_parts, 2);

    cg_conv_free(out);
    fixture_cleanup(&f);
    cg_conv_free(src);
}

Test(redact_conv, a_disabled_type_is_kept, .timeout = 10)
{
    struct cg_conv *src = read_conv(CHAT);
    struct fixture f;
    fixture_init(&f, 1 << 20);
    f.options.enabled = CG_PII_BIT(CG_PII_PHONE);
    struct cg_conv *out = redact_ok(&f, src);
    assert_text(&out->messages[0].parts[0].u.text, "Mail jane@example.com about it");
    cr_assert_eq(f.counts.by_type[CG_PII_EMAIL], 0);
    cr_assert_eq(f.counts.by_type[CG_PII_PHONE], 1);
    cg_conv_free(out);
    fixture_cleanup(&f);
    cg_conv_free(src);
}

Test(redact_conv, a_text_over_the_cap_is_an_error_naming_the_conversation, .timeout = 10)
{
    struct cg_conv *src = read_conv(CHAT);
    struct fixture f;
    fixture_init(&f, 8); /* smaller than any of the texts */
    struct cg_conv *out = (struct cg_conv *)1;
    struct cg_err err = {0};
    cg_status st = cg_redact_conv(&f.options, f.session, &f.buf, &f.counts, src, &out, &err);
    cr_assert_neq(st, CG_OK);
    cr_assert_null(out);
    cr_assert_not_null(strstr(err.msg, "field 'conversation'"), "%s", err.msg);
    fixture_cleanup(&f);
    cg_conv_free(src);
}
