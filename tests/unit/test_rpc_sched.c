/*
 * test_rpc_sched.c - fair queueing and admission control of the rpc server
 * (rpc/server_sched.c) over real gRPC on loopback.
 *
 * The server runs one handler at a time (max_serving 1) on three workers. Its
 * authenticate callback takes the bearer token as the tenant, and the flow
 * callback names the flow after it, so two channels with tokens "A" and "B"
 * are two tenants. A Gate call holds the one serving slot until the test opens
 * the gate; calls sent meanwhile are queued (the test waits for the
 * scheduler's counters to show them) and run, once it opens, in the order the
 * policy picks: the handler logs that order. Nothing is timed: every
 * assertion is on that log, on the counters or on the answers.
 *
 * Methods (strata.test.Test): Gate (waits for the gate; returns the request's
 * tenant back), Work (logs its tenant, returns the request back), Slices (waits
 * for the gate, then does SLICES pieces of work, logging 'S' for each and
 * calling srpc_ctx_yield() after it, unless the test turned yields off).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/status.h>

#include "srpc.h"
#include "log.h"
#include "strata.pb-c.h"
#include "support/unit_main.h"

#define TEST_METHOD(name)                                                  \
    {                                                                      \
        "/strata.test.Test/" name, &strata__v1__hello_request__descriptor, \
            &strata__v1__hello_request__descriptor                         \
    }

static const srpc_method_t gate_method = TEST_METHOD("Gate");
static const srpc_method_t work_method = TEST_METHOD("Work");
static const srpc_method_t slices_method = TEST_METHOD("Slices");

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static int g_gate_inside;
static int g_gate_open;
static char g_order[64]; /* the tenant (first letter) of each Work call, in run order */
static size_t g_n_order;

static void reset_shared(void)
{
    pthread_mutex_lock(&g_lock);
    g_gate_inside = g_gate_open = 0;
    g_n_order = 0;
    memset(g_order, 0, sizeof(g_order));
    pthread_mutex_unlock(&g_lock);
}

static st_status_t echo_back(const ProtobufCMessage *req, ProtobufCMessage *resp)
{
    *(Strata__V1__HelloRequest *)resp = *(const Strata__V1__HelloRequest *)req;
    return ST_OK;
}

/* Says it is inside, then waits until the test opens the gate. */
static void gate_wait(void)
{
    pthread_mutex_lock(&g_lock);
    g_gate_inside++;
    pthread_cond_broadcast(&g_cond);
    while (!g_gate_open) {
        pthread_cond_wait(&g_cond, &g_lock);
    }
    pthread_mutex_unlock(&g_lock);
}

static st_status_t gate_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                ProtobufCMessage *resp, void *arg)
{
    (void)ctx;
    (void)arg;
    gate_wait();
    return echo_back(req, resp);
}

static st_status_t work_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                ProtobufCMessage *resp, void *arg)
{
    const Strata__V1__HelloRequest *rq = (const void *)req;

    (void)ctx;
    (void)arg;
    pthread_mutex_lock(&g_lock);
    if (g_n_order < sizeof(g_order) - 1) {
        g_order[g_n_order++] = rq->tenant != NULL && rq->tenant[0] ? rq->tenant[0] : '?';
    }
    pthread_mutex_unlock(&g_lock);
    return echo_back(req, resp);
}

#define SLICES 6

static int g_no_yield; /* Slices does not yield: the whole call in one piece */

static st_status_t slices_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                  ProtobufCMessage *resp, void *arg)
{
    gate_wait();
    for (int k = 0; k < SLICES; k++) {
        pthread_mutex_lock(&g_lock);
        g_order[g_n_order++] = 'S';
        pthread_mutex_unlock(&g_lock);
        if (!g_no_yield) {
            (void)srpc_ctx_yield(ctx);
        }
    }
    (void)arg;
    return echo_back(req, resp);
}

static const srpc_method_def_t table[] = {
    {&gate_method, gate_handler, NULL, 0},
    {&work_method, work_handler, NULL, 0},
    {&slices_method, slices_handler, NULL, 0},
};

