/* test_config.c - precedence (defaults < file < env < flags), validation, redaction. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/config.h"

static char *write_temp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/cg_config_test_XXXXXX");
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    return path;
}

static cg_status load(struct cg_config *cfg, struct cg_config_cli *cli, int argc, char **argv,
                      char **envp, struct cg_err *err)
{
    cr_assert_eq(cg_config_init(cfg), CG_OK);
    return cg_config_load(cfg, cli, argc, argv, envp, err);
}

Test(config, defaults_are_valid_and_documented, .timeout = 10)
{
    struct cg_config cfg;
    struct cg_config_cli cli;
    struct cg_err err;
    char *argv[] = {"ctxguard", NULL};
    char *envp[] = {NULL};
    cr_assert_eq(load(&cfg, &cli, 1, argv, envp, &err), CG_OK, "%s", err.msg);
    cr_assert_str_eq(cfg.listen, "127.0.0.1:50051");
    cr_assert_eq(cfg.max_message_bytes, 8388608);
    cr_assert(cfg.migrate_on_start);
    cr_assert_str_eq(cli.command, "serve");
    cr_assert_str_eq(cfg.origin[0], "default");
    cg_config_cleanup(&cfg);
}

Test(config, file_then_env_then_flags_win_in_that_order, .timeout = 10)
{
    char *path = write_temp("# comment\n"
                            "listen = 127.0.0.1:1111\n"
                            "workers = 3\n"
                            "io_threads = \"5\"\n"
                            "log_format = json\n");
    char fileflag[128];
    snprintf(fileflag, sizeof fileflag, "--config=%s", path);
    char *argv[] = {"ctxguard", fileflag, "--io-threads", "7", NULL};
    char *envp[] = {"CTXGUARD_WORKERS=4", "CTXGUARD_IO_THREADS=6", "HOME=/root", NULL};
    struct cg_config cfg;
    struct cg_config_cli cli;
    struct cg_err err;
    cr_assert_eq(load(&cfg, &cli, 4, argv, envp, &err), CG_OK, "%s", err.msg);
    cr_assert_str_eq(cfg.listen, "127.0.0.1:1111"); /* file only */
    cr_assert_eq(cfg.workers, 4);                   /* env beats file */
    cr_assert_eq(cfg.io_threads, 7);                /* flag beats env and file */
    cr_assert_str_eq(cfg.log_format, "json");
    cr_assert_str_eq(cli.config_file, path);
    cg_config_cleanup(&cfg);
    unlink(path);
}

Test(config, config_file_from_environment, .timeout = 10)
{
    char *path = write_temp("listen=0.0.0.0:2222\n");
    char envvar[128];
    snprintf(envvar, sizeof envvar, "CTXGUARD_CONFIG=%s", path);
    char *argv[] = {"ctxguard", "migrate", NULL};
    char *envp[] = {envvar, NULL};
    struct cg_config cfg;
    struct cg_config_cli cli;
    struct cg_err err;
    cr_assert_eq(load(&cfg, &cli, 2, argv, envp, &err), CG_OK, "%s", err.msg);
    cr_assert_str_eq(cfg.listen, "0.0.0.0:2222");
    cr_assert_str_eq(cli.command, "migrate");
    cg_config_cleanup(&cfg);
    unlink(path);
}

/* Each bad value fails with a message naming the key. */
struct bad_case {
    char *env;
    const char *expect;
};

