/* test_stores_down.c - what callers see when a store is gone: Redis down is only a
 * warning; PostgreSQL down is NOT_SERVING and UNAVAILABLE, never a false success. */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "ctxguard/v1/admin.pb-c.h"
#include "grpc/health/v1/health.pb-c.h"
#include "server_proc.h"

TestSuite(stores_down, .timeout = 60);

Test(stores_down, redis_unreachable_changes_no_answer)
{
    char redis[96];
    snprintf(redis, sizeof redis, "CTXGUARD_REDIS_URL=redis://127.0.0.1:%d/0",
             cg_pgtest_closed_port());
    const char *env[] = {redis, NULL};
    struct cg_test_server srv;
    cg_test_server_start(&srv, env);

    char tenant[37], key[128];
    cg_test_make_tenant(&srv, "no-cache", tenant, key);
    struct cg_client *c = cg_test_client(&srv, key);
    Ctxguard__V1__WhoAmIRequest req = CTXGUARD__V1__WHO_AM_IREQUEST__INIT;
    for (int i = 0; i < 3; i++) {
        ProtobufCMessage *resp = NULL;
        struct cg_client_status st;
        cr_assert_eq(cg_client_unary(c, "/ctxguard.v1.AdminService/WhoAmI", &req.base,
                                     &ctxguard__v1__who_am_iresponse__descriptor, &resp, &st),
                     CG_OK, "call %d: %s %s", i, st.name, st.message);
        cr_assert_str_eq(((Ctxguard__V1__WhoAmIResponse *)resp)->tenant_id, tenant);
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    cg_client_free(c);
    cr_assert(cg_test_server_wait_log(&srv, "lvl=warn mod=store_redis", 5000),
              "losing Redis is logged as a warning");
    cr_assert_eq(cg_test_server_stop(&srv, SIGTERM, 15000), 0);
}

Test(stores_down, postgresql_unreachable_is_unavailable_and_not_serving)
{
    char dsn[96];
    snprintf(dsn, sizeof dsn, "CTXGUARD_PG_DSN=postgresql://postgres@127.0.0.1:%d/ctxguard",
             cg_pgtest_closed_port());
    const char *env[] = {dsn, "CTXGUARD_MIGRATE_ON_START=false",
                         "CTXGUARD_PG_CONNECT_TIMEOUT_MS=500", NULL};
    struct cg_test_server srv;
    cg_test_server_start_ex(&srv, env, false);
    cr_assert(cg_test_server_wait_log(&srv, "PostgreSQL unreachable", 10000),
              "the probe reports the outage");

    struct cg_client *anon = cg_test_client(&srv, NULL);
    Grpc__Health__V1__HealthCheckRequest hreq = GRPC__HEALTH__V1__HEALTH_CHECK_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    struct cg_client_status st;
    cr_assert_eq(cg_client_unary(anon, "/grpc.health.v1.Health/Check", &hreq.base,
                                 &grpc__health__v1__health_check_response__descriptor, &resp, &st),
                 CG_OK);
    cr_assert_eq(((Grpc__Health__V1__HealthCheckResponse *)resp)->status,
                 GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__NOT_SERVING);
    protobuf_c_message_free_unpacked(resp, NULL);
    hreq.service = "liveness";
    cr_assert_eq(cg_client_unary(anon, "/grpc.health.v1.Health/Check", &hreq.base,
                                 &grpc__health__v1__health_check_response__descriptor, &resp, &st),
                 CG_OK);
    cr_assert_eq(((Grpc__Health__V1__HealthCheckResponse *)resp)->status,
                 GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING,
                 "liveness ignores PostgreSQL");
    protobuf_c_message_free_unpacked(resp, NULL);
    cg_client_free(anon);

    struct cg_client *admin = cg_test_client(&srv, CG_TEST_ADMIN_KEY);
    Ctxguard__V1__CreateTenantRequest treq = CTXGUARD__V1__CREATE_TENANT_REQUEST__INIT;
    treq.name = "never";
    cr_assert_eq(cg_client_unary(admin, "/ctxguard.v1.AdminService/CreateTenant", &treq.base,
                                 &ctxguard__v1__create_tenant_response__descriptor, &resp, &st),
                 CG_UNAVAILABLE, "%s %s", st.name, st.message);
    cr_assert_null(resp);
    /* The message says what is wrong, without SQL or connection details. */
    cr_assert(strstr(st.message, "unavailable") != NULL, "%s", st.message);
    cr_assert(strstr(st.message, "127.0.0.1") == NULL, "%s", st.message);
    /* What needs no store still answers. */
    Ctxguard__V1__PingRequest preq = CTXGUARD__V1__PING_REQUEST__INIT;
    cr_assert_eq(cg_client_unary(admin, "/ctxguard.v1.AdminService/Ping", &preq.base,
                                 &ctxguard__v1__ping_response__descriptor, &resp, &st),
                 CG_OK, "%s", st.message);
    protobuf_c_message_free_unpacked(resp, NULL);
    cg_client_free(admin);
    cr_assert_eq(cg_test_server_stop(&srv, SIGTERM, 15000), 0);
}
