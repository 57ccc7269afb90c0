/*
 * test_rebalance.c - durable objects when members change (issue #23;
 * docs/daemon.md "Membership changes"), in static mode: real stratad daemons
 * on loopback with their own SSD tiers, whose peers come from a config file
 * that the test rewrites before it sends SIGHUP.
 *
 * R = 2. Three daemons take durable sessions and KDA checkpoints through
 * libstrata; then, one change at a time:
 *   - join: a 4th daemon starts and every node re-reads the peers;
 *   - drain: a Drain call to one node; it hands its objects over and exits 0;
 *   - join again (a 5th); kill -9 and restart of one (it must still know what
 *     it holds); then kill -9 of another and the list without it.
 * After each change, every durable object is on exactly its 2 replicas of
 * the new ring, with the bytes (KDA) and the version (sessions) written,
 * asked of each node alone; and readable through libstrata over the new list
 * right after the change (while objects move) and once they moved.
 *
 * The same changes with membership on etcd (a real etcd-server, the daemons
 * with --etcd, a client that finds them there): three register, a 4th joins,
 * one is drained, a 5th joins, one is killed with -9 (its lease expires),
 * etcd is restarted with its data and then empty. After each, every member's
 * Hello gives the ring over exactly the live members at one epoch, which the
 * etcd client has too; the client reads every object; and every durable
 * object is on exactly its R replicas again.
 *
 * Two joins inside one pass (the rebalancers held by a planted fault, Debug
 * builds): what the new ring places on the two new members alone is read
 * from its old holders, the members after its replicas.
 *
 * And who may call Replicate and Drain: the cluster credential; Drain also
 * the admin; never a tenant's token (a tenant could otherwise write into any
 * tenant's namespace, or stop a node). Copies are checked on arrival.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <grpc/status.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "client_fixture.h"
#include "cluster.h"
#include "data_dirs.h"
#include "etcd_fixture.h"
#include "grpc_conn.h"
#include "ring.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "tenants.h"

static const char *stratad_path;

#define SLOTS    5
#define R        2
#define OBJ      4096
#define CHAINS   6
#define BLOCKS   64 /* per chain: 4 segments of 16, a KDA checkpoint at each segment's end */
#define SESSIONS 12
#define APPENDS  3
#define S        16 /* segment_blocks (the default) */

/* What was written and acknowledged. */
typedef struct written {
    st_hash_t *chain[CHAINS];
    uint64_t length[SESSIONS];
    uint64_t version[SESSIONS];
} written_t;

static void mk_dirs(char *dir, size_t cap)
{
    assert_int_equal(dd_mk_node_dirs(dir, cap, "/tmp/strata-rebal-XXXXXX", SLOTS), 0);
}

/* Node directories in dir, and the static-mode daemons' arguments (R = 2, SSD tiers there). */
static void static_args(char *dir, size_t dir_cap, char *args, size_t args_cap)
{
    mk_dirs(dir, dir_cap);
    snprintf(args, args_cap,
             "--memory-limit 64M --chunk-bytes 4M --max-object 1M --transport none "
             "--ssd-map-size 256M --ssd-sync none --replicas 2 --data-dir %s/{node}",
             dir);
}

static void fill(uint8_t *p, uint64_t block, uint32_t salt)
{
    for (size_t i = 0; i < OBJ; i++) {
        p[i] = (uint8_t)(block * 31 + i * 7 + salt * 13);
    }
}

static void sid_of(int k, char *id, size_t cap, st_hash_t *out)
{
    snprintf(id, cap, "conv-%d", k);
    cf_session_hash(id, out); /* as libstrata names a session on the ring */
}

static st_client_t *connect_nodes(const char *nodes, uint32_t replicas)
{
    st_client_params_t p;

    cf_params_session(&p, nodes, "k3", 5000);
    p.field_mask |= ST_CLIENT_FIELD_REPLICAS;
    p.replicas = replicas;
    return cf_connect_retry(&p, 50);
}

static void nodes_of(const tc_cluster_t *cl, const int *idx, int n, char *out, size_t cap)
{
    size_t off = 0;

    out[0] = '\0';
    for (int k = 0; k < n; k++) {
        off += (size_t)snprintf(out + off, cap - off, "%s%s", k ? "," : "", cl->node[idx[k]].addr);
    }
}

/* Durable sessions and KDA checkpoints through a client of the first three. */
static void write_all(const tc_cluster_t *cl, written_t *w)
{
    int first[3] = {0, 1, 2};
    char nodes[256], id[32];
    static uint8_t buf[OBJ];
    st_client_t *c;
    st_session_info_t info;
    st_write_result_t wr;
    st_hash_t sid;

    nodes_of(cl, first, 3, nodes, sizeof(nodes));
    c = connect_nodes(nodes, R);
    for (int k = 0; k < CHAINS; k++) {
        w->chain[k] = cf_chain(c, 100 + (uint64_t)k, BLOCKS);
        for (uint64_t b = S - 1; b < BLOCKS; b += S) {
            st_put_op_t op = {.block = b, .kind = ST_KIND_KDA, .src = buf, .len = OBJ};
            st_handle_t *h = NULL;

            fill(buf, b, (uint32_t)k);
            assert_int_equal(st_client_put(c, w->chain[k], BLOCKS, &op, 1, ST_PUT_DURABLE, &h),
                             ST_OK);
            assert_int_equal(st_handle_wait(h, -1), ST_OK);
            assert_int_equal(op.status, ST_OK);
            assert_int_equal(st_handle_replicas_written(h, 0), R);
            st_handle_release(h);
        }
    }
    for (int k = 0; k < SESSIONS; k++) {
        sid_of(k, id, sizeof(id), &sid);
        assert_int_equal(st_session_open_ex(c, id, 0, ST_SESSION_DURABLE, &info, &wr), ST_OK);
        for (int a = 1; a <= APPENDS + k % 2; a++) { /* a * S <= BLOCKS */
            uint64_t len = (uint64_t)a * S * st_client_block_tokens(c);

            assert_int_equal(st_session_append_ex(c, id, &w->chain[k % CHAINS][a * S - 1], len,
                                                  ST_SESSION_DURABLE, &wr),
                             ST_OK);
            assert_int_equal(wr.written, R);
            w->length[k] = len;
            w->version[k] = (uint64_t)a;
        }
    }
    st_client_close(c);
}

