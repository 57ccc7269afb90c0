/*
 * test_rpc.c - the rpc framework over real gRPC on loopback: a server with a
 * small test method table plus the real health service, driven by real
 * client calls.
 *
 * Test methods (all on the test-only service strata.test.Test):
 *   Echo     HelloRequest -> HelloRequest: the request back, auth_token set to
 *            the bearer token the server saw.
 *   Fail     HelloRequest -> HelloResponse: fails with st_status_t
 *            -block_tokens and the message "failing on purpose tenant=<tenant>"
 *            (no message when tenant is empty).
 *   Barrier  HelloRequest -> HelloResponse: returns only once block_tokens
 *            calls are inside it at the same time (ST_ERR_TIMEOUT after 20 s).
 *   Block    HelloRequest -> HelloResponse: waits until the test releases it.
 *   Small    HelloRequest -> HelloResponse: a method with a 1 KiB request limit.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/status.h>

#include "srpc.h"
#include "log.h"
#include "strata.pb-c.h"

/* ------------------------------------------------------------ test methods -- */

/* A method of the test service: a HelloRequest in, resp out. */
#define TEST_METHOD(name, resp)                                            \
    {                                                                      \
        "/strata.test.Test/" name, &strata__v1__hello_request__descriptor, \
            &strata__v1__hello_##resp##__descriptor                        \
    }

static const srpc_method_t echo_method = TEST_METHOD("Echo", request);
static const srpc_method_t fail_method = TEST_METHOD("Fail", response);
static const srpc_method_t barrier_method = TEST_METHOD("Barrier", response);
static const srpc_method_t block_method = TEST_METHOD("Block", response);
static const srpc_method_t small_method = TEST_METHOD("Small", response);

/* State shared by the Barrier and Block handlers and the tests. */
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static int g_inside;       /* handlers inside Barrier or Block */
static int g_max_inside;   /* most handlers seen inside Barrier at once */
static int g_block_open;   /* Block handlers may return */
static int g_block_served; /* Block handlers that returned */

static void reset_shared(void)
{
    pthread_mutex_lock(&g_lock);
    g_inside = g_max_inside = g_block_open = g_block_served = 0;
    pthread_mutex_unlock(&g_lock);
}

static st_status_t echo_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                ProtobufCMessage *resp, void *arg)
{
    const Strata__V1__HelloRequest *rq = (const void *)req;
    Strata__V1__HelloRequest *rs = (void *)resp;
    const char *token = srpc_ctx_token(ctx);

    const char *peer = srpc_ctx_peer(ctx);
    int64_t left = srpc_ctx_remaining_ms(ctx);

    /* The response may point into the request (documented in srpc.h). */
    *rs = *rq;
    rs->auth_token = (char *)"";
    /* What the handler sees of its call: peer, method, time left. */
    rs->client_name = srpc_ctx_alloc(ctx, strlen(peer) + 1);
    if (rs->client_name == NULL) {
        return ST_ERR_NOMEM;
    }
    strcpy(rs->client_name, peer);
    rs->protocol_version = strcmp(srpc_ctx_method(ctx), echo_method.path) != 0 ? 0
                           : left == INT64_MAX                                 ? 2
                           : left > 0 && left <= 11000                         ? 1
                                                                               : 3;
    if (token != NULL) {
        rs->auth_token = srpc_ctx_alloc(ctx, strlen(token) + 1);
        if (rs->auth_token == NULL) {
            return ST_ERR_NOMEM;
        }
        strcpy(rs->auth_token, token);
    }
    return ST_OK;
}

static st_status_t fail_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                ProtobufCMessage *resp, void *arg)
{
    const Strata__V1__HelloRequest *rq = (const void *)req;

    if (rq->tenant != NULL && rq->tenant[0] != '\0') {
        srpc_ctx_set_error(ctx, "failing on purpose tenant=%s", rq->tenant);
    }
    return (st_status_t)(-(int)rq->block_tokens);
}

static void deadline_in(struct timespec *ts, int ms)
{
    clock_gettime(CLOCK_REALTIME, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

static st_status_t barrier_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                   ProtobufCMessage *resp, void *arg)
{
    const Strata__V1__HelloRequest *rq = (const void *)req;
    struct timespec until;
    int rc = 0;
    st_status_t st = ST_OK;

    deadline_in(&until, 20000);
    pthread_mutex_lock(&g_lock);
    g_inside++;
    if (g_inside > g_max_inside) {
        g_max_inside = g_inside;
    }
    pthread_cond_broadcast(&g_cond);
    while (g_max_inside < (int)rq->block_tokens && rc != ETIMEDOUT) {
        rc = pthread_cond_timedwait(&g_cond, &g_lock, &until);
    }
    if (g_max_inside < (int)rq->block_tokens) {
        srpc_ctx_set_error(ctx, "only %d calls arrived together, wanted %u", g_max_inside,
                           rq->block_tokens);
        st = ST_ERR_TIMEOUT;
    }
    g_inside--;
    pthread_mutex_unlock(&g_lock);
    return st;
}

static st_status_t block_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                 ProtobufCMessage *resp, void *arg)
{
    Strata__V1__HelloResponse *rs = (void *)resp;

    pthread_mutex_lock(&g_lock);
    g_inside++;
    pthread_cond_broadcast(&g_cond);
    while (!g_block_open) {
        pthread_cond_wait(&g_cond, &g_lock);
    }
    g_inside--;
    g_block_served++;
    pthread_cond_broadcast(&g_cond);
    pthread_mutex_unlock(&g_lock);
    rs->node_id = (char *)"blocked-and-released";
    return ST_OK;
}

