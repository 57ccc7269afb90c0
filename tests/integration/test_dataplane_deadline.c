/*
 * test_dataplane_deadline.c - a get whose one-sided reads never complete
 * (its daemon stopped with SIGSTOP once they are posted) returns
 * ST_ERR_TIMEOUT within its timeout plus a bounded slack, nothing lands in
 * the caller's buffer after the call returned (checked after the daemon
 * resumed and had time to answer the reads), and the next get works.
 */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "client_fixture.h"
#include "client_internal.h"
#include "cluster.h"
#include "dp_harness.h"
#include "strata/strata.h"
#include "test_dataplane.h"

#define DL_TIMEOUT_MS 300
#define DL_SLACK_MS   1000 /* what a return may take past the timeout (a loaded machine) */
#define DL_N          4
#define DL_OBJ        (4u << 20)

typedef struct dl_state {
    tc_cluster_t *cl;
    _Atomic int arm, stopped;
    struct timespec t_stop; /* when the daemon was stopped */
} dl_state_t;

/* In the get batch, its reads posted: the daemon stops (once). */
static void dl_stop(void *arg)
{
    dl_state_t *s = arg;

    if (atomic_exchange(&s->arm, 0)) {
        tc_signal(s->cl, 0, SIGSTOP);
        clock_gettime(CLOCK_MONOTONIC, &s->t_stop);
        atomic_store(&s->stopped, 1);
    }
}

/* Resumes the daemon after 5 s whatever happens (an unbounded get returns
 * then, and fails the test instead of hanging it). */
static void *dl_watchdog(void *arg)
{
    dl_state_t *s = arg;

    sleep(5);
    tc_signal(s->cl, 0, SIGCONT);
    return NULL;
}

static double dl_ms_since(const struct timespec *t0)
{
    struct timespec t1;

    clock_gettime(CLOCK_MONOTONIC, &t1);
    return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Gets the DL_N objects into dst (filled with 0xA5 first); the handle's
 * status, and in *ms how long the call took. */
static st_status_t dl_get(st_client_t *c, const st_hash_t *chain, uint8_t *dst, st_get_op_t *g,
                          double *ms)
{
    struct timespec t0;
    st_handle_t *h;
    st_status_t st;

    memset(dst, 0xA5, (size_t)DL_N * DL_OBJ);
    for (int k = 0; k < DL_N; k++) {
        g[k] = (st_get_op_t){.block = (uint64_t)k,
                             .kind = ST_KIND_KV,
                             .dst = dst + (size_t)k * DL_OBJ,
                             .dst_len = DL_OBJ};
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    assert_int_equal(st_client_get(c, chain, DL_N, g, DL_N, &h), ST_OK);
    st = st_handle_wait(h, -1);
    *ms = dl_ms_since(&t0);
    st_handle_release(h);
    return st;
}

void test_get_deadline_stopped_daemon(void **state)
{
    tc_cluster_t cl;
    dl_state_t s = {.cl = &cl};
    st_client_params_t p;
    st_client_t *c;
    st_hash_t *chain;
    st_put_op_t puts[DL_N + 1];
    st_get_op_t g[DL_N], one;
    uint8_t *src = malloc((size_t)DL_N * DL_OBJ), *dst = malloc((size_t)DL_N * DL_OBJ);
    uint8_t *snap = malloc((size_t)DL_N * DL_OBJ), *other = malloc(DL_OBJ);
    pthread_t wd;
    double ms, after;
    int timed_out = 0;
    st_handle_t *h;

    (void)state;
    assert_non_null(src), assert_non_null(dst), assert_non_null(snap), assert_non_null(other);
    td_start(&cl, "--memory-limit 256M --chunk-bytes 32M");
    cf_params_transport(&p, cl.node[0].addr, td_spec, 20000);
    c = cf_connect(&p);
    chain = dh_make_chain(c, 9, DL_N + 1);
    for (int k = 0; k < DL_N; k++) {
        dh_fill(src + (size_t)k * DL_OBJ, DL_OBJ, (uint64_t)k, 5);
        puts[k] = (st_put_op_t){.block = (uint64_t)k,
                                .kind = ST_KIND_KV,
                                .src = src + (size_t)k * DL_OBJ,
                                .len = DL_OBJ};
    }
    puts[DL_N] = puts[0]; /* block DL_N: the same bytes as block 0 */
    puts[DL_N].block = DL_N;
    assert_int_equal(st_client_put(c, chain, DL_N + 1, puts, DL_N + 1, 0, &h), ST_OK);
    dh_run(h);
    st_client_close(c);

    cf_params_transport(&p, cl.node[0].addr, td_spec, DL_TIMEOUT_MS);
    c = cf_connect(&p);
    sc_dp_test_on_posted(c, dl_stop, &s);
    atomic_store(&s.arm, 1);
    assert_int_equal(pthread_create(&wd, NULL, dl_watchdog, &s), 0);
    (void)dl_get(c, chain, dst, g, &ms);
    after = dl_ms_since(&s.t_stop);
    memcpy(snap, dst, (size_t)DL_N * DL_OBJ);
    for (int k = 0; k < DL_N; k++) {
        timed_out += g[k].status == ST_ERR_TIMEOUT;
    }
    print_message(
        "get with the daemon stopped: %.0f ms (timeout %d ms; the daemon stopped at %.0f ms), "
        "%d of %d ops ST_ERR_TIMEOUT, stopped=%d\n",
        ms, DL_TIMEOUT_MS, atomic_load(&s.stopped) ? ms - after : 0.0, timed_out, DL_N,
        atomic_load(&s.stopped));
    assert_true(atomic_load(&s.stopped));
    assert_true(ms < DL_TIMEOUT_MS + DL_SLACK_MS);
    for (int k = 0; k < DL_N; k++) {
        /* A transport whose reads need no daemon (UCX shared memory) lands them. */
        if (g[k].status == ST_OK) {
            assert_memory_equal(dst + (size_t)k * DL_OBJ, src + (size_t)k * DL_OBJ, DL_OBJ);
        } else {
            assert_int_equal(g[k].status, ST_ERR_TIMEOUT);
        }
    }
    /* The daemon resumes and answers what it was asked: none of it lands.
     * Meanwhile (health_interval 100 ms here) the client's next Hello connects its
     * data plane to the node again. */
    tc_signal(&cl, 0, SIGCONT);
    usleep(1500000);
    assert_memory_equal(dst, snap, (size_t)DL_N * DL_OBJ);
    /* A get of another object progresses the client's transport (where a
     * late completion would land its bytes); dst stays as it was. */
    one = (st_get_op_t){.block = DL_N, .kind = ST_KIND_KV, .dst = other, .dst_len = DL_OBJ};
    assert_int_equal(st_client_get(c, chain, DL_N + 1, &one, 1, &h), ST_OK);
    dh_run(h);
    assert_int_equal(one.status, ST_OK);
    assert_memory_equal(other, src, DL_OBJ);
    usleep(200000);
    assert_memory_equal(dst, snap, (size_t)DL_N * DL_OBJ);

    sc_dp_test_on_posted(c, NULL, NULL);
    for (int k = 0; k < DL_N; k++) {
        g[k].status = ST_ERR_UNAVAILABLE;
    }
    assert_int_equal(dl_get(c, chain, dst, g, &ms), ST_OK);
    for (int k = 0; k < DL_N; k++) {
        assert_int_equal(g[k].status, ST_OK);
    }
    assert_memory_equal(dst, src, (size_t)DL_N * DL_OBJ);
    pthread_join(wd, NULL);
    free(src), free(dst), free(snap), free(other), free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
}
