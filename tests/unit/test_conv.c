/* test_conv.c - the conversation model: builders, ownership, caps, copies, image headers. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "core/conv.h"

Test(conv, builds_messages_parts_and_tools_with_empty_strings, .timeout = 10)
{
    struct cg_conv *conv = cg_conv_new(NULL);
    cr_assert_not_null(conv);
    struct cg_err err;
    struct cg_message *m;
    cr_assert_eq(cg_conv_add_message(conv, CG_ROLE_ASSISTANT, &m, &err), CG_OK);
    struct cg_part *p;
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TOOL_CALL, &p, &err), CG_OK);
    cr_assert_str_eq(p->u.tool_call.id.ptr, "", "strings start empty, never NULL");
    cr_assert_eq(cg_conv_str(conv, "call_1", 6, &p->u.tool_call.id, &err), CG_OK);
    cr_assert_eq(cg_conv_str(conv, "a\0b", 3, &p->u.tool_call.arguments, &err), CG_OK);
    cr_assert_eq(p->u.tool_call.arguments.len, 3);
    cr_assert_eq(memcmp(p->u.tool_call.arguments.ptr, "a\0b", 4), 0, "NUL-terminated copy");
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_IMAGE, &p, &err), CG_OK);
    cr_assert_str_eq(p->u.image.url.ptr, "");
    struct cg_tool_def *t;
    cr_assert_eq(cg_conv_add_tool(conv, &t, &err), CG_OK);
    cr_assert_str_eq(t->parameters.ptr, "");
    cr_assert_eq(conv->n_messages, 1);
    cr_assert_eq(conv->messages[0].n_parts, 2);
    cr_assert_eq(cg_conv_part_text_bytes(&conv->messages[0].parts[0]), 3);
    cg_conv_free(conv);
    cg_conv_free(NULL);
}

Test(conv, caps_give_resource_exhausted, .timeout = 10)
{
    struct cg_conv_limits limits = {.max_messages = 3, .max_parts = 2, .max_bytes = 64 << 10};
    struct cg_conv *conv = cg_conv_new(&limits);
    struct cg_err err;
    struct cg_message *m = NULL;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(cg_conv_add_message(conv, CG_ROLE_USER, &m, &err), CG_OK);
    cr_assert_eq(cg_conv_add_message(conv, CG_ROLE_USER, &m, &err), CG_RESOURCE_EXHAUSTED);
    cr_assert(strstr(err.msg, "messages") != NULL, "%s", err.msg);
    m = &conv->messages[2];
    struct cg_part *p;
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, &err), CG_OK);
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, &err), CG_OK);
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, &err), CG_RESOURCE_EXHAUSTED);
    static char big[100 << 10];
    struct cg_str s = {"", 0};
    cr_assert_eq(cg_conv_str(conv, big, sizeof big, &s, &err), CG_RESOURCE_EXHAUSTED);
    cr_assert_eq(s.len, 0, "left unchanged");
    cr_assert_eq(cg_conv_str(conv, big, 1000, &s, &err), CG_OK, "smaller strings still fit");
    cg_conv_free(conv);
}

Test(conv, many_strings_and_messages_stay_valid_as_arrays_grow, .timeout = 30)
{
    struct cg_conv *conv = cg_conv_new(NULL);
    struct cg_err err;
    for (int i = 0; i < 20000; i++) {
        struct cg_message *m;
        struct cg_part *p;
        char text[32];
        int n = snprintf(text, sizeof text, "message %d", i);
        cr_assert_eq(cg_conv_add_message(conv, (cg_role)(1 + i % 5), &m, &err), CG_OK);
        cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, &err), CG_OK);
        cr_assert_eq(cg_conv_str(conv, text, (size_t)n, &p->u.text, &err), CG_OK);
    }
    for (int i = 0; i < 20000; i += 997) {
        char text[32];
        snprintf(text, sizeof text, "message %d", i);
        cr_assert_str_eq(conv->messages[i].parts[0].u.text.ptr, text);
        cr_assert_eq(conv->messages[i].role, (cg_role)(1 + i % 5));
    }
    cg_conv_free(conv);
}

Test(conv, copy_message_is_deep, .timeout = 10)
{
    struct cg_conv *src = cg_conv_new(NULL), *dst = cg_conv_new(NULL);
    struct cg_err err;
    struct cg_message *m;
    struct cg_part *p;
    cr_assert_eq(cg_conv_add_message(src, CG_ROLE_USER, &m, &err), CG_OK);
    m->pinned = true;
    cr_assert_eq(cg_conv_str(src, "ann", 3, &m->name, &err), CG_OK);
    cr_assert_eq(cg_conv_add_part(src, m, CG_PART_TOOL_RESULT, &p, &err), CG_OK);
    cr_assert_eq(cg_conv_str(src, "c1", 2, &p->u.tool_result.tool_call_id, &err), CG_OK);
    cr_assert_eq(cg_conv_str(src, "result", 6, &p->u.tool_result.content, &err), CG_OK);
    p->u.tool_result.is_error = true;
    p->u.tool_result.images = cg_conv_alloc(src, 1, sizeof(struct cg_image));
    p->u.tool_result.n_images = 1;
    p->u.tool_result.images[0] = (struct cg_image){.media_type = {"", 0}, .width = 7};
    cr_assert_eq(cg_conv_str(src, "image/gif", 9, &p->u.tool_result.images[0].media_type, &err),
                 CG_OK);
    p->u.tool_result.images[0].data = p->u.tool_result.images[0].url =
        p->u.tool_result.images[0].detail = (struct cg_str){"", 0};
    cr_assert_eq(cg_conv_copy_message(dst, &src->messages[0], &err), CG_OK);
    /* The copy into the same conversation works even as its array moves. */
    for (int i = 0; i < 40; i++)
        cr_assert_eq(cg_conv_copy_message(src, &src->messages[0], &err), CG_OK);
    cg_conv_free(src);
    const struct cg_message *c = &dst->messages[0];
    cr_assert(c->pinned);
    cr_assert_str_eq(c->name.ptr, "ann");
    cr_assert_str_eq(c->parts[0].u.tool_result.content.ptr, "result");
    cr_assert(c->parts[0].u.tool_result.is_error);
    cr_assert_str_eq(c->parts[0].u.tool_result.images[0].media_type.ptr, "image/gif");
    cr_assert_eq(c->parts[0].u.tool_result.images[0].width, 7);
    cg_conv_free(dst);
}