static st_status_t small_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                 ProtobufCMessage *resp, void *arg)
{
    return ST_OK;
}

static const srpc_method_def_t test_table[] = {
    {&echo_method, echo_handler, NULL, 0},       {&fail_method, fail_handler, NULL, 0},
    {&barrier_method, barrier_handler, NULL, 0}, {&block_method, block_handler, NULL, 0},
    {&small_method, small_handler, NULL, 1024},
};
#define TEST_TABLE_N (sizeof(test_table) / sizeof(test_table[0]))

#define N_THREADS 8
#define MAX_BYTES (4u << 20)

static srpc_server_t *start_server(void)
{
    srpc_server_config_t cfg = {
        .address = "127.0.0.1:0",
        .n_threads = N_THREADS,
        .max_message_bytes = MAX_BYTES,
    };
    srpc_server_t *srv = NULL;

    assert_int_equal(srpc_server_start(&cfg, test_table, TEST_TABLE_N, &srv), ST_OK);
    assert_true(srpc_server_port(srv) > 0);
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

/* Waits until pred() holds; polls with a short sleep (gRPC gives no event). */
static void wait_until(int (*pred)(void *), void *arg)
{
    struct timespec ms = {0, 1000000};

    for (int i = 0; i < 60000 && !pred(arg); i++) {
        nanosleep(&ms, NULL);
    }
    assert_true(pred(arg));
}

static int inside_at_least(void *arg)
{
    int n;

    pthread_mutex_lock(&g_lock);
    n = g_inside;
    pthread_mutex_unlock(&g_lock);
    return n >= *(int *)arg;
}

static void open_blocks(void)
{
    pthread_mutex_lock(&g_lock);
    g_block_open = 1;
    pthread_cond_broadcast(&g_cond);
    pthread_mutex_unlock(&g_lock);
}

/* A fixture server shared by the call tests. */
typedef struct fixture {
    srpc_server_t *srv;
    srpc_channel_t *ch;
} fixture_t;

static int fixture_setup(void **state)
{
    fixture_t *f = calloc(1, sizeof(*f));

    reset_shared();
    f->srv = start_server();
    f->ch = open_channel(f->srv, "secret-token-1");
    *state = f;
    return 0;
}

static int fixture_teardown(void **state)
{
    fixture_t *f = *state;

    open_blocks();
    srpc_channel_close(f->ch);
    srpc_server_destroy(f->srv);
    free(f);
    return 0;
}

static Strata__V1__HelloRequest *echo(srpc_channel_t *ch, const char *tenant, size_t n_bytes,
                                      st_status_t expect)
{
    Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    srpc_error_t err;
    uint8_t *bytes = malloc(n_bytes ? n_bytes : 1);
    st_status_t st;

    for (size_t i = 0; i < n_bytes; i++) {
        bytes[i] = (uint8_t)(i * 131 + 7);
    }
    rq.tenant = (char *)tenant;
    rq.model = (char *)"model-x";
    rq.block_tokens = 64;
    rq.client_address.data = bytes;
    rq.client_address.len = n_bytes;
    st = srpc_call(ch, &echo_method, &rq.base, 10000, &resp, &err);
    free(bytes);
    assert_int_equal(st, expect);
    return (Strata__V1__HelloRequest *)resp;
}

/* ------------------------------------------------------------------ tests -- */

static void test_method_table_matches_proto(void **state)
{
    const ProtobufCServiceDescriptor *svc = &strata__v1__cache__descriptor;
    char path[128];

    assert_int_equal(svc->n_methods, SRPC_CACHE_N_METHODS);
    for (unsigned i = 0; i < svc->n_methods; i++) {
        snprintf(path, sizeof(path), "/%s/%s", svc->name, svc->methods[i].name);
        assert_string_equal(srpc_cache_methods[i].path, path);
        assert_ptr_equal(srpc_cache_methods[i].req_desc, svc->methods[i].input);
        assert_ptr_equal(srpc_cache_methods[i].resp_desc, svc->methods[i].output);
    }
    assert_string_equal(svc->name, SRPC_CACHE_SERVICE);
}

static void test_echo_roundtrip(void **state)
{
    fixture_t *f = *state;
    /* 3 MiB: gRPC delivers it in many slices. */
    size_t sizes[] = {0, 1, 1000, 3u << 20};

    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        Strata__V1__HelloRequest *rs = echo(f->ch, "tenant-a", sizes[k], ST_OK);

        assert_string_equal(rs->tenant, "tenant-a");
        assert_string_equal(rs->model, "model-x");
        assert_string_equal(rs->auth_token, "secret-token-1");
        assert_int_equal(rs->block_tokens, 64);
        assert_int_equal(rs->client_address.len, sizes[k]);
        assert_int_equal(rs->protocol_version, 1); /* a deadline within 10 s */
        assert_non_null(strstr(rs->client_name, "127.0.0.1"));
        for (size_t i = 0; i < sizes[k]; i++) {
            if (rs->client_address.data[i] != (uint8_t)(i * 131 + 7)) {
                fail_msg("byte %zu of %zu differs", i, sizes[k]);
            }
        }
        protobuf_c_message_free_unpacked(&rs->base, NULL);
    }

    /* No deadline: the handler sees INT64_MAX milliseconds left. */
    {
        Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
        ProtobufCMessage *resp = NULL;

        assert_int_equal(srpc_call(f->ch, &echo_method, &rq.base, 0, &resp, NULL), ST_OK);
        assert_int_equal(((Strata__V1__HelloRequest *)resp)->protocol_version, 2);
        protobuf_c_message_free_unpacked(resp, NULL);
    }

    /* A channel without a token: the handler sees none. */
    srpc_channel_t *anon = open_channel(f->srv, NULL);
    Strata__V1__HelloRequest *rs = echo(anon, "t", 3, ST_OK);
    assert_string_equal(rs->auth_token, "");
    protobuf_c_message_free_unpacked(&rs->base, NULL);
    srpc_channel_close(anon);
}

