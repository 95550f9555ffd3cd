/* test_models.c - model names to encodings, estimator profiles, windows and dialects. */
#include <criterion/criterion.h>
#include <string.h>

#include "core/models.h"

static struct cg_model_info look(const char *name)
{
    struct cg_model_info m;
    cg_models_lookup(name, &m);
    return m;
}

Test(models, openai_models_map_to_their_encodings, .timeout = 10)
{
    cr_assert_eq(look("gpt-4o").encoding, CG_ENCODING_O200K_BASE);
    cr_assert_eq(look("gpt-4o-mini-2024-07-18").encoding, CG_ENCODING_O200K_BASE);
    cr_assert_eq(look("gpt-4.1-nano").context_window, 1047576);
    cr_assert_eq(look("gpt-5-mini").encoding, CG_ENCODING_O200K_BASE);
    cr_assert_eq(look("o3-mini").encoding, CG_ENCODING_O200K_BASE);
    cr_assert_eq(look("o1-mini").context_window, 128000);
    cr_assert_eq(look("o1").context_window, 200000);
    cr_assert_eq(look("gpt-4").encoding, CG_ENCODING_CL100K_BASE);
    cr_assert_eq(look("gpt-4").context_window, 8192);
    cr_assert_eq(look("gpt-4-0613").context_window, 8192);
    cr_assert_eq(look("gpt-4-turbo-2024-04-09").context_window, 128000);
    cr_assert_eq(look("gpt-3.5-turbo-0125").encoding, CG_ENCODING_CL100K_BASE);
    cr_assert_eq(look("gpt-4o").dialect, CG_DIALECT_OPENAI);
    cr_assert_str_eq(cg_models_encoding_name(look("gpt-4o").encoding), "o200k_base");
}

Test(models, matching_ignores_case_and_routing_prefixes, .timeout = 10)
{
    cr_assert_eq(look("GPT-4O").encoding, CG_ENCODING_O200K_BASE);
    cr_assert_eq(look("openai/gpt-4o").encoding, CG_ENCODING_O200K_BASE);
    struct cg_model_info m = look("us.anthropic.claude-3-7-sonnet-20250219-v1:0");
    cr_assert_eq(m.profile, CG_PROFILE_CLAUDE);
    cr_assert(m.takes_reasoning);
    m = look("meta-llama/Llama-3.1-70B-Instruct");
    cr_assert_eq(m.profile, CG_PROFILE_LLAMA);
    cr_assert_eq(m.context_window, 131072);
    cr_assert_eq(look("o100-something").known, false, "o1 needs a word boundary");
}

Test(models, estimated_families_have_profiles_windows_and_reasoning, .timeout = 10)
{
    struct cg_model_info m = look("claude-3-5-sonnet-20241022");
    cr_assert_eq(m.encoding, CG_ENCODING_NONE);
    cr_assert_eq(m.profile, CG_PROFILE_CLAUDE);
    cr_assert_eq(m.context_window, 200000);
    cr_assert_not(m.takes_reasoning);
    cr_assert_eq(m.dialect, CG_DIALECT_ANTHROPIC);
    cr_assert(look("claude-sonnet-4-5").takes_reasoning);
    cr_assert(look("claude-opus-4-1-20250805").takes_reasoning);
    m = look("gemini-2.5-pro");
    cr_assert_eq(m.profile, CG_PROFILE_GEMINI);
    cr_assert_eq(m.dialect, CG_DIALECT_GOOGLE);
    cr_assert_eq(m.context_window, 1048576);
    cr_assert_eq(look("gemini-1.5-pro-002").context_window, 2097152);
    cr_assert_eq(look("mistral-large-latest").profile, CG_PROFILE_MISTRAL);
    cr_assert_eq(look("codestral-2501").context_window, 262144);
    cr_assert_eq(look("kimi-k2-0711-preview").profile, CG_PROFILE_KIMI);
    cr_assert(look("kimi-k2-thinking").takes_reasoning);
    cr_assert_eq(look("llama3.1:8b").context_window, 131072);
    cr_assert_str_eq(cg_models_profile_name(CG_PROFILE_GEMINI), "gemini");
}

Test(models, unknown_models_get_the_default, .timeout = 10)
{
    const char *names[] = {"my-own-model", "", NULL, "x"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        struct cg_model_info m = look(names[i]);
        cr_assert_not(m.known);
        cr_assert_eq(m.profile, CG_PROFILE_DEFAULT);
        cr_assert_eq(m.encoding, CG_ENCODING_NONE);
        cr_assert_eq(m.context_window, CG_MODELS_DEFAULT_WINDOW);
    }
    char longname[400];
    memset(longname, 'a', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    memcpy(longname, "gpt-4o", 6);
    cr_assert_not(look(longname).known, "names over 200 bytes are not looked up");
}

Test(models, every_table_entry_finds_itself, .timeout = 10)
{
    size_t n;
    const struct cg_model_info *t = cg_models_table(&n);
    cr_assert_gt(n, 30);
    for (size_t i = 0; i < n; i++) {
        struct cg_model_info m = look(t[i].prefix);
        cr_assert_str_eq(m.prefix, t[i].prefix, "%s", t[i].prefix);
        cr_assert_gt(m.context_window, 0);
        cr_assert((m.encoding != CG_ENCODING_NONE) == (m.profile == CG_PROFILE_OPENAI),
                  "%s: exact encodings exactly for OpenAI models", t[i].prefix);
    }
}

Test(models, map_entries_win_and_are_checked)
{
    struct cg_model_map map;
    struct cg_err err;
    cr_assert_eq(cg_models_map_parse(" acme=cl100k_base@9000 ; gpt-4o = claude ;", &map, &err),
                 CG_CONFIG, "spaces around '=' are part of the prefix/target: refused");
    cr_assert_eq(cg_models_map_parse("acme=cl100k_base@9000;gpt-4o=claude;;", &map, &err), CG_OK,
                 "%s", err.msg);
    cr_assert_eq(map.n, 2);
    struct cg_model_info info;
    cg_models_lookup_with(&map, "ACME-large", &info);
    cr_assert_eq(info.encoding, CG_ENCODING_CL100K_BASE);
    cr_assert_eq(info.context_window, 9000);
    cg_models_lookup_with(&map, "gpt-4o-mini", &info);
    cr_assert_eq(info.encoding, CG_ENCODING_NONE);
    cr_assert_eq(info.profile, CG_PROFILE_CLAUDE);
    cr_assert_eq(info.context_window, 128000, "the built-in window of the name stays");
    cg_models_lookup_with(&map, "gpt-4.1", &info);
    cr_assert_eq(info.encoding, CG_ENCODING_O200K_BASE, "the table still answers the rest");
    cg_models_lookup_with(NULL, "acme", &info);
    cr_assert(!info.known);
    const char *bad[] = {"acme",
                         "=claude",
                         "acme=",
                         "acme=nope",
                         "acme=claude@99",
                         "acme=claude@1x00",
                         "acme=claude@1000000000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(cg_models_map_parse(bad[i], &map, &err), CG_CONFIG, "%s", bad[i]);
        cr_assert_eq(map.n, 0);
    }
    cr_assert_eq(cg_models_map_parse(NULL, &map, &err), CG_OK);
    cr_assert_eq(map.n, 0);
}
