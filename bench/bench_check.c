/* bench_check.c - where the CheckBudget answers of the benchmark come from.
 *
 *   bench_check source TARGET KEY SESSION [CALLS]
 *
 * Makes CALLS (default 200) CheckBudget calls on SESSION/t, the scope bench/run.sh drives
 * with h2load, and prints one line: `calls=N cache=C database=D policy=P errors=E
 * cache_share=F`. h2load only sees HTTP 200s; this says whether they were the cache path
 * (BudgetSource CACHE) the CheckBudget rows claim to measure. Exit status 1 on errors.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cg_client.h"
#include "ctxguard/v1/budget.pb-c.h"

int main(int argc, char **argv)
{
    if (argc < 5 || strcmp(argv[1], "source") != 0) {
        fprintf(stderr, "usage: bench_check source TARGET KEY SESSION [CALLS]\n");
        return 2;
    }
    long calls = argc > 5 ? strtol(argv[5], NULL, 10) : 200;
    if (calls < 1 || calls > 1000000)
        calls = 200;
    struct cg_client_opts o;
    cg_client_opts_init(&o);
    o.target = argv[2];
    o.bearer_key = argv[3];
    struct cg_err err;
    struct cg_client *c = cg_client_new(&o, &err);
    if (c == NULL) {
        fprintf(stderr, "bench_check: %s\n", err.msg);
        return 1;
    }
    Ctxguard__V1__Scope scope = CTXGUARD__V1__SCOPE__INIT;
    scope.session_id = argv[4];
    scope.task_id = "t";
    Ctxguard__V1__CheckBudgetRequest req = CTXGUARD__V1__CHECK_BUDGET_REQUEST__INIT;
    req.scope = &scope;
    req.estimated_tokens = 100;
    req.delay_mode = CTXGUARD__V1__DELAY_MODE__DELAY_MODE_RETURN_ONLY;
    long by_source[4] = {0}, errors = 0;
    for (long i = 0; i < calls; i++) {
        ProtobufCMessage *resp = NULL;
        struct cg_client_status st;
        if (cg_client_unary(c, "/ctxguard.v1.BudgetService/CheckBudget", &req.base,
                            &ctxguard__v1__check_budget_response__descriptor, &resp,
                            &st) != CG_OK) {
            if (errors++ == 0)
                fprintf(stderr, "bench_check: %s\n", st.message);
            continue;
        }
        int source = ((Ctxguard__V1__CheckBudgetResponse *)resp)->source;
        by_source[source >= 0 && source < 4 ? source : 0]++;
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    cg_client_free(c);
    printf("calls=%ld cache=%ld database=%ld policy=%ld errors=%ld cache_share=%.3f\n", calls,
           by_source[1], by_source[2], by_source[3], errors, (double)by_source[1] / (double)calls);
    return errors ? 1 : 0;
}