Test(conv, roles_have_names_and_system_rules, .timeout = 10)
{
    cr_assert_str_eq(cg_conv_role_name(CG_ROLE_DEVELOPER), "developer");
    cr_assert_str_eq(cg_conv_role_name((cg_role)99), "unknown");
    cr_assert(cg_conv_role_is_system(CG_ROLE_DEVELOPER));
    cr_assert(cg_conv_role_is_system(CG_ROLE_SYSTEM));
    cr_assert_not(cg_conv_role_is_system(CG_ROLE_TOOL));
    cr_assert(cg_conv_role_is_valid(5));
    cr_assert_not(cg_conv_role_is_valid(0));
    cr_assert_not(cg_conv_role_is_valid(6));
}

Test(conv, image_headers_give_dimensions, .timeout = 10)
{
    uint32_t w = 0, h = 0;
    const unsigned char png[24] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n', 0, 0, 0,    13,
                                   'I',  'H', 'D', 'R', 0,    0,    0x04, 0x00, 0, 0, 0x02, 0x58};
    cr_assert(cg_conv_image_sniff(png, sizeof png, &w, &h));
    cr_assert_eq(w, 1024);
    cr_assert_eq(h, 600);
    const unsigned char gif[10] = {'G', 'I', 'F', '8', '9', 'a', 0x40, 0x01, 0xF0, 0x00};
    cr_assert(cg_conv_image_sniff(gif, sizeof gif, &w, &h));
    cr_assert_eq(w, 320);
    cr_assert_eq(h, 240);
    /* JPEG: SOI, an APP0 segment, then SOF0 with height 480 and width 640. */
    const unsigned char jpg[] = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x04, 0x00, 0x00, 0xFF,
                                 0xC0, 0x00, 0x11, 0x08, 0x01, 0xE0, 0x02, 0x80, 0x03};
    cr_assert(cg_conv_image_sniff(jpg, sizeof jpg, &w, &h));
    cr_assert_eq(w, 640);
    cr_assert_eq(h, 480);
    unsigned char webp[30] = {'R', 'I', 'F', 'F', 0,   0,   0,   0,
                              'W', 'E', 'B', 'P', 'V', 'P', '8', 'X'};
    webp[24] = 0xFF; /* width - 1 = 255 */
    webp[27] = 0x7F; /* height - 1 = 127 */
    cr_assert(cg_conv_image_sniff(webp, sizeof webp, &w, &h));
    cr_assert_eq(w, 256);
    cr_assert_eq(h, 128);
    w = h = 5;
    cr_assert_not(cg_conv_image_sniff(png, 20, &w, &h), "cut short");
    cr_assert_not(cg_conv_image_sniff((const unsigned char *)"hello", 5, &w, &h));
    const unsigned char bad_jpg[] = {0xFF, 0xD8, 0xFF, 0xE0, 0x00, 0x00};
    cr_assert_not(cg_conv_image_sniff(bad_jpg, sizeof bad_jpg, &w, &h));
    cr_assert_eq(w, 5, "outputs untouched on failure");
}