/* The token is the tenant: copied into the principal. */
static st_status_t token_auth(void *arg, const char *path, const char *token, const char *peer,
                              const char *identity, void *principal, char *msg, size_t cap)
{
    (void)arg, (void)path, (void)peer, (void)identity;
    if (token == NULL || strlen(token) >= SRPC_PRINCIPAL_MAX) {
        snprintf(msg, cap, "no token");
        return ST_ERR_UNAUTHENTICATED;
    }
    strcpy(principal, token);
    return ST_OK;
}

static void token_flow(void *arg, const void *principal, const char *peer, char *name, size_t cap)
{
    (void)arg, (void)peer;
    snprintf(name, cap, "%s", (const char *)principal);
}

static srpc_server_t *start_server(const srpc_admission_t *adm)
{
    srpc_server_config_t cfg = {
        .address = "127.0.0.1:0",
        .n_threads = 3,
        .authenticate = token_auth,
        .admission = *adm,
    };
    srpc_server_t *srv = NULL;

    cfg.admission.flow = token_flow;
    assert_int_equal(srpc_server_start(&cfg, table, 3, &srv), ST_OK);
    reset_shared();
    return srv;
}

static srpc_channel_t *open_channel(srpc_server_t *srv, const char *token)
{
    srpc_channel_config_t cfg = {.token = token};
    srpc_channel_t *ch = NULL;
    char target[64];

    snprintf(target, sizeof(target), "127.0.0.1:%d", srpc_server_port(srv));
    assert_int_equal(srpc_channel_open(target, &cfg, &ch), ST_OK);
    return ch;
}

/* One call on its own thread. */
typedef struct call_job {
    srpc_channel_t *ch;
    const srpc_method_t *method;
    char tenant[8];
    uint32_t value;
    pthread_t thread;
    st_status_t status;
    srpc_error_t err;
    int echoed_ok; /* the answer carried the request's tenant and value */
} call_job_t;

static void *call_thread(void *arg)
{
    call_job_t *j = arg;
    Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;

    rq.tenant = j->tenant;
    rq.block_tokens = j->value;
    j->status = srpc_call(j->ch, j->method, &rq.base, 30000, &resp, &j->err);
    if (j->status == ST_OK) {
        const Strata__V1__HelloRequest *rs = (const void *)resp;

        j->echoed_ok = strcmp(rs->tenant, j->tenant) == 0 && rs->block_tokens == j->value;
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    return NULL;
}

static void call_start(call_job_t *j, srpc_channel_t *ch, const srpc_method_t *m,
                       const char *tenant, uint32_t value)
{
    memset(j, 0, sizeof(*j));
    j->ch = ch;
    j->method = m;
    snprintf(j->tenant, sizeof(j->tenant), "%s", tenant);
    j->value = value;
    assert_int_equal(pthread_create(&j->thread, NULL, call_thread, j), 0);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};

    nanosleep(&ts, NULL);
}

/* Waits (polling the counters) until queued calls are waiting and refused were refused. */
static void wait_sched(srpc_server_t *srv, uint64_t queued, uint64_t refused)
{
    srpc_sched_stats_t st;

    for (int i = 0; i < 30000; i++) {
        srpc_server_sched_stats(srv, &st);
        if (st.queued_calls == queued && st.refused == refused) {
            return;
        }
        sleep_ms(1);
    }
    fail_msg("scheduler shows queued=%" PRIu64 " refused=%" PRIu64 ", wanted %" PRIu64 " %" PRIu64,
             st.queued_calls, st.refused, queued, refused);
}

/* Starts a Gate call and waits until it holds the serving slot. */
static void gate_hold(call_job_t *gate, srpc_channel_t *ch)
{
    call_start(gate, ch, &gate_method, "A", 0);
    pthread_mutex_lock(&g_lock);
    while (g_gate_inside == 0) {
        pthread_cond_wait(&g_cond, &g_lock);
    }
    pthread_mutex_unlock(&g_lock);
}

static void gate_open(void)
{
    pthread_mutex_lock(&g_lock);
    g_gate_open = 1;
    pthread_cond_broadcast(&g_cond);
    pthread_mutex_unlock(&g_lock);
}

static const srpc_flow_stats_t *flow_named(const srpc_sched_stats_t *st, const char *name)
{
    for (size_t i = 0; i < st->n_flows; i++) {
        if (strcmp(st->flows[i].name, name) == 0) {
            return &st->flows[i];
        }
    }
    fail_msg("no flow %s", name);
    return NULL;
}

