/* test_config_llm.c - the llm_* rows of the config table: defaults, bounds, the decimal
 * temperature, URL validation and the redacted key. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/config.h"

static cg_status load_env(struct cg_config *cfg, char **envp, struct cg_err *err)
{
    struct cg_config_cli cli;
    char *argv[] = {"ctxguard", NULL};
    cr_assert_eq(cg_config_init(cfg), CG_OK);
    return cg_config_load(cfg, &cli, 1, argv, envp, err);
}

Test(config_llm, defaults_leave_the_llm_unconfigured, .timeout = 10)
{
    struct cg_config cfg;
    struct cg_err err;
    char *envp[] = {NULL};
    cr_assert_eq(load_env(&cfg, envp, &err), CG_OK, "%s", err.msg);
    cr_assert_str_eq(cfg.llm_base_url, "");
    cr_assert_str_eq(cfg.llm_api_key, "");
    cr_assert_str_eq(cfg.llm_model, "gpt-4o-mini");
    cr_assert_float_eq(cfg.llm_temperature, 0.2, 1e-12);
    cr_assert_eq(cfg.llm_connect_timeout_ms, 2000);
    cr_assert_eq(cfg.llm_timeout_ms, 20000);
    cr_assert_eq(cfg.llm_max_retries, 2);
    cr_assert_eq(cfg.llm_breaker_failures, 5);
    cr_assert_eq(cfg.llm_breaker_cooldown_ms, 30000);
    cr_assert_eq(cfg.llm_max_response_bytes, 1048576);
    cg_config_cleanup(&cfg);
}

Test(config_llm, environment_sets_every_key, .timeout = 10)
{
    struct cg_config cfg;
    struct cg_err err;
    char *envp[] = {"CTXGUARD_LLM_BASE_URL=http://127.0.0.1:8080/v1",
                    "CTXGUARD_LLM_API_KEY=sk-test-0123456789",
                    "CTXGUARD_LLM_MODEL=small",
                    "CTXGUARD_LLM_TEMPERATURE=1.25",
                    "CTXGUARD_LLM_CONNECT_TIMEOUT_MS=50",
                    "CTXGUARD_LLM_TIMEOUT_MS=900",
                    "CTXGUARD_LLM_MAX_RETRIES=0",
                    "CTXGUARD_LLM_BREAKER_FAILURES=2",
                    "CTXGUARD_LLM_BREAKER_COOLDOWN_MS=100",
                    "CTXGUARD_LLM_MAX_RESPONSE_BYTES=4096",
                    NULL};
    cr_assert_eq(load_env(&cfg, envp, &err), CG_OK, "%s", err.msg);
    cr_assert_str_eq(cfg.llm_base_url, "http://127.0.0.1:8080/v1");
    cr_assert_str_eq(cfg.llm_model, "small");
    cr_assert_float_eq(cfg.llm_temperature, 1.25, 1e-12);
    cr_assert_eq(cfg.llm_timeout_ms, 900);
    cr_assert_eq(cfg.llm_max_retries, 0);
    cr_assert_eq(cfg.llm_max_response_bytes, 4096);
    cg_config_cleanup(&cfg);
}

Test(config_llm, bad_values_name_the_key, .timeout = 10)
{
    const char *bad[] = {
        "CTXGUARD_LLM_TEMPERATURE=2.5",      "CTXGUARD_LLM_TEMPERATURE=-0.1",
        "CTXGUARD_LLM_TEMPERATURE=nan",      "CTXGUARD_LLM_TEMPERATURE=inf",
        "CTXGUARD_LLM_TEMPERATURE=0x1p0",    "CTXGUARD_LLM_TEMPERATURE=",
        "CTXGUARD_LLM_TEMPERATURE=0.2abc",   "CTXGUARD_LLM_TEMPERATURE=.5",
        "CTXGUARD_LLM_MAX_RETRIES=11",       "CTXGUARD_LLM_TIMEOUT_MS=99",
        "CTXGUARD_LLM_BREAKER_FAILURES=0",   "CTXGUARD_LLM_BREAKER_COOLDOWN_MS=99",
        "CTXGUARD_LLM_MAX_RESPONSE_BYTES=1", "CTXGUARD_LLM_CONNECT_TIMEOUT_MS=9",
        "CTXGUARD_LLM_BASE_URL=ftp://x/v1",  "CTXGUARD_LLM_BASE_URL=api.openai.com/v1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct cg_config cfg;
        struct cg_err err;
        char *envp[] = {(char *)bad[i], NULL};
        cr_assert_eq(load_env(&cfg, envp, &err), CG_CONFIG, "%s accepted", bad[i]);
        char key[64];
        const char *eq = strchr(bad[i], '=');
        snprintf(key, sizeof key, "%.*s", (int)(eq - bad[i]), bad[i]);
        cr_assert(strstr(err.msg, key) != NULL, "'%s' does not name %s", err.msg, key);
        cg_config_cleanup(&cfg);
    }
    struct cg_config cfg;
    struct cg_err err;
    char *envp[] = {"CTXGUARD_LLM_BASE_URL=https://x/v1", "CTXGUARD_LLM_MODEL=", NULL};
    cr_assert_eq(load_env(&cfg, envp, &err), CG_CONFIG);
    cr_assert(strstr(err.msg, "llm_model") != NULL, "%s", err.msg);
    cg_config_cleanup(&cfg);
}

Test(config_llm, print_config_redacts_the_api_key, .timeout = 10)
{
    struct cg_config cfg;
    struct cg_err err;
    char *envp[] = {"CTXGUARD_LLM_BASE_URL=https://llm.example/v1",
                    "CTXGUARD_LLM_API_KEY=sk-very-secret-value-42", NULL};
    cr_assert_eq(load_env(&cfg, envp, &err), CG_OK, "%s", err.msg);
    char buf[16384] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    cr_assert_not_null(f);
    cg_config_print(&cfg, f);
    fclose(f);
    cr_assert(strstr(buf, "sk-very-secret") == NULL, "the key was printed");
    cr_assert(strstr(buf, "\n# llm_api_key            = (a secret, from env: not printed)\n") !=
                  NULL,
              "%s", buf);
    cr_assert(strstr(buf, "https://llm.example/v1") != NULL);
    cr_assert(strstr(buf, "llm_temperature          = 0.2 ") != NULL, "%s", buf);
    cg_config_cleanup(&cfg);
}

Test(config_llm, reference_lists_the_llm_keys_with_bounds, .timeout = 10)
{
    char buf[32768] = {0};
    FILE *f = fmemopen(buf, sizeof buf - 1, "w");
    cr_assert_not_null(f);
    cg_config_print_reference(f);
    fclose(f);
    cr_assert(strstr(buf, "CTXGUARD_LLM_API_KEY") != NULL);
    cr_assert(strstr(buf, "--llm-temperature") != NULL);
    cr_assert(strstr(buf, "number 0..2") != NULL, "%s", buf);
    cr_assert(strstr(buf, "int 1..1000") != NULL);
}
