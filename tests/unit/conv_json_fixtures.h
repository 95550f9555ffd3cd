/* conv_json_fixtures.h - what the JSON conversion tests share (test_conv_json*.c): reading
 * a file, a fixture of tests/data/conv/, a document that must read, and a conversation written
 * and parsed back. Each includes it once; failures are Criterion assertions. */
#ifndef CG_TESTS_CONV_JSON_FIXTURES_H
#define CG_TESTS_CONV_JSON_FIXTURES_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/conv_json.h"

/* The whole file at path (NUL-terminated, *len bytes), or NULL when it cannot be opened. */
static inline char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *b = malloc((size_t)n + 1);
    cr_assert_not_null(b);
    cr_assert_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    b[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return b;
}

/* tests/data/conv/NAME, found next to this file. */
static inline char *fixture(const char *name, size_t *len)
{
    char path[1024];
    const char *slash = strrchr(__FILE__, '/');
    snprintf(path, sizeof path, "%.*s/../data/conv/%s", (int)(slash - __FILE__), __FILE__, name);
    char *b = slurp(path, len);
    cr_assert_not_null(b, "fixture %s", path);
    return b;
}

/* json[0..len) read in format f, which must succeed. */
static inline struct cg_conv *read_ok(cg_conv_json_format f, const char *json, size_t len)
{
    struct cg_conv *conv = NULL;
    struct cg_err err = {0};
    cg_status st = cg_conv_json_read(f, json, len, NULL, &conv, &err);
    cr_assert_eq(st, CG_OK, "read: %s (%.200s)", err.msg, json);
    cr_assert_not_null(conv);
    return conv;
}

/* conv written in format f (which must succeed) and parsed back as a JSON value. */
static inline json_t *write_json(const struct cg_conv *conv, cg_conv_json_format f)
{
    char *out;
    size_t len;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_json_write(conv, f, &out, &len, &err), CG_OK, "write: %s", err.msg);
    cr_assert_eq(strlen(out), len);
    json_t *v = json_loadb(out, len, JSON_ALLOW_NUL | JSON_DECODE_ANY, NULL);
    cr_assert_not_null(v, "the writer's output parses");
    free(out);
    return v;
}

/* Reads json[0..len) in format f and expects failure with code and a message containing want. */
static inline void expect_read_error(cg_conv_json_format f, const char *json, size_t len,
                                     cg_status code, const char *want)
{
    struct cg_conv *conv = (struct cg_conv *)1;
    struct cg_err err = {0};
    cg_status st = cg_conv_json_read(f, json, len, NULL, &conv, &err);
    cr_assert_eq(st, code, "status %d (%s) for %.80s", st, err.msg, json);
    cr_assert_null(conv);
    cr_assert(strstr(err.msg, want) != NULL, "error '%s' should contain '%s'", err.msg, want);
}

/* Writes conv in format f and expects INVALID_ARGUMENT with a message containing want. */
static inline void expect_write_error(cg_conv_json_format f, const struct cg_conv *conv,
                                      const char *want)
{
    char *out = (char *)1;
    size_t len;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_json_write(conv, f, &out, &len, &err), CG_INVALID_ARGUMENT, "%s", err.msg);
    cr_assert_null(out);
    cr_assert(strstr(err.msg, want) != NULL, "error '%s' should contain '%s'", err.msg, want);
}

/* Whether a directory entry is a conversation file (*.json). */
static inline bool is_json_name(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && strcmp(name + n - 5, ".json") == 0;
}

/* Inserts a USER message of text at position at (the way Compress puts a summary). */
static inline void insert_user_text(struct cg_conv *conv, size_t at, const char *text)
{
    struct cg_message *m;
    struct cg_part *p;
    struct cg_err err = {0};
    cr_assert_eq(cg_conv_add_message(conv, CG_ROLE_USER, &m, &err), CG_OK);
    cr_assert_eq(cg_conv_add_part(conv, m, CG_PART_TEXT, &p, &err), CG_OK);
    cr_assert_eq(cg_conv_str(conv, text, strlen(text), &p->u.text, &err), CG_OK);
    struct cg_message moved = conv->messages[conv->n_messages - 1];
    memmove(&conv->messages[at + 1], &conv->messages[at],
            (conv->n_messages - 1 - at) * sizeof conv->messages[0]);
    conv->messages[at] = moved;
}

/* Calls fn with the path of every *.json file of dir; returns how many there were. */
static inline int each_conversation(const char *dir, void (*fn)(const char *path))
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "no conversations at %s", dir);
    struct dirent *e;
    int done = 0;
    while ((e = readdir(d)) != NULL) {
        if (!is_json_name(e->d_name))
            continue;
        char path[2048];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        fn(path);
        done++;
    }
    closedir(d);
    return done;
}

#endif