#define FLOOD 8

/*
 * Tenant A floods FLOOD Work calls behind the gate, then tenant B sends one.
 * Returns, through order and b_passed, the run order and the number of A's
 * calls that ran while B's waited.
 */
static void run_flood_then_one(bool fifo, char *order, uint64_t *b_passed)
{
    srpc_admission_t adm = {.max_serving = 1, .fifo = fifo};
    srpc_server_t *srv = start_server(&adm);
    srpc_channel_t *a = open_channel(srv, "A");
    srpc_channel_t *b = open_channel(srv, "B");
    call_job_t gate, flood[FLOOD], one;
    srpc_sched_stats_t st;

    gate_hold(&gate, a);
    for (int i = 0; i < FLOOD; i++) {
        call_start(&flood[i], a, &work_method, "A", (uint32_t)i);
        wait_sched(srv, (uint64_t)i + 1, 0); /* one at a time: arrival order is known */
    }
    call_start(&one, b, &work_method, "B", 99);
    wait_sched(srv, FLOOD + 1, 0);
    gate_open();
    pthread_join(gate.thread, NULL);
    pthread_join(one.thread, NULL);
    for (int i = 0; i < FLOOD; i++) {
        pthread_join(flood[i].thread, NULL);
        assert_int_equal(flood[i].status, ST_OK);
        assert_true(flood[i].echoed_ok);
    }
    assert_int_equal(one.status, ST_OK);
    assert_true(one.echoed_ok);
    srpc_server_sched_stats(srv, &st);
    *b_passed = flow_named(&st, "B")->max_passed;
    assert_int_equal(flow_named(&st, "A")->served, FLOOD + 1);
    assert_int_equal(st.queued_calls, 0);
    pthread_mutex_lock(&g_lock);
    memcpy(order, g_order, FLOOD + 2);
    pthread_mutex_unlock(&g_lock);
    srpc_channel_close(a);
    srpc_channel_close(b);
    srpc_server_destroy(srv);
}

/*
 * B's one call, queued behind A's flood, runs after at most one call of A
 * (two flows: one turn each). In arrival order (fifo, how the server served
 * before round robin) it ran after all of them: the same counter then reads
 * FLOOD, which is what this test would see without fair queueing.
 */
static void test_tenants_interleave(void **state)
{
    char order[FLOOD + 2] = {0};
    uint64_t passed = 0;

    (void)state;
    run_flood_then_one(false, order, &passed);
    assert_true(passed <= 1);
    assert_ptr_not_equal(strchr(order, 'B'), NULL);
    assert_true(strchr(order, 'B') - order <= 1);

    run_flood_then_one(true, order, &passed);
    assert_int_equal(passed, FLOOD);
    assert_int_equal(strchr(order, 'B') - order, FLOOD);
}

/*
 * Past max_queued_calls every call is refused at once with ST_ERR_OVERLOADED and
 * a hint, the admitted ones return their own bytes, and the server goes on.
 */
static void test_flood_refused_with_hint(void **state)
{
    srpc_admission_t adm = {.max_serving = 1, .max_queued_calls = 4};
    srpc_server_t *srv = start_server(&adm);
    srpc_channel_t *a = open_channel(srv, "A");
    call_job_t gate, flood[12];
    srpc_method_stats_t ms[4];
    int ok = 0, refused = 0;

    (void)state;
    gate_hold(&gate, a);
    for (int i = 0; i < 12; i++) {
        call_start(&flood[i], a, &work_method, "A", 1000u + (uint32_t)i);
        wait_sched(srv, i < 4 ? (uint64_t)i + 1 : 4, i < 4 ? 0 : (uint64_t)i - 3);
    }
    gate_open();
    pthread_join(gate.thread, NULL);
    for (int i = 0; i < 12; i++) {
        pthread_join(flood[i].thread, NULL);
        if (flood[i].status == ST_OK) {
            assert_true(flood[i].echoed_ok);
            ok++;
        } else {
            assert_int_equal(flood[i].status, ST_ERR_OVERLOADED);
            assert_int_equal(flood[i].err.grpc_code, GRPC_STATUS_RESOURCE_EXHAUSTED);
            assert_true(flood[i].err.retry_after_ms >= 1);
            assert_non_null(strstr(flood[i].err.message, "max_queued_calls=4"));
            refused++;
        }
    }
    assert_int_equal(ok, 4);
    assert_int_equal(refused, 8);
    assert_int_equal(srpc_server_stats(srv, ms, 4), 4); /* Gate, Work, Slices, health */
    assert_int_equal(ms[1].overloaded, 8);
    assert_int_equal(ms[1].by_code[GRPC_STATUS_RESOURCE_EXHAUSTED], 8);
    assert_int_equal(ms[0].overloaded, 0);

    /* Healthy afterwards: a call is served, the health check says SERVING. */
    call_start(&flood[0], a, &work_method, "A", 7);
    pthread_join(flood[0].thread, NULL);
    assert_int_equal(flood[0].status, ST_OK);
    int health = -1;

    assert_int_equal(srpc_health_check(a, "", 5000, &health, NULL), ST_OK);
    assert_int_equal(health, SRPC_HEALTH_SERVING);
    srpc_channel_close(a);
    srpc_server_destroy(srv);
}