/* 1 when node (a client of it alone) holds KDA block b of chain k with its bytes. */
static int holds_kda(st_client_t *one, const written_t *w, int k, uint64_t b)
{
    uint8_t want[OBJ], got[OBJ];
    st_get_op_t op = {.block = b, .kind = ST_KIND_KDA, .dst = got, .dst_len = OBJ};
    st_handle_t *h = NULL;

    fill(want, b, (uint32_t)k);
    assert_int_equal(st_client_get(one, w->chain[k], BLOCKS, &op, 1, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, -1), ST_OK);
    st_handle_release(h);
    if (op.status != ST_OK) {
        return 0;
    }
    assert_int_equal(op.length, OBJ);
    assert_memory_equal(got, want, OBJ);
    return 1;
}

/* 1 when node holds session k at its last version (a newer one fails the test). */
static int holds_session(st_client_t *one, const written_t *w, int k)
{
    char id[32];
    st_hash_t sid;
    st_session_info_t info;

    sid_of(k, id, sizeof(id), &sid);
    if (st_session_get(one, id, &info) != ST_OK) {
        return 0;
    }
    return info.length == w->length[k];
}

/* Set: a copy left on a node that is not a replica is not counted (it is
 * named with verbose); only a replica that lacks its copy is. */
static int extra_ok;

/*
 * Counts the objects not on exactly their R replicas of the ring over
 * members idx[0..n), asking each member alone; with verbose, names them.
 */
static int misplaced(const tc_cluster_t *cl, const int *idx, int n, const written_t *w, int verbose)
{
    const char *names[SLOTS];
    st_client_t *one[SLOTS];
    ring_t ring;
    int bad = 0;

    for (int j = 0; j < n; j++) {
        names[j] = cl->node[idx[j]].addr;
        one[j] = connect_nodes(names[j], 1);
    }
    assert_int_equal(ring_init(&ring, names, (uint32_t)n, 128), ST_OK);
    for (int k = 0; k < CHAINS; k++) {
        for (uint64_t b = S - 1; b < BLOCKS; b += S) {
            uint32_t set[R];
            size_t ns = ring_place(&ring, &w->chain[k][b - b % S], set, R);

            for (int j = 0; j < n; j++) {
                int want = 0, got = holds_kda(one[j], w, k, b);

                for (size_t x = 0; x < ns; x++) {
                    want |= (int)set[x] == j;
                }
                if (want != got) {
                    bad += !(extra_ok && got);
                    if (verbose) {
                        print_message("KDA chain %d block %llu: node %s %s\n", k,
                                      (unsigned long long)b, names[j],
                                      want ? "lacks it" : "still holds it");
                    }
                }
            }
        }
    }
    for (int k = 0; k < SESSIONS; k++) {
        char id[32];
        st_hash_t sid;
        uint32_t set[R];
        size_t ns;

        sid_of(k, id, sizeof(id), &sid);
        ns = ring_place(&ring, &sid, set, R);
        for (int j = 0; j < n; j++) {
            int want = 0, got = holds_session(one[j], w, k);

            for (size_t x = 0; x < ns; x++) {
                want |= (int)set[x] == j;
            }
            if (want != got) {
                bad += !(extra_ok && got);
                if (verbose) {
                    print_message("session %s: node %s %s\n", id, names[j],
                                  want ? "lacks it" : "still holds it");
                }
            }
        }
    }
    ring_destroy(&ring);
    for (int j = 0; j < n; j++) {
        st_client_close(one[j]);
    }
    return bad;
}

/* How many objects the client c does not read (with verbose, named). */
static int unread_with(st_client_t *c, const written_t *w, int verbose)
{
    int bad = 0;

    for (int k = 0; k < CHAINS; k++) {
        for (uint64_t b = S - 1; b < BLOCKS; b += S) {
            if (!holds_kda(c, w, k, b)) {
                bad++;
                if (verbose) {
                    print_message("KDA chain %d block %llu: a miss\n", k, (unsigned long long)b);
                }
            }
        }
    }
    for (int k = 0; k < SESSIONS; k++) {
        if (!holds_session(c, w, k)) {
            bad++;
            if (verbose) {
                print_message("session conv-%d: a miss\n", k);
            }
        }
    }
    return bad;
}

/* Every object through the client c: nothing lost. */
static void readable_with(st_client_t *c, const written_t *w)
{
    assert_int_equal(unread_with(c, w, 1), 0);
}

/* Every object through libstrata over the members: nothing lost. */
static void readable(const tc_cluster_t *cl, const int *idx, int n, const written_t *w)
{
    char nodes[256];
    st_client_t *c;

    nodes_of(cl, idx, n, nodes, sizeof(nodes));
    c = connect_nodes(nodes, R);
    readable_with(c, w);
    st_client_close(c);
}

/* Waits (up to 30 s) until every object is on exactly its replicas of the
 * members' ring, then checks it through libstrata. */
static void settled(const tc_cluster_t *cl, const int *idx, int n, const written_t *w,
                    const char *step)
{
    int bad = 0;

    for (int tries = 0; tries < 150; tries++) {
        if ((bad = misplaced(cl, idx, n, w, 0)) == 0) {
            break;
        }
        nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
    }
    if (bad != 0) {
        print_message("after %s: %d objects not on exactly their %d replicas:\n", step, bad, R);
        (void)misplaced(cl, idx, n, w, 1);
    }
    assert_int_equal(bad, 0);
    readable(cl, idx, n, w);
    print_message("after %s: every durable object on its %d replicas of %d members\n", step, R, n);
}

/* Makes idx[0..n) the members: the peers file, then SIGHUP to each. */
static void apply(tc_cluster_t *cl, const int *idx, int n)
{
    assert_int_equal(tc_set_peers(cl, idx, n), 0);
    for (int k = 0; k < n; k++) {
        tc_signal(cl, idx[k], SIGHUP);
    }
}

/* A Drain call to node i (loopback, no token: the one-box admin). */
static void drain(const tc_cluster_t *cl, int i)
{
    Strata__V1__DrainRequest req = STRATA__V1__DRAIN_REQUEST__INIT;
    Strata__V1__DrainResponse *resp = NULL;
    srpc_channel_config_t cc = {0};
    srpc_channel_t *ch = NULL;
    srpc_error_t err;

    assert_int_equal(srpc_channel_open(cl->node[i].addr, &cc, &ch), ST_OK);
    assert_int_equal(srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_DRAIN], &req.base, 10000,
                               (ProtobufCMessage **)&resp, &err),
                     ST_OK);
    print_message("drain of %s: %llu durable objects to hand over\n", resp->node_id,
                  (unsigned long long)resp->pending);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    srpc_channel_close(ch);
}