Test(config, invalid_values_fail_naming_the_key, .timeout = 10)
{
    struct bad_case cases[] = {
        {"CTXGUARD_WORKERS=500", "'workers'"},
        {"CTXGUARD_WORKERS=abc", "'workers'"},
        {"CTXGUARD_WORKERS=", "'workers'"},
        {"CTXGUARD_IO_THREADS=0", "'io_threads'"},
        {"CTXGUARD_LOG_FORMAT=xml", "'log_format'"},
        {"CTXGUARD_MIGRATE_ON_START=maybe", "'migrate_on_start'"},
        {"CTXGUARD_ADMIN_KEY=short", "'admin_key'"},
        {"CTXGUARD_LISTEN=nohostport", "'listen'"},
        {"CTXGUARD_REDIS_URL=http://x", "'redis_url'"},
        {"CTXGUARD_TLS_CERT=/tmp/cert.pem", "'tls_cert'"},
        {"CTXGUARD_NO_SUCH_KEY=1", "CTXGUARD_NO_SUCH_KEY"},
        {"CTXGUARD_MAX_MESSAGE_BYTES=99999999999999999999999", "'max_message_bytes'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *argv[] = {"ctxguard", NULL};
        char *envp[] = {cases[i].env, NULL};
        struct cg_config cfg;
        struct cg_config_cli cli;
        struct cg_err err;
        cg_err_clear(&err);
        cg_status st = load(&cfg, &cli, 1, argv, envp, &err);
        cr_expect_eq(st, CG_CONFIG, "%s was accepted", cases[i].env);
        cr_expect(strstr(err.msg, cases[i].expect) != NULL, "%s: message '%s' lacks %s",
                  cases[i].env, err.msg, cases[i].expect);
        cg_config_cleanup(&cfg);
    }
}

Test(config, unknown_flag_and_command_are_errors, .timeout = 10)
{
    struct cg_config cfg;
    struct cg_config_cli cli;
    struct cg_err err;
    char *envp[] = {NULL};
    char *argv1[] = {"ctxguard", "--no-such=1", NULL};
    cr_assert_eq(load(&cfg, &cli, 2, argv1, envp, &err), CG_CONFIG);
    cr_assert(strstr(err.msg, "--no-such") != NULL, "%s", err.msg);
    cg_config_cleanup(&cfg);
    char *argv2[] = {"ctxguard", "explode", NULL};
    cr_assert_eq(load(&cfg, &cli, 2, argv2, envp, &err), CG_CONFIG);
    cr_assert(strstr(err.msg, "explode") != NULL, "%s", err.msg);
    cg_config_cleanup(&cfg);
    char *argv3[] = {"ctxguard", "--workers", NULL};
    cr_assert_eq(load(&cfg, &cli, 2, argv3, envp, &err), CG_CONFIG);
    cr_assert(strstr(err.msg, "--workers") != NULL, "%s", err.msg);
    cg_config_cleanup(&cfg);
}

Test(config, bad_file_line_is_reported_with_its_number, .timeout = 10)
{
    char *path = write_temp("listen = 127.0.0.1:1\n\nworkers = many\n");
    struct cg_config cfg;
    cr_assert_eq(cg_config_init(&cfg), CG_OK);
    struct cg_err err;
    cr_assert_eq(cg_config_load_file(&cfg, path, &err), CG_CONFIG);
    cr_assert(strstr(err.msg, ":3") != NULL, "%s", err.msg);
    cr_assert(strstr(err.msg, "'workers'") != NULL, "%s", err.msg);
    cr_assert_eq(cg_config_load_file(&cfg, "/nonexistent/ctxguard.conf", &err), CG_CONFIG);
    cg_config_cleanup(&cfg);
    unlink(path);
}

Test(config, print_redacts_secrets_and_passwords, .timeout = 10)
{
    struct cg_config cfg;
    struct cg_config_cli cli;
    struct cg_err err;
    char *argv[] = {"ctxguard", NULL};
    char *envp[] = {"CTXGUARD_ADMIN_KEY=supersecretadminkey123",
                    "CTXGUARD_PG_DSN=postgresql://app:hunter2@db:5432/ctxguard",
                    "CTXGUARD_REDIS_URL=redis://:redispass@cache:6379/0", NULL};
    cr_assert_eq(load(&cfg, &cli, 1, argv, envp, &err), CG_OK, "%s", err.msg);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cg_config_print(&cfg, f);
    fclose(f);
    cr_assert(strstr(buf, "supersecretadminkey123") == NULL);
    cr_assert(strstr(buf, "hunter2") == NULL);
    cr_assert(strstr(buf, "redispass") == NULL);
    /* Lines with a secret are comments, redacted: read back, they set nothing. */
    cr_assert(
        strstr(buf, "\n# pg_dsn                 = \"postgresql://app:****@db:5432/ctxguard\"") !=
            NULL,
        "%s", buf);
    cr_assert(strstr(buf, "\n# redis_url              = \"redis://:****@cache:6379/0\"") != NULL,
              "%s", buf);
    cr_assert(strstr(buf, "\n# admin_key              = (a secret, from env") != NULL, "%s", buf);
    cr_assert(strstr(buf, "# env") != NULL);
    free(buf);
    cg_config_cleanup(&cfg);
}

Test(config, redact_keyword_dsn, .timeout = 10)
{
    char out[256];
    cg_config_redact_dsn("host=db user=app password=s3cret dbname=x", out, sizeof out);
    cr_assert_str_eq(out, "host=db user=app password=**** dbname=x");
    cg_config_redact_dsn("host=db password='a b c' dbname=x", out, sizeof out);
    cr_assert_str_eq(out, "host=db password=**** dbname=x");
    cg_config_redact_dsn("postgresql://db/x?user=a&password=zz&sslmode=off", out, sizeof out);
    cr_assert_str_eq(out, "postgresql://db/x?user=a&password=****&sslmode=off");
    cg_config_redact_dsn("postgresql://postgres@127.0.0.1:5/x", out, sizeof out);
    cr_assert_str_eq(out, "postgresql://postgres@127.0.0.1:5/x");
}

/* Prints cfg into a temporary file and returns its path (static storage). */
static char *print_to_file(const struct cg_config *cfg)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cg_config_print(cfg, f);
    fclose(f);
    char *path = write_temp(buf);
    free(buf);
    return path;
}