/* One tenant at its own limit is refused; another tenant is still admitted. */
static void test_tenant_limit(void **state)
{
    srpc_admission_t adm = {.max_serving = 1, .flow_max_calls = 2};
    srpc_server_t *srv = start_server(&adm);
    srpc_channel_t *a = open_channel(srv, "A");
    srpc_channel_t *b = open_channel(srv, "B");
    call_job_t gate, ja[3], jb;
    srpc_sched_stats_t st;

    (void)state;
    gate_hold(&gate, a);
    for (int i = 0; i < 3; i++) {
        call_start(&ja[i], a, &work_method, "A", (uint32_t)i);
        wait_sched(srv, i < 2 ? (uint64_t)i + 1 : 2, i < 2 ? 0 : 1);
    }
    call_start(&jb, b, &work_method, "B", 5);
    wait_sched(srv, 3, 1);
    pthread_join(ja[2].thread, NULL);
    assert_int_equal(ja[2].status, ST_ERR_OVERLOADED);
    assert_non_null(strstr(ja[2].err.message, "tenant_max_queued_calls=2"));
    gate_open();
    pthread_join(gate.thread, NULL);
    pthread_join(ja[0].thread, NULL);
    pthread_join(ja[1].thread, NULL);
    pthread_join(jb.thread, NULL);
    assert_int_equal(ja[0].status, ST_OK);
    assert_int_equal(ja[1].status, ST_OK);
    assert_int_equal(jb.status, ST_OK);
    assert_true(jb.echoed_ok);
    srpc_server_sched_stats(srv, &st);
    assert_int_equal(flow_named(&st, "A")->refused, 1);
    assert_int_equal(flow_named(&st, "B")->refused, 0);
    srpc_channel_close(a);
    srpc_channel_close(b);
    srpc_server_destroy(srv);
}

#define SMALL 4

/*
 * Bounded slices: tenant A's long call (Slices) holds the one serving slot; one more call of
 * A and SMALL calls of B wait. Each of the long call's yields serves one waiting call of
 * another flow on its slot, so B's calls run one after each slice, and A's own waits for
 * the end of the long call (a yield never serves its own flow, which would only reorder
 * it). With yields off, every B waits for all SLICES slices: what the test would see
 * without bounded slices. Returns the order in *order (SLICES + SMALL + 2 letters).
 */
