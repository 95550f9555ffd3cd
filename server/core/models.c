/* models.c - the model table. Windows are the providers' published input+output context
 * sizes; where a family has variants the smallest common one is used so that compression
 * errs early rather than late. */
#include "core/models.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#define O200K CG_ENCODING_O200K_BASE
#define CL100K CG_ENCODING_CL100K_BASE
#define NONE CG_ENCODING_NONE
#define OAI CG_DIALECT_OPENAI
#define ANT CG_DIALECT_ANTHROPIC
#define GOO CG_DIALECT_GOOGLE
#define GEN CG_DIALECT_GENERIC

/* prefix, encoding, profile, window, dialect, takes reasoning, known */
static const struct cg_model_info table[] = {
    /* OpenAI, o200k_base. Chat Completions takes no reasoning items back. */
    {"gpt-5", O200K, CG_PROFILE_OPENAI, 400000, OAI, false, true},
    {"gpt-4.1", O200K, CG_PROFILE_OPENAI, 1047576, OAI, false, true},
    {"gpt-4.5", O200K, CG_PROFILE_OPENAI, 128000, OAI, false, true},
    {"gpt-4o", O200K, CG_PROFILE_OPENAI, 128000, OAI, false, true},
    {"chatgpt-4o", O200K, CG_PROFILE_OPENAI, 128000, OAI, false, true},
    {"gpt-oss", O200K, CG_PROFILE_OPENAI, 131072, OAI, false, true},
    {"o1", O200K, CG_PROFILE_OPENAI, 200000, OAI, false, true},
    {"o1-mini", O200K, CG_PROFILE_OPENAI, 128000, OAI, false, true},
    {"o1-preview", O200K, CG_PROFILE_OPENAI, 128000, OAI, false, true},
    {"o3", O200K, CG_PROFILE_OPENAI, 200000, OAI, false, true},
    {"o4", O200K, CG_PROFILE_OPENAI, 200000, OAI, false, true},
    /* OpenAI, cl100k_base. */
    {"gpt-4", CL100K, CG_PROFILE_OPENAI, 8192, OAI, false, true},
    {"gpt-4-32k", CL100K, CG_PROFILE_OPENAI, 32768, OAI, false, true},
    {"gpt-4-turbo", CL100K, CG_PROFILE_OPENAI, 128000, OAI, false, true},
    {"gpt-4-1106", CL100K, CG_PROFILE_OPENAI, 128000, OAI, false, true},
    {"gpt-4-0125", CL100K, CG_PROFILE_OPENAI, 128000, OAI, false, true},
    {"gpt-4-vision", CL100K, CG_PROFILE_OPENAI, 128000, OAI, false, true},
    {"gpt-3.5-turbo", CL100K, CG_PROFILE_OPENAI, 16385, OAI, false, true},
    {"gpt-3.5-turbo-instruct", CL100K, CG_PROFILE_OPENAI, 4096, OAI, false, true},
    {"text-embedding-3", CL100K, CG_PROFILE_OPENAI, 8191, OAI, false, true},
    {"text-embedding-ada-002", CL100K, CG_PROFILE_OPENAI, 8191, OAI, false, true},
    /* Anthropic: thinking blocks go back to models with extended thinking. */
    {"claude", NONE, CG_PROFILE_CLAUDE, 200000, ANT, false, true},
    {"claude-2", NONE, CG_PROFILE_CLAUDE, 100000, ANT, false, true},
    {"claude-2.1", NONE, CG_PROFILE_CLAUDE, 200000, ANT, false, true},
    {"claude-instant", NONE, CG_PROFILE_CLAUDE, 100000, ANT, false, true},
    {"claude-3-7", NONE, CG_PROFILE_CLAUDE, 200000, ANT, true, true},
    {"claude-opus-4", NONE, CG_PROFILE_CLAUDE, 200000, ANT, true, true},
    {"claude-sonnet-4", NONE, CG_PROFILE_CLAUDE, 200000, ANT, true, true},
    {"claude-haiku-4", NONE, CG_PROFILE_CLAUDE, 200000, ANT, true, true},
    {"claude-4", NONE, CG_PROFILE_CLAUDE, 200000, ANT, true, true},
    /* Google. */
    {"gemini", NONE, CG_PROFILE_GEMINI, 1048576, GOO, false, true},
    {"gemini-1.0", NONE, CG_PROFILE_GEMINI, 32760, GOO, false, true},
    {"gemini-pro", NONE, CG_PROFILE_GEMINI, 32760, GOO, false, true},
    {"gemini-1.5-pro", NONE, CG_PROFILE_GEMINI, 2097152, GOO, false, true},
    {"gemma", NONE, CG_PROFILE_GEMINI, 8192, GEN, false, true},
    {"gemma-3", NONE, CG_PROFILE_GEMINI, 131072, GEN, false, true},
    /* Meta. */
    {"llama", NONE, CG_PROFILE_LLAMA, 8192, GEN, false, true},
    {"llama-3.1", NONE, CG_PROFILE_LLAMA, 131072, GEN, false, true},
    {"llama-3.2", NONE, CG_PROFILE_LLAMA, 131072, GEN, false, true},
    {"llama-3.3", NONE, CG_PROFILE_LLAMA, 131072, GEN, false, true},
    {"llama-4", NONE, CG_PROFILE_LLAMA, 1048576, GEN, false, true},
    {"llama3", NONE, CG_PROFILE_LLAMA, 8192, GEN, false, true},
    {"llama3.1", NONE, CG_PROFILE_LLAMA, 131072, GEN, false, true},
    {"llama3.2", NONE, CG_PROFILE_LLAMA, 131072, GEN, false, true},
    {"llama3.3", NONE, CG_PROFILE_LLAMA, 131072, GEN, false, true},
    {"llama4", NONE, CG_PROFILE_LLAMA, 1048576, GEN, false, true},
    /* Mistral. */
    {"mistral", NONE, CG_PROFILE_MISTRAL, 32768, OAI, false, true},
    {"mistral-large", NONE, CG_PROFILE_MISTRAL, 131072, OAI, false, true},
    {"mistral-medium", NONE, CG_PROFILE_MISTRAL, 131072, OAI, false, true},
    {"mistral-small", NONE, CG_PROFILE_MISTRAL, 131072, OAI, false, true},
    {"open-mistral-nemo", NONE, CG_PROFILE_MISTRAL, 131072, OAI, false, true},
    {"ministral", NONE, CG_PROFILE_MISTRAL, 131072, OAI, false, true},
    {"mixtral", NONE, CG_PROFILE_MISTRAL, 32768, OAI, false, true},
    {"codestral", NONE, CG_PROFILE_MISTRAL, 262144, OAI, false, true},
    {"pixtral", NONE, CG_PROFILE_MISTRAL, 131072, OAI, false, true},
    {"magistral", NONE, CG_PROFILE_MISTRAL, 40960, OAI, false, true},
    /* Moonshot. The thinking model wants its reasoning_content back. */
    {"kimi", NONE, CG_PROFILE_KIMI, 131072, OAI, false, true},
    {"kimi-k2", NONE, CG_PROFILE_KIMI, 131072, OAI, false, true},
    {"kimi-k2-0905", NONE, CG_PROFILE_KIMI, 262144, OAI, false, true},
    {"kimi-k2-thinking", NONE, CG_PROFILE_KIMI, 262144, OAI, true, true},
    {"moonshot-v1-8k", NONE, CG_PROFILE_KIMI, 8192, OAI, false, true},
    {"moonshot-v1-32k", NONE, CG_PROFILE_KIMI, 32768, OAI, false, true},
    {"moonshot-v1-128k", NONE, CG_PROFILE_KIMI, 131072, OAI, false, true},
    /* Others reached through OpenAI-compatible APIs, estimated with the default profile. */
    {"deepseek", NONE, CG_PROFILE_DEFAULT, 131072, OAI, false, true},
    {"qwen", NONE, CG_PROFILE_DEFAULT, 131072, OAI, false, true},
};