typedef struct barrier_arg {
    srpc_channel_t *ch;
    int need;
    st_status_t st;
    srpc_error_t err;
} barrier_arg_t;

static void *barrier_caller(void *p)
{
    barrier_arg_t *a = p;
    Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;

    rq.block_tokens = (uint32_t)a->need;
    a->st = srpc_call(a->ch, &barrier_method, &rq.base, 30000, &resp, &a->err);
    if (resp != NULL) {
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    return NULL;
}

/* N calls from N threads are all inside their handlers at the same moment. */
static void test_calls_run_concurrently(void **state)
{
    fixture_t *f = *state;
    pthread_t th[N_THREADS];
    barrier_arg_t args[N_THREADS];

    for (int i = 0; i < N_THREADS; i++) {
        args[i] = (barrier_arg_t){.ch = f->ch, .need = N_THREADS};
        assert_int_equal(pthread_create(&th[i], NULL, barrier_caller, &args[i]), 0);
    }
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(th[i], NULL);
    }
    for (int i = 0; i < N_THREADS; i++) {
        if (args[i].st != ST_OK) {
            fail_msg("call %d: %s (%s)", i, st_status_name(args[i].st), args[i].err.message);
        }
    }
    assert_int_equal(g_max_inside, N_THREADS);
}

typedef struct many_arg {
    srpc_channel_t *ch;
    int calls;
    int ok;
} many_arg_t;

static void *many_caller(void *p)
{
    many_arg_t *a = p;

    for (int i = 0; i < a->calls; i++) {
        Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
        ProtobufCMessage *resp = NULL;
        char tenant[32];

        snprintf(tenant, sizeof(tenant), "t%d", i);
        rq.tenant = tenant;
        if (srpc_call(a->ch, &echo_method, &rq.base, 10000, &resp, NULL) == ST_OK &&
            strcmp(((Strata__V1__HelloRequest *)resp)->tenant, tenant) == 0) {
            a->ok++;
        }
        if (resp != NULL) {
            protobuf_c_message_free_unpacked(resp, NULL);
        }
    }
    return NULL;
}