static void test_join_drain_crash(void **state)
{
    tc_cluster_t cl;
    written_t w;
    char dir[64], args[512];
    int m3[] = {0, 1, 2}, m4[] = {0, 1, 2, 3}, m_drained[] = {0, 2, 3}, m_joined[] = {0, 2, 3, 4};
    int m_crashed[] = {0, 3, 4};

    (void)state;
    memset(&w, 0, sizeof(w));
    static_args(dir, sizeof(dir), args, sizeof(args));
    assert_int_equal(tc_start_static(&cl, stratad_path, SLOTS, 3, dir, args), 0);
    write_all(&cl, &w);
    settled(&cl, m3, 3, &w, "the writes");

    /* Join: a 4th node, then every node re-reads the peers. */
    assert_int_equal(tc_set_peers(&cl, m4, 4), 0);
    assert_int_equal(tc_restart(&cl, 3), 0);
    apply(&cl, m4, 4);
    readable(&cl, m3, 3, &w); /* a client of the old list, while objects move */
    readable(&cl, m4, 4, &w); /* and one of the new list */
    settled(&cl, m4, 4, &w, "the join of a 4th node");

    /* Drain node 1: it hands its objects over and exits 0. */
    drain(&cl, 1);
    assert_int_equal(tc_wait_exit(&cl, 1, 30000), 0);
    apply(&cl, m_drained, 3);
    readable(&cl, m_drained, 3, &w);
    settled(&cl, m_drained, 3, &w, "the drain of node 1");

    /* Another join, then kill -9 of node 2: the survivors re-replicate. */
    assert_int_equal(tc_set_peers(&cl, m_joined, 4), 0);
    assert_int_equal(tc_restart(&cl, 4), 0);
    apply(&cl, m_joined, 4);
    readable(&cl, m_joined, 4, &w);
    settled(&cl, m_joined, 4, &w, "the join of a 5th node");
    /* kill -9 and restart of node 0: it finds its durable objects on its SSD
     * tier again (sessions, and KDA objects by their placement records), so
     * that it can still move them. */
    tc_kill(&cl, 0);
    assert_int_equal(tc_restart(&cl, 0), 0);
    settled(&cl, m_joined, 4, &w, "kill -9 and restart of node 0");
    tc_kill(&cl, 2);
    apply(&cl, m_crashed, 3);
    readable(&cl, m_crashed, 3, &w); /* the survivors' copies, before re-replication */
    settled(&cl, m_crashed, 3, &w, "kill -9 of node 2");

    for (int k = 0; k < CHAINS; k++) {
        free(w.chain[k]);
    }
    tc_stop_all(&cl);
    unlink(cl.peers_file);
    dd_rm_node_dirs(dir, SLOTS);
}

#define TTL_S 4 /* etcd_ttl of the etcd-mode daemons: a killed one leaves after it */

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* names[0..n) sorted (in place), comma-separated into out. */
static void join_sorted(const char **names, size_t n, char *out, size_t cap)
{
    size_t off = 0;

    for (size_t a = 1; a < n; a++) {
        for (size_t b = a; b > 0 && strcmp(names[b - 1], names[b]) > 0; b--) {
            const char *t = names[b];

            names[b] = names[b - 1];
            names[b - 1] = t;
        }
    }
    out[0] = '\0';
    for (size_t k = 0; k < n; k++) {
        off +=
            (size_t)snprintf(out + off, off < cap ? cap - off : 0, "%s%s", k ? "," : "", names[k]);
    }
}

/* Node i's ring as its Hello gives it (its peers, sorted) and its epoch. */
static uint64_t hello_ring(const tc_cluster_t *cl, int i, char *ring, size_t cap)
{
    const char *names[TC_MAX_NODES * 2];
    gc_conn_t c;
    Strata__V1__HelloResponse *h = gc_hello(&c, cl->node[i].addr, "acme", "k3", NULL);
    size_t n = h->n_peers < TC_MAX_NODES * 2 ? h->n_peers : TC_MAX_NODES * 2;
    uint64_t epoch = h->ring_epoch;

    for (size_t k = 0; k < n; k++) {
        names[k] = h->peers[k]->address;
    }
    join_sorted(names, n, ring, cap);
    protobuf_c_message_free_unpacked(&h->base, NULL);
    gc_close(&c);
    return epoch;
}

/*
 * Waits (up to timeout_ms) until every member idx[0..n) gives the ring over
 * exactly those members at one epoch, and the etcd client c is at it too.
 * Returns that epoch.
 */
static uint64_t same_ring(const tc_cluster_t *cl, const int *idx, int n, st_client_t *c,
                          uint64_t timeout_ms, const char *step)
{
    const char *names[SLOTS];
    char want[512], got[512] = "";
    uint64_t t0 = now_ms(), epoch = 0;

    for (int j = 0; j < n; j++) {
        names[j] = cl->node[idx[j]].addr;
    }
    join_sorted(names, (size_t)n, want, sizeof(want));
    for (;;) {
        int agree = 1;

        for (int j = 0; j < n && agree; j++) {
            uint64_t e = hello_ring(cl, idx[j], got, sizeof(got));

            agree = strcmp(got, want) == 0 && (j == 0 || e == epoch);
            epoch = e;
        }
        if (agree && st_client_ring_epoch(c) == epoch) {
            break;
        }
        if (now_ms() - t0 > timeout_ms) {
            fail_msg("%s: no one ring after %llu ms: want %s at one epoch, a node says %s "
                     "(epoch %llu), the client is at epoch %llu",
                     step, (unsigned long long)timeout_ms, want, got, (unsigned long long)epoch,
                     (unsigned long long)st_client_ring_epoch(c));
        }
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    print_message("after %s: every member and the client at ring %s epoch %llu (%llu ms)\n", step,
                  want, (unsigned long long)epoch, (unsigned long long)(now_ms() - t0));
    return epoch;
}

/* A client that finds the members in etcd (nodes: ignored). */
static st_client_t *connect_etcd(const char *endpoint)
{
    st_client_params_t p;

    cf_params_session(&p, "127.0.0.1:1", "k3", 5000);
    p.field_mask |= ST_CLIENT_FIELD_REPLICAS | ST_CLIENT_FIELD_ETCD;
    p.replicas = R;
    p.etcd = endpoint;
    return cf_connect_retry(&p, 50);
}

/* After a change: one ring everywhere, every object readable through the
 * etcd client, and each on exactly its R replicas. */
static uint64_t changed(const tc_cluster_t *cl, const int *idx, int n, st_client_t *c,
                        const written_t *w, uint64_t timeout_ms, const char *step)
{
    uint64_t epoch = same_ring(cl, idx, n, c, timeout_ms, step);

    readable_with(c, w); /* while objects move */
    settled(cl, idx, n, w, step);
    readable_with(c, w);
    return epoch;
}

/* Waits (up to timeout_ms) until etcd lists n member records. */
static void registered(const et_etcd_t *e, int n, uint64_t timeout_ms)
{
    uint64_t t0 = now_ms();

    for (int got = -1; got != n; nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL)) {
        char *out = et_ctl(e, "get --prefix --keys-only /strata/members/");

        got = 0;
        for (char *p = out; p != NULL && (p = strstr(p, "/strata/members/")) != NULL; p++) {
            got++;
        }
        free(out);
        if (got != n && now_ms() - t0 > timeout_ms) {
            fail_msg("etcd lists %d members after %llu ms, want %d", got,
                     (unsigned long long)timeout_ms, n);
        }
    }
}