static const struct cg_model_info unknown = {
    "", NONE, CG_PROFILE_DEFAULT, CG_MODELS_DEFAULT_WINDOW, CG_DIALECT_UNSPECIFIED, false, false};

/* Skips routing prefixes: everything up to the last '/', and a cloud region or vendor prefix
 * ending in '.' before a known family (`us.anthropic.claude-...`). */
static const char *base_name(const char *model)
{
    const char *slash = strrchr(model, '/');
    if (slash != NULL)
        model = slash + 1;
    static const char *const vendors[] = {"anthropic.", "meta.", "mistral.", "google.", "openai."};
    for (size_t i = 0; i < sizeof vendors / sizeof vendors[0]; i++) {
        const char *at = strcasestr(model, vendors[i]);
        if (at != NULL && at - model <= 8)
            return at + strlen(vendors[i]);
    }
    return model;
}

/* The longest prefix of entries[0..count) that name starts with (on a word boundary for
 * short ones), into *out; false when none. */
static bool match(const char *name, const struct cg_model_info *entries, size_t count,
                  struct cg_model_info *out)
{
    size_t best = 0;
    for (size_t i = 0; i < count; i++) {
        size_t n = strlen(entries[i].prefix);
        if (n > best && strncasecmp(name, entries[i].prefix, n) == 0) {
            /* "o1" must not match "o100-foo" mid-token: the prefix ends the name or a word. */
            char next = name[n];
            bool boundary = next == '\0' || next == '-' || next == '.' || next == ':' ||
                            next == '@' || next == '_' || entries[i].prefix[n - 1] == '-';
            if (!boundary && n <= 3)
                continue;
            *out = entries[i];
            best = n;
        }
    }
    return best > 0;
}

void cg_models_lookup(const char *model, struct cg_model_info *out)
{
    cg_models_lookup_with(NULL, model, out);
}