/* Many calls from several threads on one channel; the counters add up. */
static void test_many_calls_and_stats(void **state)
{
    fixture_t *f = *state;
    pthread_t th[4];
    many_arg_t args[4];
    srpc_method_stats_t stats[TEST_TABLE_N + 1];
    uint64_t before, bucket_sum = 0;

    assert_int_equal(srpc_server_stats(f->srv, stats, TEST_TABLE_N + 1), TEST_TABLE_N + 1);
    assert_string_equal(stats[0].path, echo_method.path);
    assert_string_equal(stats[TEST_TABLE_N].path, "/grpc.health.v1.Health/Check");
    before = stats[0].calls;
    for (int i = 0; i < 4; i++) {
        args[i] = (many_arg_t){.ch = f->ch, .calls = 100};
        assert_int_equal(pthread_create(&th[i], NULL, many_caller, &args[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(args[i].ok, 100);
    }
    srpc_server_stats(f->srv, stats, TEST_TABLE_N + 1);
    assert_int_equal(stats[0].calls - before, 400);
    for (int b = 0; b < SRPC_LATENCY_BUCKETS; b++) {
        bucket_sum += stats[0].latency[b];
    }
    assert_int_equal(bucket_sum, stats[0].calls);
    assert_int_equal(stats[0].by_code[GRPC_STATUS_OK], stats[0].calls);
}

/* Bytes that are no protobuf get INVALID_ARGUMENT; the server keeps serving. */
static void test_malformed_request(void **state)
{
    fixture_t *f = *state;
    /* Field 1 as a length-delimited string claiming 100 bytes, with 3. */
    static const uint8_t bad[] = {0x0a, 0x64, 'a', 'b', 'c'};
    /* Wire type 7 does not exist. */
    static const uint8_t bad2[] = {0x0f, 0x01};
    void *resp = NULL;
    size_t len = 0;
    srpc_error_t err;

    assert_int_equal(
        srpc_call_raw(f->ch, echo_method.path, bad, sizeof(bad), 5000, &resp, &len, &err),
        ST_ERR_INVALID);
    assert_int_equal(err.grpc_code, GRPC_STATUS_INVALID_ARGUMENT);
    assert_non_null(strstr(err.message, "does not parse as strata.v1.HelloRequest"));
    assert_int_equal(
        srpc_call_raw(f->ch, echo_method.path, bad2, sizeof(bad2), 5000, &resp, &len, &err),
        ST_ERR_INVALID);

    /* An empty message is a valid (all-default) request. */
    assert_int_equal(srpc_call_raw(f->ch, echo_method.path, NULL, 0, 5000, &resp, &len, &err),
                     ST_OK);
    assert_string_equal(err.message, "");
    free(resp);

    Strata__V1__HelloRequest *rs = echo(f->ch, "after-garbage", 10, ST_OK);
    assert_string_equal(rs->tenant, "after-garbage");
    protobuf_c_message_free_unpacked(&rs->base, NULL);
}

/* Over the server's limit (gRPC) and over a method's limit (the framework). */
static void test_oversize_request(void **state)
{
    fixture_t *f = *state;
    Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    srpc_error_t err;
    size_t big = MAX_BYTES + 4096;
    uint8_t *bytes = calloc(1, big);

    rq.client_address.data = bytes;
    rq.client_address.len = big;
    assert_int_equal(srpc_call(f->ch, &echo_method, &rq.base, 10000, &resp, &err),
                     ST_ERR_EXHAUSTED);
    assert_int_equal(err.grpc_code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_null(resp);

    rq.client_address.len = 2048;
    assert_int_equal(srpc_call(f->ch, &small_method, &rq.base, 10000, &resp, &err),
                     ST_ERR_EXHAUSTED);
    assert_non_null(strstr(err.message, "exceeds the limit of 1024 bytes"));
    rq.client_address.len = 100;
    assert_int_equal(srpc_call(f->ch, &small_method, &rq.base, 10000, &resp, &err), ST_OK);
    protobuf_c_message_free_unpacked(resp, NULL);
    free(bytes);

    Strata__V1__HelloRequest *rs = echo(f->ch, "after-oversize", 10, ST_OK);
    protobuf_c_message_free_unpacked(&rs->base, NULL);
}

static void check_fail(srpc_channel_t *ch, st_status_t code, const char *tenant, int grpc_code,
                       const char *message)
{
    Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    srpc_error_t err;

    rq.block_tokens = (uint32_t)(-(int)code);
    rq.tenant = (char *)tenant;
    assert_int_equal(srpc_call(ch, &fail_method, &rq.base, 5000, &resp, &err),
                     st_status_from_grpc(grpc_code));
    assert_int_equal(err.grpc_code, grpc_code);
    assert_string_equal(err.message, message);
    assert_null(resp);
}

/* A handler's status reaches the client as the right code and message. */
static void test_handler_errors(void **state)
{
    fixture_t *f = *state;

    check_fail(f->ch, ST_ERR_NOT_FOUND, "acme", GRPC_STATUS_NOT_FOUND,
               "failing on purpose tenant=acme");
    check_fail(f->ch, ST_ERR_BUSY, "b", GRPC_STATUS_FAILED_PRECONDITION,
               "failing on purpose tenant=b");
    check_fail(f->ch, ST_ERR_PERMISSION, "", GRPC_STATUS_PERMISSION_DENIED,
               st_strerror(ST_ERR_PERMISSION));
    check_fail(f->ch, ST_ERR_CORRUPT, "", GRPC_STATUS_DATA_LOSS, st_strerror(ST_ERR_CORRUPT));
    check_fail(f->ch, ST_ERR_NOMEM, "", GRPC_STATUS_RESOURCE_EXHAUSTED, st_strerror(ST_ERR_NOMEM));
}

static void test_unknown_method(void **state)
{
    fixture_t *f = *state;
    void *resp = NULL;
    size_t len = 0;
    srpc_error_t err;

    assert_int_equal(
        srpc_call_raw(f->ch, "/strata.test.Test/Nope", NULL, 0, 5000, &resp, &len, &err),
        ST_ERR_UNSUPPORTED);
    assert_int_equal(err.grpc_code, GRPC_STATUS_UNIMPLEMENTED);
    /* A real Cache method that this server does not serve. */
    assert_int_equal(srpc_call_raw(f->ch, srpc_cache_methods[SRPC_CACHE_LOOKUP].path, NULL, 0, 5000,
                                   &resp, &len, &err),
                     ST_ERR_UNSUPPORTED);
}

/* A call that outlives its deadline fails with DEADLINE_EXCEEDED. */
static void test_deadline_exceeded(void **state)
{
    fixture_t *f = *state;
    Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    srpc_error_t err;
    int one = 1;

    reset_shared();
    assert_int_equal(srpc_call(f->ch, &block_method, &rq.base, 100, &resp, &err), ST_ERR_TIMEOUT);
    assert_int_equal(err.grpc_code, GRPC_STATUS_DEADLINE_EXCEEDED);
    wait_until(inside_at_least, &one); /* the handler did start */
    open_blocks();
    /* The released handler answers into a dead call; the server carries on. */
    Strata__V1__HelloRequest *rs = echo(f->ch, "after-deadline", 1, ST_OK);
    protobuf_c_message_free_unpacked(&rs->base, NULL);
}

static void test_health(void **state)
{
    fixture_t *f = *state;
    srpc_error_t err;
    int status = -1;

    assert_int_equal(srpc_health_check(f->ch, "", 5000, &status, &err), ST_OK);
    assert_int_equal(status, SRPC_HEALTH_SERVING);
    assert_int_equal(srpc_health_check(f->ch, "strata.test.Test", 5000, &status, &err), ST_OK);
    assert_int_equal(status, SRPC_HEALTH_SERVING);
    assert_int_equal(srpc_health_check(f->ch, "no.such.Service", 5000, &status, &err),
                     ST_ERR_NOT_FOUND);
    assert_int_equal(err.grpc_code, GRPC_STATUS_NOT_FOUND);
    assert_non_null(strstr(err.message, "no.such.Service"));

    assert_int_equal(srpc_server_set_serving(f->srv, "strata.test.Test", false), ST_OK);
    assert_int_equal(srpc_health_check(f->ch, "strata.test.Test", 5000, &status, &err), ST_OK);
    assert_int_equal(status, SRPC_HEALTH_NOT_SERVING);
    assert_int_equal(srpc_health_check(f->ch, "", 5000, &status, &err), ST_OK);
    assert_int_equal(status, SRPC_HEALTH_SERVING);
    assert_int_equal(srpc_server_set_serving(f->srv, "", false), ST_OK);
    assert_int_equal(srpc_health_check(f->ch, "", 5000, &status, &err), ST_OK);
    assert_int_equal(status, SRPC_HEALTH_NOT_SERVING);
    assert_int_equal(srpc_server_set_serving(f->srv, "", true), ST_OK);
    assert_int_equal(srpc_server_set_serving(f->srv, NULL, true), ST_ERR_INVALID);
}

/* ------------------------------------------------------- authentication -- */

static int g_auth_calls;

/* Accepts the token "good" (principal: 42 and the method), refuses the rest. */
static st_status_t test_auth(void *arg, const char *path, const char *token, const char *peer,
                             const char *identity, void *principal, char *msg, size_t cap)
{
    (void)arg;
    (void)peer;
    (void)identity;
    __atomic_add_fetch(&g_auth_calls, 1, __ATOMIC_SEQ_CST);
    if (token == NULL) {
        snprintf(msg, cap, "no token");
        return ST_ERR_UNAUTHENTICATED;
    }
    if (strcmp(token, "good") != 0) {
        snprintf(msg, cap, "bad token");
        return strcmp(token, "forbidden") == 0 ? ST_ERR_PERMISSION : ST_ERR_UNAUTHENTICATED;
    }
    *(int *)principal = 42;
    snprintf((char *)principal + sizeof(int), SRPC_PRINCIPAL_MAX - sizeof(int), "%s", path);
    return ST_OK;
}

static st_status_t principal_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                     ProtobufCMessage *resp, void *arg)
{
    const char *pr = srpc_ctx_principal(ctx);
    Strata__V1__HelloRequest *rs = (void *)resp;
    char md[32];

    (void)req;
    (void)arg;
    if (pr == NULL || *(const int *)(const void *)pr != 42) {
        return ST_ERR_INTERNAL;
    }
    rs->tenant = srpc_ctx_alloc(ctx, SRPC_PRINCIPAL_MAX);
    rs->model = srpc_ctx_alloc(ctx, sizeof(md));
    if (rs->tenant == NULL || rs->model == NULL) {
        return ST_ERR_NOMEM;
    }
    strcpy(rs->tenant, pr + sizeof(int));
    if (srpc_ctx_metadata(ctx, "strata-client", md, sizeof(md))) {
        strcpy(rs->model, md);
    }
    return ST_OK;
}

static void test_authenticate_before_unpack(void **state)
{
    static const srpc_method_def_t table[] = {{&echo_method, principal_handler, NULL, 0}};
    srpc_server_config_t cfg = {.address = "127.0.0.1:0", .authenticate = test_auth};
    static const uint8_t garbage[] = {0x0f, 0x01, 0xff, 0xff};
    srpc_server_t *srv = NULL;
    srpc_channel_t *none, *bad, *forbidden, *good;
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT, *rs = NULL;
    srpc_channel_config_t cc = {.token = "good", .client_id = "00000000000000ab"};
    void *resp = NULL;
    size_t len = 0;
    srpc_error_t err;
    char target[64];
    int hs = -1, code = -1;
    char msg[256];

    (void)state;
    assert_int_equal(srpc_server_start(&cfg, table, 1, &srv), ST_OK);
    none = open_channel(srv, NULL);
    bad = open_channel(srv, "bad");
    forbidden = open_channel(srv, "forbidden");
    snprintf(target, sizeof(target), "127.0.0.1:%d", srpc_server_port(srv));
    assert_int_equal(srpc_channel_open(target, &cc, &good), ST_OK);
    /* Refused before the body is read: garbage is UNAUTHENTICATED, not INVALID_ARGUMENT. */
    assert_int_equal(
        srpc_call_raw(none, echo_method.path, garbage, sizeof(garbage), 5000, &resp, &len, &err),
        ST_ERR_UNAUTHENTICATED);
    assert_int_equal(err.grpc_code, GRPC_STATUS_UNAUTHENTICATED);
    assert_string_equal(err.message, "no token");
    assert_int_equal(
        srpc_call_raw(bad, echo_method.path, garbage, sizeof(garbage), 5000, &resp, &len, &err),
        ST_ERR_UNAUTHENTICATED);
    assert_int_equal(srpc_call_raw(forbidden, echo_method.path, garbage, sizeof(garbage), 5000,
                                   &resp, &len, &err),
                     ST_ERR_PERMISSION);
    assert_int_equal(err.grpc_code, GRPC_STATUS_PERMISSION_DENIED);
    /* Authenticated: the garbage is parsed (and refused), a good request reaches the handler
     * with the principal and the metadata. */
    assert_int_equal(
        srpc_call_raw(good, echo_method.path, garbage, sizeof(garbage), 5000, &resp, &len, &err),
        ST_ERR_INVALID);
    assert_int_equal(srpc_call(good, &echo_method, &req.base, 5000, (ProtobufCMessage **)&rs, &err),
                     ST_OK);
    assert_string_equal(rs->tenant, echo_method.path);
    assert_string_equal(rs->model, "00000000000000ab");
    protobuf_c_message_free_unpacked(&rs->base, NULL);
    srpc_channel_set_client(good, "00000000000000cd");
    assert_int_equal(srpc_call(good, &echo_method, &req.base, 5000, (ProtobufCMessage **)&rs, &err),
                     ST_OK);
    assert_string_equal(rs->model, "00000000000000cd");
    protobuf_c_message_free_unpacked(&rs->base, NULL);
    /* Health checks are not authenticated. */
    g_auth_calls = 0;
    assert_int_equal(srpc_health_check(none, "", 5000, &hs, &err), ST_OK);
    assert_int_equal(hs, SRPC_HEALTH_SERVING);
    assert_int_equal(g_auth_calls, 0);
    /* srpc_server_invoke: the token it is given goes to the callback first. */
    srpc_server_invoke(srv, echo_method.path, NULL, garbage, sizeof(garbage), &resp, &len, &code,
                       msg, sizeof(msg));
    assert_int_equal(code, GRPC_STATUS_UNAUTHENTICATED);
    assert_string_equal(msg, "no token");
    srpc_server_invoke(srv, echo_method.path, "good", NULL, 0, &resp, &len, &code, msg,
                       sizeof(msg));
    assert_int_equal(code, GRPC_STATUS_OK);
    free(resp);
    srpc_channel_close(none);
    srpc_channel_close(bad);
    srpc_channel_close(forbidden);
    srpc_channel_close(good);
    srpc_server_destroy(srv);
}

/* ---------------------------------------------------- lifecycle and fan-out -- */

typedef struct block_call {
    srpc_channel_t *ch;
    st_status_t st;
    srpc_error_t err;
    char node_id[64];
} block_call_t;

static void *block_caller(void *p)
{
    block_call_t *a = p;
    Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;

    a->st = srpc_call(a->ch, &block_method, &rq.base, 30000, &resp, &a->err);
    if (resp != NULL) {
        snprintf(a->node_id, sizeof(a->node_id), "%s",
                 ((Strata__V1__HelloResponse *)resp)->node_id);
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    return NULL;
}

typedef struct stop_arg {
    srpc_server_t *srv;
    int grace_ms;
} stop_arg_t;

static void *stopper(void *p)
{
    stop_arg_t *a = p;

    srpc_server_stop(a->srv, a->grace_ms);
    return NULL;
}

static int server_stopping(void *arg)
{
    return srpc_server_stopping(arg);
}

/* Calls in flight finish; new calls get UNAVAILABLE; health says NOT_SERVING. */
static void test_graceful_shutdown(void **state)
{
    srpc_server_t *srv;
    srpc_channel_t *ch, *late;
    pthread_t caller[2], stop_th;
    static block_call_t calls[2]; /* static: threads outlive a failed assertion */
    static stop_arg_t sa;
    srpc_error_t err;
    int two = 2;

    reset_shared();
    srv = start_server();
    ch = open_channel(srv, NULL);
    for (int i = 0; i < 2; i++) {
        calls[i] = (block_call_t){.ch = ch};
        assert_int_equal(pthread_create(&caller[i], NULL, block_caller, &calls[i]), 0);
    }
    wait_until(inside_at_least, &two);

    sa = (stop_arg_t){srv, -1};
    assert_int_equal(pthread_create(&stop_th, NULL, stopper, &sa), 0);
    wait_until(server_stopping, srv);

    /* A new client cannot reach the server any more. */
    /*
     * A new client cannot reach the server any more: UNAVAILABLE, or CANCELLED
     * when its connection slipped in while gRPC was closing the listener.
     */
    Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    st_status_t st;
    int status = -1;

    late = open_channel(srv, NULL);
    st = srpc_call(late, &echo_method, &rq.base, 5000, &resp, &err);
    assert_true(st == ST_ERR_UNAVAILABLE || st == ST_ERR_CANCELLED);
    assert_null(resp);
    srpc_channel_close(late);
    /* So can a new call on a connection that was open before. */
    st = srpc_health_check(ch, "", 2000, &status, &err);
    assert_true(st == ST_ERR_UNAVAILABLE || st == ST_ERR_CANCELLED);
    assert_int_equal(status, -1);

    /* The calls in flight are still running, then finish normally. */
    pthread_mutex_lock(&g_lock);
    assert_int_equal(g_block_served, 0);
    pthread_mutex_unlock(&g_lock);
    open_blocks();
    for (int i = 0; i < 2; i++) {
        pthread_join(caller[i], NULL);
        if (calls[i].st != ST_OK) {
            fail_msg("in-flight call %d: %s (%s)", i, st_status_name(calls[i].st),
                     calls[i].err.message);
        }
        assert_string_equal(calls[i].node_id, "blocked-and-released");
    }
    pthread_join(stop_th, NULL);
    srpc_server_stop(srv, 0); /* idempotent */
    srpc_channel_close(ch);
    srpc_server_destroy(srv);
}

/* Past the grace period, calls in flight are cancelled. */
static void test_shutdown_grace_expires(void **state)
{
    srpc_server_t *srv;
    srpc_channel_t *ch;
    pthread_t caller, stop_th;
    static block_call_t call;
    static stop_arg_t sa;
    int one = 1;

    reset_shared();
    srv = start_server();
    ch = open_channel(srv, NULL);
    call = (block_call_t){.ch = ch};
    assert_int_equal(pthread_create(&caller, NULL, block_caller, &call), 0);
    wait_until(inside_at_least, &one);
    sa = (stop_arg_t){srv, 50};
    assert_int_equal(pthread_create(&stop_th, NULL, stopper, &sa), 0);
    pthread_join(caller, NULL); /* returns once the server cancels it */
    /* gRPC cancels the calls of a server that gave up on them with UNAVAILABLE. */
    assert_int_equal(call.st, ST_ERR_UNAVAILABLE);
    pthread_mutex_lock(&g_lock);
    assert_int_equal(g_block_served, 0); /* cancelled while still inside the handler */
    pthread_mutex_unlock(&g_lock);
    open_blocks(); /* the handler may now return; stop completes */
    pthread_join(stop_th, NULL);
    srpc_channel_close(ch);
    srpc_server_destroy(srv);
}

/* Three peers, one of them down: the down one reports UNAVAILABLE. */
static void test_fanout_one_down(void **state)
{
    srpc_server_t *up[2], *gone;
    srpc_channel_t *ch[3];
    srpc_fanout_item_t items[3];
    Strata__V1__HelloRequest rq[3];
    char tenant[3][16];

    reset_shared();
    up[0] = start_server();
    up[1] = start_server();
    gone = start_server();
    ch[0] = open_channel(up[0], NULL);
    ch[1] = open_channel(gone, NULL);
    ch[2] = open_channel(up[1], NULL);
    srpc_server_destroy(gone); /* nothing listens on its port now */

    for (int i = 0; i < 3; i++) {
        strata__v1__hello_request__init(&rq[i]);
        snprintf(tenant[i], sizeof(tenant[i]), "peer-%d", i);
        rq[i].tenant = tenant[i];
        items[i] = (srpc_fanout_item_t){.ch = ch[i], .req = &rq[i].base};
    }
    assert_int_equal(srpc_fanout(&echo_method, items, 3, 10000), ST_OK);
    assert_int_equal(items[0].status, ST_OK);
    assert_int_equal(items[2].status, ST_OK);
    assert_string_equal(((Strata__V1__HelloRequest *)items[0].resp)->tenant, "peer-0");
    assert_string_equal(((Strata__V1__HelloRequest *)items[2].resp)->tenant, "peer-2");
    assert_int_equal(items[1].status, ST_ERR_UNAVAILABLE);
    assert_int_equal(items[1].err.grpc_code, GRPC_STATUS_UNAVAILABLE);
    assert_null(items[1].resp);
    srpc_fanout_free(items, 3);
    assert_null(items[0].resp);

    assert_int_equal(srpc_fanout(&echo_method, items, 0, 1000), ST_OK);
    Strata__V1__StatsRequest wrong = STRATA__V1__STATS_REQUEST__INIT;
    items[0].req = &wrong.base; /* not an Echo request */
    assert_int_equal(srpc_fanout(&echo_method, items, 1, 1000), ST_ERR_INVALID);

    for (int i = 0; i < 3; i++) {
        srpc_channel_close(ch[i]);
    }
    srpc_server_destroy(up[0]);
    srpc_server_destroy(up[1]);
}

static void test_config_errors(void **state)
{
    srpc_server_config_t cfg = {.address = "127.0.0.1:0"};
    srpc_server_t *srv = NULL, *srv2 = NULL;
    srpc_method_def_t bad = {&echo_method, NULL, NULL, 0};
    srpc_channel_t *ch = NULL;
    char addr[64];

    assert_int_equal(srpc_server_start(NULL, test_table, TEST_TABLE_N, &srv), ST_ERR_INVALID);
    cfg.address = NULL;
    assert_int_equal(srpc_server_start(&cfg, test_table, TEST_TABLE_N, &srv), ST_ERR_INVALID);
    cfg.address = "127.0.0.1:0";
    assert_int_equal(srpc_server_start(&cfg, &bad, 1, &srv), ST_ERR_INVALID);
    cfg.n_threads = 2;
    cfg.n_cqs = 3;
    assert_int_equal(srpc_server_start(&cfg, test_table, TEST_TABLE_N, &srv), ST_ERR_INVALID);
    cfg.n_cqs = 2;
    cfg.tls_cert_pem = "-----BEGIN CERTIFICATE-----"; /* no key, no certificate: test_rpc_tls */
    assert_int_equal(srpc_server_start(&cfg, test_table, TEST_TABLE_N, &srv), ST_ERR_INVALID);
    cfg.tls_cert_pem = NULL;
    cfg.address = "unix:/nonexistent-dir/strata.sock";
    assert_int_equal(srpc_server_start(&cfg, test_table, TEST_TABLE_N, &srv), ST_ERR_IO);
    assert_null(srv);

    /* Two queues of one thread each; then a second server on the same port. */
    cfg.address = "127.0.0.1:0";
    assert_int_equal(srpc_server_start(&cfg, test_table, TEST_TABLE_N, &srv), ST_OK);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", srpc_server_port(srv));
    cfg.address = addr;
    assert_int_equal(srpc_server_start(&cfg, test_table, TEST_TABLE_N, &srv2), ST_ERR_IO);
    assert_null(srv2);
    ch = open_channel(srv, NULL);
    Strata__V1__HelloRequest *rs = echo(ch, "two-queues", 5, ST_OK);
    protobuf_c_message_free_unpacked(&rs->base, NULL);
    srpc_channel_close(ch);
    srpc_server_destroy(srv);

    assert_int_equal(srpc_channel_open(NULL, NULL, &ch), ST_ERR_INVALID);
    srpc_server_destroy(NULL);
    srpc_channel_close(NULL);
}

int main(void)
{
    const struct CMUnitTest call_tests[] = {
        cmocka_unit_test(test_method_table_matches_proto),
        cmocka_unit_test(test_echo_roundtrip),
        cmocka_unit_test(test_calls_run_concurrently),
        cmocka_unit_test(test_many_calls_and_stats),
        cmocka_unit_test(test_malformed_request),
        cmocka_unit_test(test_oversize_request),
        cmocka_unit_test(test_handler_errors),
        cmocka_unit_test(test_unknown_method),
        cmocka_unit_test(test_deadline_exceeded),
        cmocka_unit_test(test_health),
        cmocka_unit_test(test_authenticate_before_unpack),
    };
    const struct CMUnitTest lifecycle_tests[] = {
        cmocka_unit_test(test_graceful_shutdown),
        cmocka_unit_test(test_shutdown_grace_expires),
        cmocka_unit_test(test_fanout_one_down),
        cmocka_unit_test(test_config_errors),
    };
    int failed;

    /* STRATA_TEST_VERBOSE=1: debug lines; =2: also gRPC's own debug lines. */
    const char *verbose = getenv("STRATA_TEST_VERBOSE");
    lg_set_level(verbose == NULL ? LG_ERROR : atoi(verbose) >= 2 ? LG_TRACE : LG_DEBUG);
    failed = cmocka_run_group_tests_name("rpc calls", call_tests, fixture_setup, fixture_teardown);
    failed += cmocka_run_group_tests_name("rpc lifecycle", lifecycle_tests, NULL, NULL);
    return failed;
}