/* etcd, then three daemons registered in it (the etcd-mode cases' start); skips the case
 * without etcd-server. */
static void etcd_three(tc_cluster_t *cl, et_etcd_t *etcd, char *dir, size_t dir_cap)
{
    char args[512];
    int rc = et_start(etcd, NULL);

    if (rc == 77) {
        print_message("SKIP: no etcd-server\n");
        skip();
    }
    assert_int_equal(rc, 0);
    mk_dirs(dir, dir_cap);
    snprintf(args, sizeof(args),
             "--etcd-ttl %d --memory-limit 64M --chunk-bytes 4M --max-object 1M --transport none "
             "--ssd-map-size 256M --ssd-sync none --replicas 2 --data-dir %s/{node}",
             TTL_S, dir);
    assert_int_equal(tc_start_etcd(cl, stratad_path, 3, etcd->endpoint, args), 0);
}

static void test_etcd_join_drain_crash_restart(void **state)
{
    tc_cluster_t cl;
    written_t w;
    et_etcd_t etcd;
    st_client_t *c;
    char dir[64], cmd[600];
    int m3[] = {0, 1, 2}, m4[] = {0, 1, 2, 3}, m_drained[] = {0, 2, 3}, m_joined[] = {0, 2, 3, 4};
    int m_crashed[] = {0, 3, 4};
    uint64_t epoch;

    (void)state;
    memset(&w, 0, sizeof(w));
    etcd_three(&cl, &etcd, dir, sizeof(dir));
    c = connect_etcd(etcd.endpoint);
    same_ring(&cl, m3, 3, c, 10000, "etcd: three register");
    write_all(&cl, &w);
    changed(&cl, m3, 3, c, &w, 10000, "etcd: the writes");

    assert_int_equal(tc_add(&cl), 3);
    changed(&cl, m4, 4, c, &w, 10000, "etcd: a 4th joins");

    drain(&cl, 1);
    assert_int_equal(tc_wait_exit(&cl, 1, 30000), 0);
    changed(&cl, m_drained, 3, c, &w, 10000, "etcd: node 1 drained");

    assert_int_equal(tc_add(&cl), 4);
    changed(&cl, m_joined, 4, c, &w, 10000, "etcd: a 5th joins");

    /* Node 3 stopped (SIGSTOP) past its lease: the others re-replicate
     * without it; once it runs again it registers again and takes its share
     * back. It must never apply a ring without itself meanwhile (its watch
     * still brings its own key's delete after it registered again): a node
     * off its own ring pushes everything away and drops its copies, as a
     * drain does, while the others count on them. */
    tc_signal(&cl, 3, SIGSTOP);
    sleep(TTL_S + 2);
    tc_signal(&cl, 3, SIGCONT);
    registered(&etcd, 4, TTL_S * 1000 + 8000);
    changed(&cl, m_joined, 4, c, &w, TTL_S * 1000 + 8000, "etcd: node 3 stopped past its lease");
    snprintf(cmd, sizeof(cmd), "grep 'members applied.*self=-1' %s", cl.node[3].log);
    assert_int_not_equal(system(cmd), 0); /* grep found no such line */

    /* kill -9: its lease expires; the survivors re-replicate. A client that
     * reads right after the kill, before it knows, still finds every KDA
     * object whose first replica is the dead node on the next one (the
     * replicas of a get are placed once per call: docs/testing.md
     * "Findings"). */
    tc_kill(&cl, 2);
    assert_int_equal(unread_with(c, &w, 1), 0);
    readable_with(c, &w);
    epoch = changed(&cl, m_crashed, 3, c, &w, TTL_S * 1000 + 5000, "etcd: kill -9 of node 2");

    /* etcd down for longer than the lease: the daemons and the client serve
     * with the last ring; back with its data, the same ring and epoch. */
    et_stop(&etcd);
    sleep(TTL_S + 1);
    readable_with(c, &w);
    assert_int_equal(same_ring(&cl, m_crashed, 3, c, 1000, "etcd: down"), epoch);
    assert_int_equal(et_restart(&etcd), 0);
    registered(&etcd, 3, TTL_S * 1000 + 8000);
    assert_int_equal(
        changed(&cl, m_crashed, 3, c, &w, TTL_S * 1000 + 8000, "etcd: restarted with its data"),
        epoch);

    /* Back empty (its data lost): the daemons register again, the epoch
     * still grows, and no durable object may lose a copy meanwhile. */
    et_kill(&etcd);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s/data'", etcd.dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(et_restart(&etcd), 0);
    registered(&etcd, 3, TTL_S * 1000 + 8000);
    /* While they register one by one, rings of 1 and 2 members come and go
     * and copies move to them: every replica must end with its copy, but a
     * copy that arrived after its receiver's last pass can stay on a node
     * that is no replica (seen in 1 of 4 ASan runs: docs/testing.md), so
     * extra copies are named, not counted. */
    extra_ok = 1;
    assert_true(changed(&cl, m_crashed, 3, c, &w, TTL_S * 1000 + 8000, "etcd: restarted empty") >
                epoch);
    print_message("copies left on a node that is no replica:\n");
    extra_ok = 0;
    (void)misplaced(&cl, m_crashed, 3, &w, 1);

    st_client_close(c);
    for (int k = 0; k < CHAINS; k++) {
        free(w.chain[k]);
    }
    tc_stop_all(&cl);
    dd_rm_node_dirs(dir, SLOTS);
    et_destroy(&etcd);
}