Test(config, print_config_reads_back_as_the_same_config, .timeout = 10)
{
    struct cg_config cfg, again;
    struct cg_config_cli cli;
    struct cg_err err;
    char *argv[] = {"ctxguard", "--llm-temperature=0.123456789", NULL};
    /* Values with what a naive reader would take for quotes or comments. */
    char *envp[] = {"CTXGUARD_MODEL_MAP=my-model=o200k_base@64000;x=cl100k_base",
                    "CTXGUARD_LLM_MODEL=a \"quoted\" # not a comment \\ end",
                    "CTXGUARD_WORKERS=3",
                    "CTXGUARD_WRITE_BATCHING=false",
                    "CTXGUARD_LOG_FORMAT=json",
                    NULL};
    cr_assert_eq(load(&cfg, &cli, 2, argv, envp, &err), CG_OK, "%s", err.msg);
    char *path = print_to_file(&cfg);
    cr_assert_eq(cg_config_init(&again), CG_OK);
    cr_assert_eq(cg_config_load_file(&again, path, &err), CG_OK, "%s", err.msg);
    unlink(path);
    cr_expect_str_eq(again.model_map, "my-model=o200k_base@64000;x=cl100k_base");
    cr_expect_str_eq(again.llm_model, "a \"quoted\" # not a comment \\ end");
    cr_expect_eq(again.workers, 3);
    cr_expect_eq(again.write_batching, false);
    cr_expect_str_eq(again.log_format, "json");
    cr_expect_eq(again.llm_temperature, 0.123456789);
    /* Printed again, the values are the same; only the origins differ. */
    char *first = NULL, *second = NULL;
    size_t n1 = 0, n2 = 0;
    FILE *f1 = open_memstream(&first, &n1), *f2 = open_memstream(&second, &n2);
    cg_config_print(&cfg, f1);
    cg_config_print(&again, f2);
    fclose(f1);
    fclose(f2);
    char *save1, *save2;
    char *l1 = strtok_r(first, "\n", &save1), *l2 = strtok_r(second, "\n", &save2);
    for (; l1 != NULL && l2 != NULL;
         l1 = strtok_r(NULL, "\n", &save1), l2 = strtok_r(NULL, "\n", &save2)) {
        char *c1 = strstr(l1, " # "), *c2 = strstr(l2, " # ");
        if (l1[0] != '#' && c1 != NULL && c2 != NULL) {
            *strrchr(l1, '#') = '\0';
            *strrchr(l2, '#') = '\0';
        }
        cr_expect_str_eq(l1, l2);
    }
    cr_expect(l1 == NULL && l2 == NULL, "as many lines");
    free(first);
    free(second);
    cg_config_cleanup(&again);
    cg_config_cleanup(&cfg);
}

Test(config, file_values_quotes_and_comments, .timeout = 10)
{
    char *path = write_temp("# a comment\n"
                            "workers = 4 # four\n"
                            "llm_model = \"m#1\" # the model\n"
                            "model_map = x=o200k_base#not-a-comment\n");
    struct cg_config cfg;
    struct cg_err err;
    cr_assert_eq(cg_config_init(&cfg), CG_OK);
    cr_assert_eq(cg_config_load_file(&cfg, path, &err), CG_OK, "%s", err.msg);
    cr_expect_eq(cfg.workers, 4);
    cr_expect_str_eq(cfg.llm_model, "m#1");
    cr_expect_str_eq(cfg.model_map, "x=o200k_base#not-a-comment");
    cg_config_cleanup(&cfg);
    unlink(path);

    static const char *const bad[] = {"llm_model = \"open\n", "llm_model = \"a\" b\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        path = write_temp(bad[i]);
        cr_assert_eq(cg_config_init(&cfg), CG_OK);
        cr_expect_eq(cg_config_load_file(&cfg, path, &err), CG_CONFIG, "%s", bad[i]);
        cr_expect(strstr(err.msg, "'llm_model'") != NULL && strstr(err.msg, "line 1:") != NULL,
                  "%s", err.msg);
        cg_config_cleanup(&cfg);
        unlink(path);
    }
}