static void run_slices(int no_yield, char *order, uint64_t *lent)
{
    srpc_admission_t adm = {.max_serving = 1};
    srpc_server_t *srv = start_server(&adm);
    srpc_channel_t *a = open_channel(srv, "A");
    srpc_channel_t *b = open_channel(srv, "B");
    call_job_t big, own, small[SMALL];
    srpc_sched_stats_t st;

    g_no_yield = no_yield;
    call_start(&big, a, &slices_method, "A", 1);
    pthread_mutex_lock(&g_lock);
    while (g_gate_inside == 0) {
        pthread_cond_wait(&g_cond, &g_lock);
    }
    pthread_mutex_unlock(&g_lock);
    call_start(&own, a, &work_method, "A", 2);
    wait_sched(srv, 1, 0);
    for (int i = 0; i < SMALL; i++) {
        call_start(&small[i], b, &work_method, "B", 10u + (uint32_t)i);
        wait_sched(srv, (uint64_t)i + 2, 0);
    }
    gate_open();
    pthread_join(big.thread, NULL);
    pthread_join(own.thread, NULL);
    assert_int_equal(big.status, ST_OK);
    assert_true(big.echoed_ok);
    assert_int_equal(own.status, ST_OK);
    assert_true(own.echoed_ok);
    for (int i = 0; i < SMALL; i++) {
        pthread_join(small[i].thread, NULL);
        assert_int_equal(small[i].status, ST_OK);
        assert_true(small[i].echoed_ok);
    }
    srpc_server_sched_stats(srv, &st);
    assert_int_equal(st.queued_calls, 0);
    *lent = st.lent;
    pthread_mutex_lock(&g_lock);
    memcpy(order, g_order, SLICES + SMALL + 1);
    order[SLICES + SMALL + 1] = '\0';
    pthread_mutex_unlock(&g_lock);
    g_no_yield = 0;
    srpc_channel_close(a);
    srpc_channel_close(b);
    srpc_server_destroy(srv);
}

static void test_bounded_slices(void **state)
{
    char order[SLICES + SMALL + 2];
    uint64_t lent = 0;

    (void)state;
    run_slices(0, order, &lent);
    print_message("with yields: %s (lent %llu)\n", order, (unsigned long long)lent);
    assert_string_equal(order, "SBSBSBSBSSA");
    assert_int_equal(lent, SMALL);

    run_slices(1, order, &lent);
    print_message("without: %s\n", order);
    assert_int_equal(strchr(order, 'B') - order, SLICES); /* every B after the whole call */
    assert_int_equal(lent, 0);
}

/* The hint's parser: 1 to 9 digits, not 0, nothing else. */
static void test_retry_hint_parse(void **state)
{
    uint32_t ms = 77;

    (void)state;
    assert_int_equal(srpc_retry_hint_parse("25", 2, &ms), 1);
    assert_int_equal(ms, 25);
    assert_int_equal(srpc_retry_hint_parse("999999999", 9, &ms), 1);
    assert_int_equal(ms, 999999999);
    ms = 77;
    assert_int_equal(srpc_retry_hint_parse("0", 1, &ms), 0);
    assert_int_equal(srpc_retry_hint_parse("", 0, &ms), 0);
    assert_int_equal(srpc_retry_hint_parse("1000000000", 10, &ms), 0);
    assert_int_equal(srpc_retry_hint_parse("12a", 3, &ms), 0);
    assert_int_equal(srpc_retry_hint_parse("-5", 2, &ms), 0);
    assert_int_equal(srpc_retry_hint_parse(" 5", 2, &ms), 0);
    assert_int_equal(srpc_retry_hint_parse(NULL, 3, &ms), 0);
    assert_int_equal(ms, 77);
}

/* The ring epoch trailer's parser: 1 to 19 digits, nothing else. */
static void test_ring_epoch_parse(void **state)
{
    uint64_t e = 77;

    (void)state;
    assert_int_equal(srpc_ring_epoch_parse("0", 1, &e), 1);
    assert_int_equal(e, 0);
    assert_int_equal(srpc_ring_epoch_parse("9999999999999999999", 19, &e), 1);
    assert_int_equal(e, 9999999999999999999ull);
    e = 77;
    assert_int_equal(srpc_ring_epoch_parse("", 0, &e), 0);
    assert_int_equal(srpc_ring_epoch_parse("10000000000000000000", 20, &e), 0);
    assert_int_equal(srpc_ring_epoch_parse("12a", 3, &e), 0);
    assert_int_equal(srpc_ring_epoch_parse("-5", 2, &e), 0);
    assert_int_equal(srpc_ring_epoch_parse(NULL, 3, &e), 0);
    assert_int_equal(e, 77);
}

int main(void)
{
    const char *verbose = getenv("STRATA_TEST_VERBOSE");

    lg_set_level(verbose == NULL ? LG_ERROR : LG_DEBUG);
    UNIT_RUN(cmocka_unit_test(test_retry_hint_parse), cmocka_unit_test(test_ring_epoch_parse),
             cmocka_unit_test(test_tenants_interleave),
             cmocka_unit_test(test_flood_refused_with_hint), cmocka_unit_test(test_tenant_limit),
             cmocka_unit_test(test_bounded_slices));
}