/* The cluster credential of the harness's cluster secret (docs/security.md):
 * hex of HMAC-SHA-256(secret, "strata-peer-v1"). */
static void peer_token(char out[65])
{
    static const char secret[] = "integration-test-cluster-secret";
    unsigned char mac[32];
    unsigned int len = 0;

    assert_non_null(HMAC(EVP_sha256(), secret, (int)strlen(secret),
                         (const unsigned char *)"strata-peer-v1", 14, mac, &len));
    for (unsigned i = 0; i < 32; i++) {
        snprintf(out + 2 * i, 3, "%02x", mac[i]);
    }
}

static int call(const char *addr, const char *token, int m, const ProtobufCMessage *req,
                ProtobufCMessage **resp)
{
    srpc_channel_config_t cc = {.token = token};
    srpc_channel_t *ch = NULL;
    srpc_error_t err = {0};
    st_status_t st;

    assert_int_equal(srpc_channel_open(addr, &cc, &ch), ST_OK);
    st = srpc_call(ch, &srpc_cache_methods[m], req, 10000, resp, &err);
    print_message("%s with %s: %s %s\n", srpc_cache_methods[m].path,
                  token == NULL         ? "no token"
                  : strlen(token) == 64 ? "the cluster credential"
                                        : token,
                  st_strerror(st), err.message);
    srpc_channel_close(ch);
    return st == ST_OK ? 0 : err.grpc_code;
}

