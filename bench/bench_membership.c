/*
 * bench_membership.c - how fast a membership change reaches every ring
 * (docs/performance.md "Membership on etcd"), against etcd's own watch.
 *
 * A real etcd-server (tests/support/etcd_fixture.c) and --daemons real
 * stratad with --etcd on loopback, and a libstrata client with etcd and a
 * 100 ms health_interval. Each round puts a member record (a serving member
 * that joins) and then deletes it (it leaves); for each change it times,
 * from just before the put or delete is sent:
 *   watch    the event on a watch of the bench's own (the peer: etcd's
 *            notification latency, the floor for any watcher);
 *   daemons  until every daemon's Hello gives the change's epoch (their
 *            watch, the apply of the new ring, the next Hello);
 *   client   until the client's st_client_ring_epoch() gives it (it reads
 *            the members every health_interval: about half of it on average).
 * Prints medians, p99 and spreads (MAD) in ms, and daemons / watch.
 *
 *   bench_membership [--stratad PATH] [--daemons 3] [--rounds 50]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "cluster.h"
#include "etcd.h"
#include "etcd_fixture.h"
#include "member.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/strata.h"

static uint64_t bm_hello_epoch(srpc_channel_t *ch)
{
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *resp = NULL;
    uint64_t e = 0;

    req.protocol_version = 1;
    req.tenant = "bench";
    req.model = "membership";
    if (srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &req.base, 2000,
                  (ProtobufCMessage **)&resp, NULL) == ST_OK) {
        e = resp->ring_epoch;
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    return e;
}

typedef struct bm_run {
    srpc_etcd_t *cl;
    srpc_etcd_watch_t *w;
    srpc_channel_t *ch[TC_MAX_NODES];
    int n;
    st_client_t *client;
} bm_run_t;

/* One change (put when rec, else delete): the three latencies in ms; 0 on failure. */
static int bm_change(bm_run_t *r, const char *key, const char *rec, double out[3])
{
    Etcdserverpb__EtcdWatchResponse *ev;
    uint64_t t0, t_watch = 0, t_daemons = 0, t_client = 0, deadline;
    int64_t rev = 0;
    st_status_t st;

    t0 = bench_now_ns();
    st = rec != NULL ? srpc_etcd_put(r->cl, key, rec, strlen(rec), 0, 2000, &rev)
                     : srpc_etcd_delete(r->cl, key, 2000, &rev);
    if (st != ST_OK) {
        return 0;
    }
    deadline = t0 + 10ull * 1000000000ull;
    while (t_watch == 0 || t_daemons == 0 || t_client == 0) {
        if (bench_now_ns() > deadline) {
            fprintf(stderr, "bench_membership: no convergence within 10 s (revision %lld)\n",
                    (long long)rev);
            return 0;
        }
        if (t_watch == 0 && srpc_etcd_watch_next(r->w, 1, &ev) == ST_OK) {
            for (size_t i = 0; i < ev->n_events; i++) {
                if (ev->events[i]->kv != NULL && ev->events[i]->kv->mod_revision >= rev) {
                    t_watch = bench_now_ns();
                }
            }
            protobuf_c_message_free_unpacked(&ev->base, NULL);
        }
        if (t_daemons == 0) {
            int all = 1;

            for (int i = 0; i < r->n && all; i++) {
                all = bm_hello_epoch(r->ch[i]) >= (uint64_t)rev;
            }
            if (all) {
                t_daemons = bench_now_ns();
            }
        }
        if (t_client == 0 && st_client_ring_epoch(r->client) >= (uint64_t)rev) {
            t_client = bench_now_ns();
        }
    }
    out[0] = (double)(t_watch - t0) / 1e6;
    out[1] = (double)(t_daemons - t0) / 1e6;
    out[2] = (double)(t_client - t0) / 1e6;
    return 1;
}

static void bm_print(const char *what, double *s, size_t n)
{
    bench_stats_t st;

    bench_stats(s, n, &st);
    printf("%-8s median %8.2f  p99 %8.2f  MAD %6.2f  min %7.2f  max %7.2f\n", what, st.median,
           st.p99, st.mad, st.min, st.max);
}