void cg_models_lookup_with(const struct cg_model_map *map, const char *model,
                           struct cg_model_info *out)
{
    *out = unknown;
    if (model == NULL || model[0] == '\0' || strlen(model) > CG_MODELS_NAME_MAX)
        return;
    const char *name = base_name(model);
    if (map != NULL && match(name, map->entries, (size_t)map->n, out))
        return;
    (void)match(name, table, sizeof table / sizeof table[0], out);
}

static cg_status map_error(struct cg_model_map *out, struct cg_err *err, const char *fmt,
                           const char *entry, size_t len)
{
    out->n = 0;
    if (err != NULL) {
        err->code = CG_CONFIG;
        snprintf(err->msg, sizeof err->msg, fmt, (int)(len > 60 ? 60 : len), entry);
    }
    return CG_CONFIG;
}

cg_status cg_models_map_parse(const char *text, struct cg_model_map *out, struct cg_err *err)
{
    memset(out, 0, sizeof *out);
    if (text == NULL)
        return CG_OK;
    const char *p = text;
    while (*p != '\0') {
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        const char *entry = p;
        p = end ? end + 1 : p + len;
        while (len > 0 && (*entry == ' ' || *entry == '\t')) {
            entry++;
            len--;
        }
        while (len > 0 && (entry[len - 1] == ' ' || entry[len - 1] == '\t'))
            len--;
        if (len == 0)
            continue;
        if (out->n == CG_MODEL_MAP_MAX)
            return map_error(out, err, "more than 64 entries (at '%.*s')", entry, len);
        const char *eq = memchr(entry, '=', len);
        if (eq == NULL || eq == entry || (size_t)(eq - entry) > CG_MODELS_NAME_MAX)
            return map_error(out, err, "'%.*s': want PREFIX=TARGET[@WINDOW]", entry, len);
        const char *target = eq + 1;
        size_t tlen = len - (size_t)(target - entry);
        const char *at = memchr(target, '@', tlen);
        size_t name_len = at ? (size_t)(at - target) : tlen;
        struct cg_model_info info = unknown;
        info.known = true;
        info.dialect = CG_DIALECT_UNSPECIFIED;
        bool found = false;
        for (int e = CG_ENCODING_CL100K_BASE; e <= CG_ENCODING_O200K_BASE && !found; e++) {
            const char *n = cg_models_encoding_name((cg_encoding)e);
            if (strlen(n) == name_len && strncmp(n, target, name_len) == 0) {
                info.encoding = (cg_encoding)e;
                info.profile = CG_PROFILE_OPENAI;
                info.dialect = CG_DIALECT_OPENAI;
                found = true;
            }
        }
        for (int f = 0; f < CG__PROFILE_COUNT && !found; f++) {
            const char *n = cg_models_profile_name((cg_profile)f);
            if (strlen(n) == name_len && strncmp(n, target, name_len) == 0) {
                info.profile = (cg_profile)f;
                found = true;
            }
        }
        if (!found)
            return map_error(out, err,
                             "'%.*s': the target is not an encoding (cl100k_base, o200k_base) "
                             "or an estimator profile",
                             entry, len);
        char *prefix = out->prefixes[out->n];
        memcpy(prefix, entry, (size_t)(eq - entry));
        prefix[eq - entry] = '\0';
        struct cg_model_info builtin;
        cg_models_lookup(prefix, &builtin);
        info.context_window = builtin.known ? builtin.context_window : CG_MODELS_DEFAULT_WINDOW;
        if (at != NULL) {
            size_t wlen = tlen - name_len - 1;
            int64_t window = 0;
            bool digits = wlen > 0 && wlen <= 9;
            for (size_t i = 0; digits && i < wlen; i++) {
                if (at[1 + i] < '0' || at[1 + i] > '9')
                    digits = false;
                else
                    window = window * 10 + (at[1 + i] - '0');
            }
            if (!digits || window < 1000 || window > 100000000)
                return map_error(out, err, "'%.*s': WINDOW must be 1000..100000000 tokens", entry,
                                 len);
            info.context_window = window;
        }
        info.prefix = prefix;
        out->entries[out->n++] = info;
    }
    return CG_OK;
}

const char *cg_models_profile_name(cg_profile profile)
{
    static const char *const names[] = {"default", "openai",  "claude", "gemini",
                                        "llama",   "mistral", "kimi"};
    return (unsigned)profile < CG__PROFILE_COUNT ? names[profile] : "unknown";
}

const char *cg_models_encoding_name(cg_encoding encoding)
{
    switch (encoding) {
    case CG_ENCODING_CL100K_BASE:
        return "cl100k_base";
    case CG_ENCODING_O200K_BASE:
        return "o200k_base";
    case CG_ENCODING_NONE:
        break;
    }
    return "";
}

const struct cg_model_info *cg_models_table(size_t *count)
{
    *count = sizeof table / sizeof table[0];
    return table;
}