static void test_replicate_and_drain_auth(void **state)
{
    const char *names[] = {"alpha"}, *tokens[] = {"alpha-token-0123456789"};
    Strata__V1__ReplicateRequest rq = STRATA__V1__REPLICATE_REQUEST__INIT;
    Strata__V1__DrainRequest dq = STRATA__V1__DRAIN_REQUEST__INIT;
    Strata__V1__SessionInfo si = STRATA__V1__SESSION_INFO__INIT, *sip = &si;
    Strata__V1__ReplicateResponse *ra = NULL;
    ProtobufCMessage *resp = NULL;
    uint8_t sid[16], head[16], rec[48];
    uint64_t sum;
    char peer[65], args[256];
    tt_set_t ts;
    tc_cluster_t cl;

    (void)state;
    peer_token(peer);
    assert_int_equal(tt_prepare(&ts, stratad_path, names, tokens, 1, "m1"), 0);
    snprintf(args, sizeof(args), "--transport none %s", ts.flags);
    assert_int_equal(tc_start(&cl, stratad_path, 1, args), 0);

    /* A session record of tenant alpha's namespace, checksummed as the rebalancer does. */
    memset(sid, 0x5a, sizeof(sid));
    memset(head, 0x33, sizeof(head));
    memcpy(rec, sid, 16);
    memcpy(rec + 16, head, 16);
    for (int i = 0; i < 8; i++) {
        rec[32 + i] = (uint8_t)((uint64_t)128 >> (8 * i)); /* length 128 */
        rec[40 + i] = (uint8_t)((uint64_t)3 >> (8 * i));   /* version 3 */
    }
    sum = XXH3_64bits(rec, sizeof(rec));
    si.session_id = (ProtobufCBinaryData){16, sid};
    si.head_hash = (ProtobufCBinaryData){16, head};
    si.length = 128;
    si.version = 3;
    si.ttl_ms = 60000;
    rq.tenant = "alpha";
    rq.model = "m1";
    rq.sessions = &sip;
    rq.n_sessions = 1;
    rq.session_checksum = &sum;
    rq.n_session_checksum = 1;

    /* A tenant's token: refused for both calls; the node keeps serving. */
    assert_int_equal(call(cl.node[0].addr, tokens[0], SRPC_CACHE_REPLICATE, &rq.base, &resp),
                     GRPC_STATUS_PERMISSION_DENIED);
    assert_int_equal(call(cl.node[0].addr, tokens[0], SRPC_CACHE_DRAIN, &dq.base, &resp),
                     GRPC_STATUS_PERMISSION_DENIED);
    assert_int_equal(call(cl.node[0].addr, NULL, SRPC_CACHE_DRAIN, &dq.base, &resp),
                     GRPC_STATUS_UNAUTHENTICATED);
    assert_int_equal(tc_wait_exit(&cl, 0, 300), -1);

    /* The cluster credential: a record whose checksum fails is refused as
     * corrupt, a good one is stored in alpha's namespace. */
    sum ^= 1;
    assert_int_equal(call(cl.node[0].addr, peer, SRPC_CACHE_REPLICATE, &rq.base, &resp), 0);
    ra = (void *)resp;
    assert_int_equal(ra->n_session_status, 1);
    assert_int_equal(ra->session_status[0], STRATA__V1__KEY_STATUS__KEY_CORRUPT);
    protobuf_c_message_free_unpacked(resp, NULL);
    sum ^= 1;
    assert_int_equal(call(cl.node[0].addr, peer, SRPC_CACHE_REPLICATE, &rq.base, &resp), 0);
    ra = (void *)resp;
    assert_int_equal(ra->session_status[0], STRATA__V1__KEY_STATUS__KEY_OK);
    protobuf_c_message_free_unpacked(resp, NULL);
    {
        /* alpha reads it back, version and length as sent. */
        Strata__V1__HelloRequest hq = STRATA__V1__HELLO_REQUEST__INIT;
        Strata__V1__GetSessionRequest gq = STRATA__V1__GET_SESSION_REQUEST__INIT;
        Strata__V1__SessionResponse *sr;

        hq.protocol_version = 1;
        hq.tenant = "alpha";
        hq.model = "m1";
        assert_int_equal(call(cl.node[0].addr, tokens[0], SRPC_CACHE_HELLO, &hq.base, &resp), 0);
        gq.namespace_id = ((Strata__V1__HelloResponse *)(void *)resp)->namespace_id;
        protobuf_c_message_free_unpacked(resp, NULL);
        gq.session_id = si.session_id;
        assert_int_equal(call(cl.node[0].addr, tokens[0], SRPC_CACHE_GET_SESSION, &gq.base, &resp),
                         0);
        sr = (void *)resp;
        assert_int_equal(sr->session->version, 3);
        assert_int_equal(sr->session->length, 128);
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    /* The cluster credential may drain: the node stops, exit 0. */
    assert_int_equal(call(cl.node[0].addr, peer, SRPC_CACHE_DRAIN, &dq.base, &resp), 0);
    protobuf_c_message_free_unpacked(resp, NULL);
    assert_int_equal(tc_wait_exit(&cl, 0, 20000), 0);
    tc_stop_all(&cl);
    tt_cleanup(&ts);
}

/* The length of session id held by the node at addr alone (0: none). */
static uint64_t length_on(const char *addr, const char *id)
{
    st_client_t *one = connect_nodes(addr, 1);
    st_session_info_t info;
    uint64_t len = st_session_get(one, id, &info) == ST_OK ? info.length : 0;

    st_client_close(one);
    return len;
}

/*
 * A replica that missed appends (down during writes with W = 1) is the
 * pusher of a session whose up-to-date replica leaves the set: the
 * receiver first gets the stale record; the leaving replica's check finds
 * it older and pushes the newest on its next attempt. Without that, the new
 * replica kept the stale record and the up-to-date one never dropped its
 * copy (pending for ever).
 */
static void test_stale_pusher(void **state)
{
    tc_cluster_t cl;
    char dir[64], args[512], nodes[128], id[32] = "";
    int m2[] = {0, 1}, m3[] = {0, 1, 2};
    const char *n2[2], *n3[3];
    ring_t r2, r3;
    st_client_t *c;
    st_session_info_t info;
    st_write_result_t wr;
    st_hash_t *chain, sid;

    (void)state;
    static_args(dir, sizeof(dir), args, sizeof(args));
    assert_int_equal(tc_start_static(&cl, stratad_path, 3, 2, dir, args), 0);
    for (int i = 0; i < 3; i++) {
        n3[i] = cl.node[i].addr;
    }
    n2[0] = n3[0], n2[1] = n3[1];
    assert_int_equal(ring_init(&r2, n2, 2, 128), ST_OK);
    assert_int_equal(ring_init(&r3, n3, 3, 128), ST_OK);
    /* A session whose old order is node 1 first (the pusher) and whose new
     * set leaves node 0 out. */
    for (int k = 0; k < 10000 && id[0] == '\0'; k++) {
        uint32_t o[2], nw[2];

        sid_of(1000 + k, id, sizeof(id), &sid);
        ring_place(&r2, &sid, o, 2);
        ring_place(&r3, &sid, nw, 2);
        if (!(o[0] == 1 && nw[0] != 0 && nw[1] != 0)) {
            id[0] = '\0';
        }
    }
    assert_true(id[0] != '\0');
    nodes_of(&cl, m2, 2, nodes, sizeof(nodes));
    c = connect_nodes(nodes, R);
    chain = cf_chain(c, 7, 4);
    assert_int_equal(st_session_open_ex(c, id, 0, ST_SESSION_DURABLE, &info, &wr), ST_OK);
    assert_int_equal(st_session_append_ex(c, id, &chain[0], 64, ST_SESSION_DURABLE, &wr), ST_OK);
    st_client_close(c);
    /* Node 1 misses the next appends (W = 1 on node 0 alone), then comes back. */
    tc_kill(&cl, 1);
    {
        st_client_params_t p;

        cf_params_session(&p, nodes, "k3", 5000);
        p.field_mask |= ST_CLIENT_FIELD_REPLICAS | ST_CLIENT_FIELD_WRITE_QUORUM;
        p.replicas = R;
        p.write_quorum = 1;
        c = cf_connect_retry(&p, 50);
    }
    assert_int_equal(st_session_append_ex(c, id, &chain[2], 192, ST_SESSION_DURABLE, &wr), ST_OK);
    st_client_close(c);
    assert_int_equal(tc_restart(&cl, 1), 0);
    assert_int_equal(length_on(cl.node[1].addr, id), 64);
    assert_int_equal(length_on(cl.node[0].addr, id), 192);
    /* Join node 2: the stale node 1 pushes first; node 0 leaves the set. */
    assert_int_equal(tc_set_peers(&cl, m3, 3), 0);
    assert_int_equal(tc_restart(&cl, 2), 0);
    apply(&cl, m3, 3);
    for (int tries = 0; tries < 100; tries++) {
        if (length_on(cl.node[2].addr, id) == 192 && length_on(cl.node[0].addr, id) == 0) {
            break;
        }
        nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
    }
    print_message("session %s: length %llu on the new replica, %llu left on the old one\n", id,
                  (unsigned long long)length_on(cl.node[2].addr, id),
                  (unsigned long long)length_on(cl.node[0].addr, id));
    assert_int_equal(length_on(cl.node[2].addr, id), 192);
    assert_int_equal(length_on(cl.node[0].addr, id), 0);
    ring_destroy(&r2);
    ring_destroy(&r3);
    free(chain);
    tc_stop_all(&cl);
    unlink(cl.peers_file);
    dd_rm_node_dirs(dir, SLOTS);
}

/*
 * Two joins inside one pass: every KDA object whose new replica set is the two new
 * members alone, read through a client of the new list while the old members' rebalancers
 * are held (the planted fault rebalance-stall: nothing is pushed, the copies stay on the old
 * set). With one change at a time a replica of the new set always holds a copy; after two,
 * none of these does, and libstrata finds them on the members after the replicas
 * (sc_get_ranks, client/inline.c). Before that, every one of them was a NOT_FOUND.
 */
#define PASS_OBJS 8

static void test_read_during_pass(void **state)
{
#ifndef STRATA_FAULT_INJECT
    (void)state;
    print_message("SKIP: needs stratad's planted faults (a build with STRATA_FAULT_INJECT: "
                  "the Debug and sanitizer builds)\n");
    skip();
#else
    tc_cluster_t cl;
    char dir[64], args[512], nodes[256], one_addr[2][64];
    int m3[] = {0, 1, 2}, m5[] = {0, 1, 2, 3, 4};
    const char *n5[SLOTS];
    ring_t r5;
    st_hash_t *chain[PASS_OBJS];
    uint64_t salt[PASS_OBJS];
    static uint8_t buf[OBJ], got[OBJ];
    st_client_t *c, *one[2];
    int found = 0, on_new = 0;

    (void)state;
    static_args(dir, sizeof(dir), args, sizeof(args));
    assert_int_equal(setenv("STRATA_FAULT", "rebalance-stall", 1), 0);
    assert_int_equal(tc_start_static(&cl, stratad_path, SLOTS, 3, dir, args), 0);
    assert_int_equal(unsetenv("STRATA_FAULT"), 0);
    for (int i = 0; i < SLOTS; i++) {
        n5[i] = cl.node[i].addr;
    }
    assert_int_equal(ring_init(&r5, n5, SLOTS, 128), ST_OK);
    nodes_of(&cl, m3, 3, nodes, sizeof(nodes));
    c = connect_nodes(nodes, R);
    /* Chains of one segment whose KDA checkpoint the 5-member ring places on nodes 3 and 4. */
    for (uint64_t k = 0, n = 0; n < PASS_OBJS; k++) {
        st_hash_t *ch = cf_chain(c, 5000 + k, S);
        uint32_t set[R];
        st_put_op_t op = {.block = S - 1, .kind = ST_KIND_KDA, .src = buf, .len = OBJ};
        st_handle_t *h = NULL;

        assert_true(k < 100000);
        if (ring_place(&r5, &ch[0], set, R) != R || set[0] < 3 || set[1] < 3) {
            free(ch);
            continue;
        }
        fill(buf, S - 1, (uint32_t)k);
        assert_int_equal(st_client_put(c, ch, S, &op, 1, ST_PUT_DURABLE, &h), ST_OK);
        assert_int_equal(st_handle_wait(h, -1), ST_OK);
        assert_int_equal(op.status, ST_OK);
        assert_int_equal(st_handle_replicas_written(h, 0), R);
        st_handle_release(h);
        chain[n] = ch;
        salt[n++] = k;
    }
    st_client_close(c);
    /* Two joins; the old members' passes push nothing. */
    assert_int_equal(tc_set_peers(&cl, m5, SLOTS), 0);
    assert_int_equal(tc_restart(&cl, 3), 0);
    assert_int_equal(tc_restart(&cl, 4), 0);
    apply(&cl, m5, SLOTS);
    nodes_of(&cl, m5, SLOTS, nodes, sizeof(nodes));
    c = connect_nodes(nodes, R);
    snprintf(one_addr[0], sizeof(one_addr[0]), "%s", cl.node[3].addr);
    snprintf(one_addr[1], sizeof(one_addr[1]), "%s", cl.node[4].addr);
    one[0] = connect_nodes(one_addr[0], 1);
    one[1] = connect_nodes(one_addr[1], 1);
    for (int n = 0; n < PASS_OBJS; n++) {
        for (int x = 0; x < 3; x++) {
            st_client_t *who = x < 2 ? one[x] : c;
            st_get_op_t op = {.block = S - 1, .kind = ST_KIND_KDA, .dst = got, .dst_len = OBJ};
            st_handle_t *h = NULL;

            assert_int_equal(st_client_get(who, chain[n], S, &op, 1, &h), ST_OK);
            assert_int_equal(st_handle_wait(h, -1), ST_OK);
            st_handle_release(h);
            if (op.status != ST_OK) {
                if (x == 2) {
                    print_message("checkpoint %d (chain %llu): %s through the 5-member client\n", n,
                                  (unsigned long long)salt[n], st_status_name(op.status));
                }
                continue;
            }
            fill(buf, S - 1, (uint32_t)salt[n]);
            assert_int_equal(op.length, OBJ);
            assert_memory_equal(got, buf, OBJ);
            *(x < 2 ? &on_new : &found) += 1;
        }
    }
    print_message("%d of %d checkpoints read through the new ring, %d copies on their new "
                  "replicas (the pass is held)\n",
                  found, PASS_OBJS, on_new);
    assert_int_equal(on_new, 0);        /* the window is open: the new set holds none */
    assert_int_equal(found, PASS_OBJS); /* and every one is read */
    st_client_close(one[0]);
    st_client_close(one[1]);
    st_client_close(c);
    for (int n = 0; n < PASS_OBJS; n++) {
        free(chain[n]);
    }
    ring_destroy(&r5);
    tc_stop_all(&cl);
    unlink(cl.peers_file);
    dd_rm_node_dirs(dir, SLOTS);
#endif
}

/* A KDA get of chain ch's checkpoint through who: 1 with the bytes of salt, 0 on a miss. */
static int got_checkpoint(st_client_t *who, const st_hash_t *ch, uint32_t salt)
{
    static uint8_t want[OBJ], got[OBJ];
    st_get_op_t op = {.block = S - 1, .kind = ST_KIND_KDA, .dst = got, .dst_len = OBJ};
    st_handle_t *h = NULL;

    assert_int_equal(st_client_get(who, ch, S, &op, 1, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, -1), ST_OK);
    st_handle_release(h);
    if (op.status != ST_OK) {
        return 0;
    }
    fill(want, S - 1, salt);
    assert_int_equal(op.length, OBJ);
    assert_memory_equal(got, want, OBJ);
    return 1;
}

/* 1 when who reads session "stale-k" (opened with length k + 1 blocks), 0 on NOT_FOUND. */
static int got_session(st_client_t *who, int k)
{
    char id[32];
    st_session_info_t info;
    st_status_t st;

    snprintf(id, sizeof(id), "stale-%d", k);
    st = st_session_get(who, id, &info);
    if (st == ST_ERR_NOT_FOUND) {
        return 0;
    }
    assert_int_equal(st, ST_OK);
    assert_int_equal(info.length, (uint64_t)(k + 1) * st_client_block_tokens(who));
    return 1;
}

/*
 * Clients two ring changes behind, with membership on etcd: one wrote KDA checkpoints and
 * durable sessions with three members, then two joined and every pass completed, so that what
 * the five-member ring places on the two new members alone is held there and nowhere else. The
 * clients still know only the first three (health_interval of ten minutes: they do not read
 * etcd on their own in the test). Get and session answers carry the node's ring epoch; a KDA
 * get or a session call that found nothing while a node answered with a newer epoch reads the
 * members now, greets the new ones and asks again (sc_health_refresh: client/inline.c,
 * client/session.c). Before that, every one was a NOT_FOUND (the seed 1831707085 of
 * test_netns_faults_etcd: a partition and a join 2 s apart). One client reads the sessions,
 * the other the checkpoints, so that each path brings its own client up to date.
 */
#define STALE_OBJS 160

static void test_etcd_stale_client(void **state)
{
    tc_cluster_t cl;
    et_etcd_t etcd;
    st_client_params_t p;
    st_client_t *stale, *stale_kda, *c, *one[SLOTS];
    st_hash_t *chain[STALE_OBJS];
    static uint8_t buf[OBJ];
    char dir[64];
    const char *n5[SLOTS];
    int m5[] = {0, 1, 2, 3, 4}, pick[STALE_OBJS], n_pick = 0, found = 0, settled_ok = 0;
    int spick[STALE_OBJS], n_spick = 0;
    ring_t r5;

    (void)state;
    etcd_three(&cl, &etcd, dir, sizeof(dir));
    cf_params_session(&p, "127.0.0.1:1", "k3", 5000);
    p.field_mask |=
        ST_CLIENT_FIELD_REPLICAS | ST_CLIENT_FIELD_ETCD | ST_CLIENT_FIELD_HEALTH_INTERVAL;
    p.replicas = R;
    p.etcd = etcd.endpoint;
    p.health_interval_ms = 600000;
    stale = cf_connect_retry(&p, 50);
    stale_kda = cf_connect_retry(&p, 50); /* reads the checkpoints: behind until then */
    for (int k = 0; k < STALE_OBJS; k++) {
        st_put_op_t op = {.block = S - 1, .kind = ST_KIND_KDA, .src = buf, .len = OBJ};
        st_handle_t *h = NULL;

        chain[k] = cf_chain(stale, 7000 + (uint64_t)k, S);
        fill(buf, S - 1, (uint32_t)k);
        assert_int_equal(st_client_put(stale, chain[k], S, &op, 1, ST_PUT_DURABLE, &h), ST_OK);
        assert_int_equal(st_handle_wait(h, -1), ST_OK);
        assert_int_equal(op.status, ST_OK);
        assert_int_equal(st_handle_replicas_written(h, 0), R);
        st_handle_release(h);
    }
    for (int k = 0; k < STALE_OBJS; k++) {
        char id[32];
        st_session_info_t info;
        st_write_result_t wr;

        snprintf(id, sizeof(id), "stale-%d", k);
        assert_int_equal(st_session_open_ex(stale, id, 0, ST_SESSION_DURABLE, &info, &wr), ST_OK);
        assert_int_equal(st_session_append_ex(stale, id, &chain[k][0],
                                              (uint64_t)(k + 1) * st_client_block_tokens(stale),
                                              ST_SESSION_DURABLE, &wr),
                         ST_OK);
        assert_int_equal(wr.written, R);
    }
    c = connect_etcd(etcd.endpoint); /* follows etcd: tells when the ring is one */
    assert_int_equal(tc_add(&cl), 3);
    assert_int_equal(tc_add(&cl), 4);
    (void)same_ring(&cl, m5, SLOTS, c, 20000, "etcd: two join");
    for (int i = 0; i < SLOTS; i++) {
        n5[i] = cl.node[i].addr;
        one[i] = connect_nodes(cl.node[i].addr, 1);
    }
    assert_int_equal(ring_init(&r5, n5, SLOTS, 128), ST_OK);
    for (int k = 0; k < STALE_OBJS; k++) {
        uint32_t set[R];

        if (ring_place(&r5, &chain[k][0], set, R) == R && set[0] >= 3 && set[1] >= 3) {
            pick[n_pick++] = k;
        }
    }
    for (int k = 0; k < STALE_OBJS; k++) {
        char id[32];
        st_hash_t sid;
        uint32_t set[R];

        snprintf(id, sizeof(id), "stale-%d", k);
        cf_session_hash(id, &sid);
        if (ring_place(&r5, &sid, set, R) == R && set[0] >= 3 && set[1] >= 3) {
            spick[n_spick++] = k;
        }
    }
    print_message("%d of %d checkpoints and %d of %d sessions placed on the two new members "
                  "alone\n",
                  n_pick, STALE_OBJS, n_spick, STALE_OBJS);
    assert_true(n_spick > 0);
    assert_true(n_pick > 0);
    /* Every pass done: those are on nodes 3 and 4 and on none of the first three. */
    for (int tries = 0; tries < 150 && !settled_ok; tries++) {
        settled_ok = 1;
        for (int j = 0; j < n_pick && settled_ok; j++) {
            for (int i = 0; i < SLOTS && settled_ok; i++) {
                settled_ok = got_checkpoint(one[i], chain[pick[j]], (uint32_t)pick[j]) == (i >= 3);
            }
        }
        for (int j = 0; j < n_spick && settled_ok; j++) {
            for (int i = 0; i < SLOTS && settled_ok; i++) {
                settled_ok = got_session(one[i], spick[j]) == (i >= 3);
            }
        }
        if (!settled_ok) {
            nanosleep(&(struct timespec){0, 200 * 1000 * 1000}, NULL);
        }
    }
    assert_true(settled_ok);
    /* Both still behind. */
    assert_true(st_client_ring_epoch(stale) < st_client_ring_epoch(c));
    assert_true(st_client_ring_epoch(stale_kda) < st_client_ring_epoch(c));
    for (int j = 0; j < n_spick; j++) {
        found += got_session(stale, spick[j]);
    }
    print_message("%d of %d sessions read through the client two changes behind (now at epoch "
                  "%llu)\n",
                  found, n_spick, (unsigned long long)st_client_ring_epoch(stale));
    assert_int_equal(found, n_spick);
    found = 0;
    for (int j = 0; j < n_pick; j++) {
        if (got_checkpoint(stale_kda, chain[pick[j]], (uint32_t)pick[j])) {
            found++;
        } else {
            print_message("checkpoint of chain %d: a miss through the client behind\n", pick[j]);
        }
    }
    print_message("%d of %d read through the client two changes behind (now at epoch %llu, the "
                  "ring's %llu)\n",
                  found, n_pick, (unsigned long long)st_client_ring_epoch(stale_kda),
                  (unsigned long long)st_client_ring_epoch(c));
    assert_int_equal(found, n_pick);
    for (int i = 0; i < SLOTS; i++) {
        st_client_close(one[i]);
    }
    st_client_close(c);
    st_client_close(stale);
    st_client_close(stale_kda);
    for (int k = 0; k < STALE_OBJS; k++) {
        free(chain[k]);
    }
    ring_destroy(&r5);
    tc_stop_all(&cl);
    dd_rm_node_dirs(dir, SLOTS);
    et_destroy(&etcd);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_replicate_and_drain_auth),
        cmocka_unit_test(test_join_drain_crash),
        cmocka_unit_test(test_etcd_join_drain_crash_restart),
        cmocka_unit_test(test_etcd_stale_client),
        cmocka_unit_test(test_stale_pusher),
        cmocka_unit_test(test_read_during_pass),
    };

    stratad_path = argc > 1 ? argv[1] : "stratad";
    if (argc > 2) {
        cmocka_set_test_filter(argv[2]); /* one case by name, by hand */
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
