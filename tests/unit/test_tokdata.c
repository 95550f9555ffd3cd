/* test_tokdata.c - loading rank data files: a good file loads and builds; missing, corrupt,
 * truncated and mislabelled files are refused with the path and the reason. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/crypto.h"
#include "base/tokdata.h"
#include "core/tok.h"
#include "test_tok_vocab.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/cg-tokdata-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_expect_eq(system(cmd), 0);
}

/* Writes dir/<file>.cgtok: a generated vocabulary labelled name, with a correct checksum,
 * then applies the damage (an offset to flip, or a length to cut to; -1 for none). */
static void write_file(const char *file, const char *name, long flip_at, long cut_to)
{
    const char *merges[] = {"ab", "abc", NULL};
    struct vocab v = vocab_make(name, merges);
    cg_sha256(v.data + CG_TOK_HEADER_SIZE, v.len - CG_TOK_HEADER_SIZE, v.data + 36);
    if (flip_at >= 0)
        v.data[flip_at] ^= 0x01;
    size_t len = cut_to >= 0 ? (size_t)cut_to : v.len;
    char path[128];
    snprintf(path, sizeof path, "%s/%s.cgtok", dir, file);
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(v.data, 1, len, f), len);
    fclose(f);
    free(v.data);
}

TestSuite(tokdata, .init = setup, .fini = teardown, .timeout = 10);

Test(tokdata, a_good_file_loads_and_builds_an_encoding)
{
    write_file("o200k_base", "o200k_base", -1, -1);
    struct cg_tokdata data;
    struct cg_err err = {0};
    cr_assert_eq(cg_tokdata_load(dir, "o200k_base", &data, &err), CG_OK, "%s", err.msg);
    cr_expect_str_eq(data.name, "o200k_base");
    struct cg_tok_encoding *enc = NULL;
    cr_assert_eq(cg_tok_encoding_new(data.data, data.len, &enc, &err), CG_OK, "%s", err.msg);
    cg_tokdata_cleanup(&data);
    cr_expect_null(data.data);
    cg_tokdata_cleanup(&data);
    cr_expect_eq(cg_tok_count(enc, "abc abcd", 8, false), 1 + 3, "[abc] then [ ab][c][d]... ");
    cg_tok_encoding_free(enc);
    /* The default is share/ctxguard beside the directory this test program runs from. */
    char def[4096], exe[4096];
    cr_assert_eq(cg_tokdata_default_dir(def, sizeof def, &err), CG_OK, "%s", err.msg);
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    cr_assert_gt(n, 0);
    exe[n] = '\0';
    *strrchr(exe, '/') = '\0'; /* .../build/tests */
    *strrchr(exe, '/') = '\0'; /* .../build */
    char want[4200];
    snprintf(want, sizeof want, "%s/share/ctxguard", exe);
    cr_expect_str_eq(def, want);
    char small[8];
    cr_expect_eq(cg_tokdata_default_dir(small, sizeof small, &err), CG_CONFIG);
    cr_expect_str_eq(small, "", "a path that does not fit leaves the buffer empty");
}

static void expect_refused(const char *encoding, const char *needle)
{
    struct cg_tokdata data;
    struct cg_err err = {0};
    cr_expect_eq(cg_tokdata_load(dir, encoding, &data, &err), CG_CONFIG);
    cr_expect_null(data.data);
    cr_expect(strstr(err.msg, needle) != NULL, "'%s' should say '%s'", err.msg, needle);
}

Test(tokdata, missing_file_names_the_path)
{
    expect_refused("cl100k_base", "cl100k_base.cgtok");
    expect_refused("cl100k_base", "No such file");
    expect_refused("../etc/passwd", "invalid encoding name");
}

Test(tokdata, a_flipped_bit_is_a_checksum_mismatch)
{
    write_file("cl100k_base", "cl100k_base", CG_TOK_HEADER_SIZE + 300, -1);
    expect_refused("cl100k_base", "checksum");
}

Test(tokdata, truncated_and_foreign_files_are_refused)
{
    write_file("cl100k_base", "cl100k_base", -1, 1000);
    expect_refused("cl100k_base", "truncated");
    write_file("o200k_base", "o200k_base", 0, -1);
    expect_refused("o200k_base", "magic");
    write_file("p50k_base", "cl100k_base", -1, -1);
    expect_refused("p50k_base", "holds encoding 'cl100k_base'");
    write_file("tiny", "tiny", -1, 10);
    expect_refused("tiny", "size");
}