int main(int argc, char **argv)
{
    const char *stratad = "build/release/cached/stratad";
    int n = 3, rounds = 50, ok = 1;
    bench_opt_t opts[] = {{"--stratad", BENCH_OPT_STR, &stratad},
                          {"--daemons", BENCH_OPT_INT, &n},
                          {"--rounds", BENCH_OPT_INT, &rounds}};
    size_t k = 0, cap;
    double *lat[3];
    st_client_params_t p = {0};
    et_etcd_t etcd;
    tc_cluster_t cl;
    bm_run_t r = {0};

    if (bench_opt_pairs(argc, argv, 1, opts, 3) != 0 || n < 1 || n > TC_MAX_NODES || rounds < 1) {
        fprintf(stderr, "usage: bench_membership [--stratad PATH] [--daemons 1..8] [--rounds N]\n");
        return 2;
    }
    cap = (size_t)rounds * 2;
    for (int i = 0; i < 3; i++) {
        lat[i] = calloc(cap, sizeof(double));
    }
    if (et_start(&etcd, NULL) != 0 ||
        tc_start_etcd(&cl, stratad, n, etcd.endpoint, "--etcd-ttl 10") != 0) {
        fprintf(stderr, "bench_membership: cannot start etcd and the daemons\n");
        return 1;
    }
    r.n = n;
    for (int i = 0; i < n; i++) {
        srpc_channel_open(cl.node[i].addr, NULL, &r.ch[i]);
    }
    p.field_mask = ST_CLIENT_FIELD_ETCD | ST_CLIENT_FIELD_HEALTH_INTERVAL | ST_CLIENT_FIELD_TENANT |
                   ST_CLIENT_FIELD_MODEL;
    p.etcd = etcd.endpoint;
    p.health_interval_ms = 100;
    p.tenant = "bench";
    p.model = "membership";
    if (srpc_etcd_open(etcd.endpoint, &r.cl) != ST_OK ||
        srpc_etcd_watch_open(r.cl, "/strata/members/", 0, 2000, &r.w) != ST_OK ||
        st_client_connect(&p, &r.client) != ST_OK) {
        fprintf(stderr, "bench_membership: set-up failed: %s\n", st_client_last_error());
        tc_stop_all(&cl);
        et_destroy(&etcd);
        return 1;
    }
    for (int i = 0; i < rounds && ok; i++) {
        mr_member_t m = {0};
        char rec[MR_MAX_RECORD + 1], key[MR_MAX_FIELD + 32];
        double out[3];

        snprintf(m.name, sizeof(m.name), "bench-%d", i);
        snprintf(m.grpc, sizeof(m.grpc), "127.0.0.1:%d", 1 + i % 1000);
        m.state = MR_SERVING;
        mr_format(&m, rec, sizeof(rec));
        snprintf(key, sizeof(key), "/strata/members/%s", m.name);
        for (int del = 0; del < 2 && ok; del++) {
            ok = bm_change(&r, key, del ? NULL : rec, out);
            for (int j = 0; ok && j < 3; j++) {
                lat[j][k] = out[j];
            }
            k += ok;
            usleep(20000);
        }
    }
    printf("bench_membership: %d daemons, %zu changes (a serving member joins, then leaves), "
           "client health_interval 100 ms\n",
           n, k);
    if (k > 0) {
        double ratio[2 * 1024];
        size_t nr = k < 2048 ? k : 2048;

        for (size_t i = 0; i < nr; i++) {
            ratio[i] = lat[1][i] / (lat[0][i] > 0.001 ? lat[0][i] : 0.001);
        }
        bm_print("watch", lat[0], k);
        bm_print("daemons", lat[1], k);
        bm_print("client", lat[2], k);
        bm_print("ratio", ratio, nr);
        printf("(ms; ratio: daemons / watch per change, etcd's own notification the peer)\n");
    }
    st_client_close(r.client);
    srpc_etcd_watch_close(r.w);
    srpc_etcd_close(r.cl);
    for (int i = 0; i < n; i++) {
        srpc_channel_close(r.ch[i]);
    }
    tc_stop_all(&cl);
    et_destroy(&etcd);
    return ok ? 0 : 1;
}
