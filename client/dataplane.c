/*
 * dataplane.c - libstrata's one-sided data plane (ARCHITECTURE §8): gets and
 * puts straight between the caller's buffers and the daemons' arenas.
 *
 * Read: Locate with a lease -> one get per object (one per row for row
 * reads) into the caller's buffer -> the batch completes, and the lease is
 * released in the background (a client worker job). A leased block is never
 * evicted and its extents are never reused, and a committed object is
 * immutable (its checksum was checked by the daemon at Commit), so bytes that
 * landed while the lease was alive are the committed bytes. "Alive" is what
 * this client's monotonic clock can vouch for: the time the Locate was sent
 * plus 90% of the lease the answer gave. Whole objects (verify_reads =
 * lease, the default) count when every get of the batch completed before
 * that bound; one that may have landed later is checked by XXH3-64 against
 * Locate's checksum and is a miss if it differs. With verify_reads = always,
 * every whole object is checked; so is every whole object of a node whose
 * Hello says committed_read_only = false (its transport, UCX, lets any key
 * write committed extents: docs/security.md). Rows count only if
 * each matches its row
 * sum, which the daemon computed at commit and Locate answers (want_row_sums;
 * docs/transport.md "Row verification"), whenever it landed; rows of an
 * object without row sums are read inline, whole. Anything else is a miss.
 *
 * Whole-object reads do not wait for the batch's whole Locate: each node's
 * ops are cut into batches that grow four-fold from SC_DP_WAVE0 to SC_DP_WAVE_MAX
 * bytes, the k-th batch of every node forms wave k, and the Locates of the
 * waves run on the client's locator threads (a Locate fan-out each) while
 * this thread posts the gets of the waves already located.
 *
 * Row reads keep their lease: the location and the lease's end (as this
 * client's monotonic clock bounds it: the time the Locate was sent plus 90%
 * of the lease) go into a lease cache, and later row reads of the same
 * object go straight to one-sided gets, without an RPC, while at least
 * SC_LC_MIN_LEFT of the lease is left; the entry keeps the object's row sums,
 * and rows that fail them are read again inline. Such leases are not
 * released: they end by time. A
 * node whose endpoint or regions change invalidates its entries.
 * A batch of row reads whose objects are all in the lease cache is read on
 * the calling thread inside st_client_get (sc_dp_get_now): no hand-off to a
 * worker and back; adjacent rows of an object are one get.
 *
 * Write: Reserve -> one put per object -> flush -> Commit with the XXH3-64
 * of each object; the daemon checks it before anything becomes visible.
 * Where the node's transport enforces keys (committed_read_only), the region
 * keys are read-only and each extent is written through the reservation's
 * own write key (ReserveResponse.write_rkeys), destroyed after the flush;
 * the daemon revokes it at Commit, Abort or expiry. A
 * put that failed is committed with a checksum that cannot match, so the
 * daemon refuses it and frees the extent.
 *
 * Local memory: buffers registered with st_client_register() are used as
 * they are; any other buffer is registered for the duration of the batch
 * (correct, but registration costs more than a small get: register buffers
 * that are reused).
 *
 * Threads: SC_DP_LOCATORS locator threads run Locate fan-outs queued by
 * batches (they only call the control plane, so a batch waiting on one can
 * never deadlock the pool). copy_threads - 1 copy threads take equal shares
 * (by bytes) of a node's list of direct copies (regions mapped here:
 * st_transport_get_now) while the batch's thread copies the first share and
 * then waits for theirs; one batch at a time has them (the others copy
 * alone), and the batch's thread holds the node's lock for them meanwhile. One transport per client, serialised by
 * dp->lock; a worker posts
 * its batch and progresses until its own operations completed (callbacks of
 * other workers' operations may run in its progress calls). Per node, the
 * endpoint and the unpacked region keys are guarded by the node's lock, held
 * while a batch looks keys up and posts, so a refresh never frees a key in
 * use. Keys replaced by a refresh are kept until the client closes.
 */
#include "client_internal.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Checksums of whole objects run at memory speed over every byte read or
 * written: libxxhash's runtime dispatch where it has one (st_xxh.h). */
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack (sc_dp_copy_hashed) */
#include "st_xxh.h"

#include "rowsum.h"
#include "st_log.h"
#include "st_transport.h"
#include "tcall.h"

typedef struct sc_dp_region {
    uint64_t base;
    size_t len;
    st_transport_rkey_t *rkey;
} sc_dp_region_t;

typedef struct sc_dp_node {
    pthread_mutex_t lock;
    int tcalls;           /* Hello said the node serves calls over the transport */
    int committed_ro;     /* Hello: the node's transport keeps committed bytes (else verify) */
    uint64_t resets;      /* endpoint closes: keys unpacked before one are gone with it */
    uint8_t call_key[16]; /* ... and gave the key they present */
    uint64_t gen;         /* bumped when the endpoint or the regions change (lease cache) */
    st_transport_ep_t *ep;
    uint8_t *addr;
    size_t addr_len;
    sc_dp_region_t *reg; /* by region id */
    uint32_t cap;
    uint64_t epoch;
    st_transport_rkey_t **old; /* replaced keys, destroyed at close */
    size_t n_old, cap_old;
} sc_dp_node_t;

typedef struct sc_dp_buf {
    uint8_t *ptr;
    size_t len;
    st_transport_mem_t *mem;
} sc_dp_buf_t;

/* The lease cache of row reads: SC_LC_SETS sets of SC_LC_WAYS entries; a full
 * set replaces the entry whose lease ends first. */
#define SC_LC_WAYS     8u
#define SC_LC_SETS     4096u
#define SC_LC_SLOTS    (SC_LC_SETS * SC_LC_WAYS)
#define SC_LC_MIN_LEFT 1000000000ull /* ns of lease a cached entry must have left */
/* A worker's row read locates again an entry with less than SC_LC_MIN_LEFT +
 * SC_LC_REFRESH left (taking a new lease), so that a periodic large batch
 * (the engine's warm-up) renews entries before reads on the calling thread
 * lose them. */
#define SC_LC_REFRESH  2000000000ull
/* Row reads of at most this many ops are read on the calling thread. */
#define SC_DP_NOW_MAX  256u

typedef struct sc_lc_ent {
    st_hash_t hash;
    uint64_t gen; /* the node's generation when cached; 0: empty */
    uint64_t epoch, offset, length, expiry_ns;
    uint32_t node, region_id;
    uint16_t layer;
    uint8_t kind;
    uint32_t row_bytes; /* rows: the object's row size, which its sums are of */
    uint64_t n_sums;    /* rows: its row sums (group PR_ROW_GROUP), packed */
    uint8_t *sums;      /* malloc'd, owned by the slot; NULL: whole objects */
} sc_lc_ent_t;

/* Whole-object waves: the first batch per node, and the largest. */
#define SC_DP_WAVE0        (512u << 10)
#define SC_DP_WAVE_MAX     (64u << 20)
#define SC_DP_LOCATORS     4
/* The first waves, up to this many bytes per node, are located by the
 * batch's own thread in one fan-out: a batch of that size or less wakes no
 * locator (on a loaded machine each wake-up costs more than the overlap). */
#define SC_DP_INLINE_BYTES (32u << 20)

/* A call over the transport waiting for its answer (on its caller's stack). */
typedef struct sc_tc {
    struct sc_tc *next;
    uint64_t id;
    _Atomic int done;
    uint32_t code;
    char msg[256];
    uint8_t *body; /* malloc'd: the response message */
    size_t body_len;
} sc_tc_t;

/* How long a call over the transport waits before it is made again over
 * gRPC (a daemon that died answers nothing; gRPC finds that out at once). */
#define SC_TC_PATIENCE_MS 250
/* How long a waiter spins for its answer before it naps between polls. */
#define SC_TC_SPIN_NS     300000ull

typedef struct sc_dp_loc sc_dp_loc_t;
struct sc_dp_loc {
    struct sc_dp_loc *next;
    st_client_t *c;
    struct sc_fan *fan; /* the batch's own fan-out over the transport: items [lo, hi) */
    size_t lo, hi;
    srpc_fanout_item_t *items;
    size_t n;
    int timeout_ms;
    uint64_t t_sent; /* by our monotonic clock, just before the fan-out */
    uint64_t bytes;  /* what the wave's gets will read */
    int ok;          /* srpc_fanout() returned ST_OK (each item has its status) */
    _Atomic int done;
};

/* Copy threads: up to SC_DP_COPIERS_MAX (copy_threads - 1) threads that copy
 * a share of a batch's direct copies (st_transport_get_now) beside the
 * batch's own thread. */
#define SC_DP_COPIERS_MAX 15
/* Lists of fewer bytes are copied by the batch's thread alone. */
#define SC_DP_SHARE_MIN   (1u << 20)
/* How long an idle copy thread spins for the next share before it sleeps. */
#define SC_DP_CP_SPIN_NS  20000ull

typedef struct sc_dp_post sc_dp_post_t;
typedef struct sc_dp_op sc_dp_op_t;

typedef struct sc_dp_share {
    sc_dp_node_t *nd;
    st_handle_t *h;
    sc_dp_op_t *ops;
    sc_dp_post_t *p;
    size_t lo, hi;
} sc_dp_share_t;

struct sc_dp {
    pthread_mutex_t lc_lock;
    sc_lc_ent_t *lc; /* SC_LC_SLOTS */
    /* The locator threads and their queue. */
    pthread_mutex_t loc_lock;
    pthread_cond_t loc_work, loc_done;
    sc_dp_loc_t *loc_head, *loc_tail;
    pthread_t loc_th[SC_DP_LOCATORS];
    int n_loc, loc_stop;
    int64_t lease_skew_ns;         /* tests: sc_dp_test_lease_skew() */
    int64_t row_slow_ns;           /* tests: sc_dp_test_row_clock_slow() */
    int rows_unverified;           /* benches: sc_dp_bench_rows_unverified() */
    _Atomic uint64_t rows_refused; /* row reads whose rows failed their row sums */
    pthread_mutex_t lock;          /* the transport and bufs */
    st_transport_t *tp;
    st_transport_backend_t backend;
    sc_dp_node_t node[SC_MAX_NODES];
    sc_dp_buf_t *bufs;
    size_t n_bufs, cap_bufs;
    sc_tc_t *tc_head; /* calls over the transport in flight (lock) */
    uint64_t tc_next;
    /* The copy threads. cp_use is held by the one batch that hands them
     * shares (others copy alone); cp_gen counts the hand-outs, cp_left the
     * shares not finished. */
    pthread_mutex_t cp_use, cp_lock;
    pthread_cond_t cp_work;
    pthread_t cp_th[SC_DP_COPIERS_MAX];
    int n_cp, cp_stop;
    _Atomic uint64_t cp_gen;
    _Atomic int cp_left;
    _Atomic uint64_t cp_bytes; /* copied by the copy threads (tests) */
    sc_dp_share_t cp_share[SC_DP_COPIERS_MAX];
    struct sc_dp_copier {
        sc_dp_t *dp;
        int idx;
    } cp_arg[SC_DP_COPIERS_MAX];
};

/* ----------------------------------------------------------- set up -- */

static uint64_t sc_now_ns(void);
static void sc_dp_loc_run(sc_dp_loc_t *j);
static void *sc_dp_copier_main(void *arg);
static void sc_dp_on_msg(void *arg, st_transport_msg_t *msg, const void *data, size_t len);

/* A locator thread: runs queued Locate fan-outs, one at a time. */
static void *sc_dp_locator_main(void *arg)
{
    sc_dp_t *dp = arg;

    pthread_mutex_lock(&dp->loc_lock);
    for (;;) {
        sc_dp_loc_t *j;

        while (dp->loc_head == NULL && !dp->loc_stop) {
            pthread_cond_wait(&dp->loc_work, &dp->loc_lock);
        }
        if (dp->loc_head == NULL) {
            break; /* stopping, and the queue is drained */
        }
        j = dp->loc_head;
        dp->loc_head = j->next;
        if (dp->loc_head == NULL) {
            dp->loc_tail = NULL;
        }
        pthread_mutex_unlock(&dp->loc_lock);
        sc_dp_loc_run(j);
        pthread_mutex_lock(&dp->loc_lock);
        atomic_store_explicit(&j->done, 1, memory_order_release);
        pthread_cond_broadcast(&dp->loc_done);
    }
    pthread_mutex_unlock(&dp->loc_lock);
    return NULL;
}

static void sc_dp_locators_stop(sc_dp_t *dp)
{
    pthread_mutex_lock(&dp->loc_lock);
    dp->loc_stop = 1;
    pthread_cond_broadcast(&dp->loc_work);
    pthread_mutex_unlock(&dp->loc_lock);
    for (int i = 0; i < dp->n_loc; i++) {
        pthread_join(dp->loc_th[i], NULL);
    }
    dp->n_loc = 0;
}

uint64_t sc_dp_test_shared_bytes(st_client_t *c)
{
    return c->dp != NULL ? atomic_load(&c->dp->cp_bytes) : 0;
}

void sc_dp_test_lease_skew(st_client_t *c, int64_t ns)
{
    if (c->dp != NULL) {
        c->dp->lease_skew_ns = ns;
    }
}

void sc_dp_test_row_clock_slow(st_client_t *c, int64_t ns)
{
    if (c->dp != NULL) {
        c->dp->row_slow_ns = ns;
    }
}

void sc_dp_bench_rows_unverified(st_client_t *c, int on)
{
    if (c->dp != NULL) {
        c->dp->rows_unverified = on;
    }
}

uint64_t sc_dp_rows_refused(st_client_t *c)
{
    return c->dp != NULL ? atomic_load(&c->dp->rows_refused) : 0;
}

st_status_t sc_dp_create(st_client_t *c, const char *spec)
{
    st_transport_config_t cfg;
    char kind[32], provider[128] = "";
    const char *colon = strchr(spec, ':');
    size_t kl = colon != NULL ? (size_t)(colon - spec) : strlen(spec);
    sc_dp_t *dp;
    st_status_t st;

    memset(&cfg, 0, sizeof(cfg));
    if (kl >= sizeof(kind) || (colon != NULL && strlen(colon + 1) >= sizeof(provider))) {
        return sc_error(ST_ERR_INVALID, "transport '%s': too long", spec);
    }
    memcpy(kind, spec, kl);
    kind[kl] = '\0';
    if (colon != NULL) {
        strcpy(provider, colon + 1);
    }
    if (st_transport_parse_backend(kind, &cfg.backend) != ST_OK ||
        (colon != NULL && cfg.backend != ST_TRANSPORT_FABRIC)) {
        return sc_error(ST_ERR_INVALID,
                        "transport '%s': expected inline, ucx, libfabric or "
                        "libfabric:<provider>",
                        spec);
    }
    cfg.fabric_provider = provider[0] ? provider : NULL;
    dp = calloc(1, sizeof(*dp));
    if (dp == NULL || (dp->lc = calloc(SC_LC_SLOTS, sizeof(*dp->lc))) == NULL) {
        free(dp);
        return ST_ERR_NOMEM;
    }
    st = st_transport_create(&cfg, &dp->tp);
    if (st != ST_OK) {
        free(dp->lc);
        free(dp);
        return sc_error(st, "transport '%s' cannot start here: %s", spec, st_strerror(st));
    }
    dp->backend = cfg.backend;
    (void)st_transport_msg_listen(dp->tp, sc_dp_on_msg, dp); /* libfabric: gRPC only */
    dp->tc_next = 1;
    pthread_mutex_init(&dp->lock, NULL);
    pthread_mutex_init(&dp->lc_lock, NULL);
    pthread_mutex_init(&dp->loc_lock, NULL);
    pthread_cond_init(&dp->loc_work, NULL);
    pthread_cond_init(&dp->loc_done, NULL);
    for (uint32_t i = 0; i < SC_MAX_NODES; i++) {
        pthread_mutex_init(&dp->node[i].lock, NULL);
        dp->node[i].gen = 1;
    }
    pthread_mutex_init(&dp->cp_use, NULL);
    pthread_mutex_init(&dp->cp_lock, NULL);
    pthread_cond_init(&dp->cp_work, NULL);
    c->dp = dp;
    for (int i = 0; i < SC_DP_LOCATORS; i++) {
        if (pthread_create(&dp->loc_th[i], NULL, sc_dp_locator_main, dp) != 0) {
            sc_dp_destroy(c);
            return sc_error(ST_ERR_INTERNAL, "transport '%s': cannot start its threads", spec);
        }
        dp->n_loc++;
    }
    for (uint32_t i = 0; i + 1 < c->copy_threads && i < SC_DP_COPIERS_MAX; i++) {
        dp->cp_arg[i] = (struct sc_dp_copier){dp, (int)i};
        if (pthread_create(&dp->cp_th[i], NULL, sc_dp_copier_main, &dp->cp_arg[i]) != 0) {
            sc_dp_destroy(c);
            return sc_error(ST_ERR_INTERNAL, "transport '%s': cannot start its threads", spec);
        }
        dp->n_cp++;
    }
    return ST_OK;
}

static void sc_dp_node_reset(sc_dp_node_t *n)
{
    /* Closing the endpoint destroys every key unpacked on it. */
    st_transport_ep_close(n->ep);
    n->ep = NULL;
    free(n->addr);
    n->addr = NULL;
    n->addr_len = 0;
    free(n->reg);
    n->reg = NULL;
    n->cap = 0;
    free(n->old);
    n->old = NULL;
    n->n_old = n->cap_old = 0;
    n->epoch = 0;
    n->gen++;
    n->resets++;
}

void sc_dp_destroy(st_client_t *c)
{
    sc_dp_t *dp = c->dp;

    if (dp == NULL) {
        return;
    }
    sc_dp_locators_stop(dp);
    pthread_mutex_lock(&dp->cp_lock);
    dp->cp_stop = 1;
    pthread_cond_broadcast(&dp->cp_work);
    pthread_mutex_unlock(&dp->cp_lock);
    for (int i = 0; i < dp->n_cp; i++) {
        pthread_join(dp->cp_th[i], NULL);
    }
    pthread_mutex_destroy(&dp->cp_use);
    pthread_mutex_destroy(&dp->cp_lock);
    pthread_cond_destroy(&dp->cp_work);
    pthread_mutex_destroy(&dp->loc_lock);
    pthread_cond_destroy(&dp->loc_work);
    pthread_cond_destroy(&dp->loc_done);
    for (uint32_t i = 0; i < SC_MAX_NODES; i++) {
        sc_dp_node_reset(&dp->node[i]);
        pthread_mutex_destroy(&dp->node[i].lock);
    }
    for (size_t i = 0; i < dp->n_bufs; i++) {
        st_transport_mem_deregister(dp->tp, dp->bufs[i].mem);
    }
    free(dp->bufs);
    st_transport_destroy(dp->tp);
    pthread_mutex_destroy(&dp->lock);
    pthread_mutex_destroy(&dp->lc_lock);
    for (size_t i = 0; dp->lc != NULL && i < SC_LC_SLOTS; i++) {
        free(dp->lc[i].sums);
    }
    free(dp->lc);
    free(dp);
    c->dp = NULL;
}

/* Takes a Hello answer of node i: connects (again, if its address changed)
 * and unpacks the keys of regions that are new or changed. Node lock held. */
static st_status_t sc_dp_take_hello(sc_dp_t *dp, uint32_t i, const Strata__V1__HelloResponse *r)
{
    sc_dp_node_t *n = &dp->node[i];
    int want = dp->backend == ST_TRANSPORT_UCX ? STRATA__V1__TRANSPORT_KIND__TRANSPORT_UCX
                                               : STRATA__V1__TRANSPORT_KIND__TRANSPORT_LIBFABRIC;
    st_status_t st = ST_OK;

    if ((int)r->transport != want || r->transport_address.len == 0) {
        pthread_mutex_lock(&dp->lock);
        sc_dp_node_reset(n); /* this node is served inline */
        n->tcalls = 0;
        pthread_mutex_unlock(&dp->lock);
        return ST_OK;
    }
    pthread_mutex_lock(&dp->lock);
    if (n->ep == NULL || n->addr_len != r->transport_address.len ||
        memcmp(n->addr, r->transport_address.data, n->addr_len) != 0) {
        sc_dp_node_reset(n);
        n->addr = malloc(r->transport_address.len);
        if (n->addr == NULL) {
            st = ST_ERR_NOMEM;
        } else {
            memcpy(n->addr, r->transport_address.data, r->transport_address.len);
            n->addr_len = r->transport_address.len;
            st = st_transport_connect(dp->tp, n->addr, n->addr_len, &n->ep);
        }
        if (st != ST_OK) {
            sc_dp_node_reset(n);
        }
    }
    for (size_t k = 0; st == ST_OK && k < r->n_regions; k++) {
        const Strata__V1__Region *g = r->regions[k];
        st_transport_rkey_t *rkey = NULL;
        sc_dp_region_t *x;

        if (g->rkey.len == 0) {
            continue;
        }
        if (g->id >= n->cap) {
            uint32_t cap = n->cap ? n->cap : 16;
            sc_dp_region_t *m;

            while (cap <= g->id) {
                cap *= 2;
            }
            m = realloc(n->reg, sizeof(*m) * cap);
            if (m == NULL) {
                st = ST_ERR_NOMEM;
                break;
            }
            memset(m + n->cap, 0, sizeof(*m) * (cap - n->cap));
            n->reg = m;
            n->cap = cap;
        }
        x = &n->reg[g->id];
        if (x->rkey != NULL && x->base == g->remote_addr && x->len == g->length) {
            continue; /* unchanged (a region is only ever replaced, never moved) */
        }
        if (st_transport_rkey_unpack(n->ep, g->rkey.data, g->rkey.len, &rkey) != ST_OK) {
            continue; /* unusable: reads of it fall back to a miss */
        }
        if (x->rkey != NULL) {
            if (n->n_old == n->cap_old) {
                size_t cap = n->cap_old ? 2 * n->cap_old : 8;
                st_transport_rkey_t **o = realloc(n->old, sizeof(*o) * cap);

                if (o == NULL) {
                    st_transport_rkey_destroy(rkey);
                    st = ST_ERR_NOMEM;
                    break;
                }
                n->old = o;
                n->cap_old = cap;
            }
            n->old[n->n_old++] = x->rkey;
        }
        x->rkey = rkey;
        x->base = g->remote_addr;
        x->len = g->length;
    }
    if (st == ST_OK) {
        n->gen += n->epoch != r->region_epoch;
        n->epoch = r->region_epoch;
    }
    n->committed_ro = r->committed_read_only;
    n->tcalls = st == ST_OK && n->ep != NULL && r->transport_calls &&
                r->transport_call_key.len == sizeof(n->call_key);
    if (n->tcalls) {
        memcpy(n->call_key, r->transport_call_key.data, sizeof(n->call_key));
    }
    pthread_mutex_unlock(&dp->lock);
    return st;
}

void sc_dp_hello(st_client_t *c, uint32_t i, const Strata__V1__HelloResponse *r)
{
    sc_dp_t *dp = c->dp;
    st_status_t st;

    if (dp == NULL) {
        return;
    }
    pthread_mutex_lock(&dp->node[i].lock);
    st = sc_dp_take_hello(dp, i, r);
    pthread_mutex_unlock(&dp->node[i].lock);
    if (st != ST_OK) {
        st_warn("dataplane: cannot use node=%s's transport (%s): inline for it", c->nodes[i].addr,
                st_strerror(st));
    }
}

/* Asks node i for its regions again. Node lock held. */
static void sc_dp_refresh(st_client_t *c, uint32_t i)
{
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *resp = NULL;
    srpc_error_t err;

    req.protocol_version = 1;
    req.tenant = c->tenant;
    req.model = c->model;
    req.client_name = "libstrata";
    if (srpc_call(c->nodes[i].ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &req.base,
                  (int)c->timeout_ms, (ProtobufCMessage **)&resp, &err) != ST_OK) {
        return;
    }
    if (resp->namespace_id == c->ns) {
        (void)sc_dp_take_hello(c->dp, i, resp);
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

/* One progress call of the client's transport, under its lock. */
static int sc_dp_poll(sc_dp_t *dp)
{
    int n;

    pthread_mutex_lock(&dp->lock);
    n = st_transport_progress(dp->tp);
    pthread_mutex_unlock(&dp->lock);
    return n;
}

/* ------------------------------------------ calls over the transport -- */

/* The transport's listener (dp->lock held): an answer to one of our calls. */
static void sc_dp_on_msg(void *arg, st_transport_msg_t *msg, const void *data, size_t len)
{
    sc_dp_t *dp = arg;
    st_tcall_frame_t f;
    char why[160];
    sc_tc_t **pp, *t = NULL;

    (void)msg;
    if (st_tcall_parse(data, len, 1, &f, why, sizeof(why)) != ST_OK) {
        st_warn_ratelimited("dataplane: answer over the transport refused: %s bytes=%zu", why, len);
        return;
    }
    for (pp = &dp->tc_head; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->id == f.id) {
            t = *pp;
            *pp = t->next;
            break;
        }
    }
    if (t == NULL) {
        return; /* the caller gave up on it (and asked over gRPC) */
    }
    t->code = f.code;
    snprintf(t->msg, sizeof(t->msg), "%.*s", (int)f.text_len, f.text);
    if (f.body_len > 0) {
        t->body = malloc(f.body_len);
        if (t->body == NULL) {
            t->code = 8; /* RESOURCE_EXHAUSTED */
            snprintf(t->msg, sizeof(t->msg), "out of memory for an answer of %zu bytes",
                     f.body_len);
        } else {
            memcpy(t->body, f.body, f.body_len);
            t->body_len = f.body_len;
        }
    }
    atomic_store_explicit(&t->done, 1, memory_order_release);
}

/* The node whose channel is ch, or -1. */
static int sc_node_of(const st_client_t *c, const srpc_channel_t *ch)
{
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        if (c->nodes[i].ch == ch) {
            return (int)i;
        }
    }
    return -1;
}

/* Sends item's request to node over the transport as call t (NULL: its
 * answer is not wanted and will be dropped). 1: sent. */
static int sc_tc_send(st_client_t *c, uint32_t node, uint32_t tcm, const srpc_fanout_item_t *item,
                      sc_tc_t *t)
{
    sc_dp_t *dp = c->dp;
    sc_dp_node_t *nd = &dp->node[node];
    size_t body = protobuf_c_message_get_packed_size(item->req), n;
    uint8_t *frame = malloc(ST_TCALL_HDR + sizeof(nd->call_key) + body);
    int sent = 0;

    if (frame == NULL) {
        return 0;
    }
    pthread_mutex_lock(&nd->lock);
    pthread_mutex_lock(&dp->lock);
    if (nd->tcalls && nd->ep != NULL) {
        uint64_t id = t != NULL ? dp->tc_next++ : 0; /* 0: nobody waits for the answer */

        n = st_tcall_head(frame, 0, tcm, id, (const char *)nd->call_key, sizeof(nd->call_key));
        n += protobuf_c_message_pack(item->req, frame + n);
        if (t != NULL) {
            t->id = id;
            t->next = dp->tc_head;
            dp->tc_head = t;
        }
        if (st_transport_msg_send(nd->ep, frame, n) == ST_OK) {
            sent = 1;
        } else if (t != NULL) {
            dp->tc_head = t->next;
        }
    }
    pthread_mutex_unlock(&dp->lock);
    pthread_mutex_unlock(&nd->lock);
    free(frame);
    return sent;
}

/* Removes t from the calls in flight if its answer has not come. dp->lock held. */
static void sc_tc_forget(sc_dp_t *dp, sc_tc_t *t)
{
    for (sc_tc_t **pp = &dp->tc_head; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == t) {
            *pp = t->next;
            return;
        }
    }
}

/* A fan-out whose calls go over the transport where they can: started,
 * then waited for item by item range, then ended. */
struct sc_fan {
    st_client_t *c;
    const srpc_method_t *method;
    srpc_fanout_item_t *items;
    size_t n;
    int timeout_ms;
    uint64_t start;
    sc_tc_t *tc;
    uint8_t *via; /* 0: gRPC's; 1: sent over the transport; 2: its answer is in items */
};
typedef struct sc_fan sc_fan_t;

/* Sends what can go over the transport. Returns 0 when nothing was sent for
 * lack of memory (then every item is gRPC's). */
static int sc_fan_start(sc_fan_t *f, st_client_t *c, const srpc_method_t *method, uint32_t tcm,
                        srpc_fanout_item_t *items, size_t n, int timeout_ms)
{
    memset(f, 0, sizeof(*f));
    f->c = c;
    f->method = method;
    f->items = items;
    f->n = n;
    f->timeout_ms = timeout_ms;
    f->start = sc_now_ns();
    f->tc = calloc(n + 1, sizeof(*f->tc));
    f->via = calloc(n + 1, 1);
    if (f->tc == NULL || f->via == NULL) {
        free(f->tc), free(f->via);
        f->tc = NULL;
        f->via = NULL;
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        int node = sc_node_of(c, items[i].ch);

        items[i].resp = NULL;
        f->via[i] = node >= 0 && sc_tc_send(c, (uint32_t)node, tcm, &items[i], &f->tc[i]);
    }
    return 1;
}

/* Whether every item of f went over the transport. */
static int sc_fan_all_sent(const sc_fan_t *f)
{
    for (size_t i = 0; f->via != NULL && i < f->n; i++) {
        if (f->via[i] == 0) {
            return 0;
        }
    }
    return f->via != NULL;
}

/* Waits for the answers of items [lo, hi) sent over the transport, makes
 * those not answered within SC_TC_PATIENCE_MS again over gRPC, and fills
 * the items as srpc_fanout() would. */
static void sc_fan_wait(sc_fan_t *f, size_t lo, size_t hi)
{
    sc_dp_t *dp = f->c->dp;
    uint64_t patience =
        (uint64_t)(f->timeout_ms > 0 && f->timeout_ms < SC_TC_PATIENCE_MS ? f->timeout_ms
                                                                          : SC_TC_PATIENCE_MS) *
        1000000ull;
    srpc_fanout_item_t *rest;
    size_t n_rest = 0;

    uint64_t t0 = sc_now_ns();

    if (f->via == NULL) {
        return;
    }
    for (;;) {
        size_t left = 0;
        int progressed;
        uint64_t now = sc_now_ns();

        for (size_t i = lo; i < hi; i++) {
            left += f->via[i] == 1 && !atomic_load_explicit(&f->tc[i].done, memory_order_acquire);
        }
        if (left == 0 || now - f->start > patience) {
            break;
        }
        progressed = sc_dp_poll(dp);
        if (progressed <= 0) {
            /* Spin for the usual answer (a few hundred microseconds), then
             * nap: a waiter must not take the cores the daemons and the
             * copying threads need (the client's locators wait here too). */
            if (now - t0 < SC_TC_SPIN_NS) {
                sched_yield();
            } else {
                nanosleep(&(struct timespec){0, 20000}, NULL);
            }
        }
    }
    /* Unanswered: over gRPC now (the late answer, if any, is dropped). */
    rest = calloc(hi - lo + 1, sizeof(*rest));
    pthread_mutex_lock(&dp->lock);
    for (size_t i = lo; i < hi; i++) {
        if (f->via[i] == 1 && !atomic_load_explicit(&f->tc[i].done, memory_order_acquire)) {
            sc_tc_forget(dp, &f->tc[i]);
            f->via[i] = 3;
            if (rest != NULL) {
                rest[n_rest++] = f->items[i];
            }
        }
    }
    pthread_mutex_unlock(&dp->lock);
    if (n_rest > 0) {
        int64_t spent = (int64_t)((sc_now_ns() - f->start) / 1000000ull);
        int t_ms =
            f->timeout_ms > 0 ? (int)(f->timeout_ms - spent > 1 ? f->timeout_ms - spent : 1) : 0;

        st_debug("dataplane: %zu calls over the transport unanswered after %d ms: over gRPC",
                 n_rest, SC_TC_PATIENCE_MS);
        (void)srpc_fanout(f->method, rest, n_rest, t_ms);
    }
    for (size_t i = lo, k = 0; i < hi; i++) {
        sc_tc_t *t = &f->tc[i];
        srpc_fanout_item_t *it = &f->items[i];

        if (f->via[i] == 3) {
            if (rest != NULL) {
                *it = rest[k++];
            } else {
                it->status = ST_ERR_NOMEM;
            }
            f->via[i] = 2;
            continue;
        }
        if (f->via[i] != 1) {
            continue;
        }
        f->via[i] = 2;
        memset(&it->err, 0, sizeof(it->err));
        if (t->code != 0) {
            it->status = st_status_from_grpc((int)t->code);
            it->err.grpc_code = (int)t->code;
            snprintf(it->err.message, sizeof(it->err.message), "%s", t->msg);
        } else {
            it->resp = protobuf_c_message_unpack(f->method->resp_desc, NULL, t->body_len,
                                                 t->body != NULL ? t->body : (uint8_t *)"");
            it->status = it->resp != NULL ? ST_OK : ST_ERR_PROTOCOL;
        }
        free(t->body);
        t->body = NULL;
    }
    free(rest);
}

/* Waits for whatever is left and frees f. */
static void sc_fan_end(sc_fan_t *f)
{
    sc_fan_wait(f, 0, f->n);
    free(f->tc), free(f->via);
    f->tc = NULL;
    f->via = NULL;
}

/* Makes the calls of f that did not go over the transport over gRPC, now
 * (their answers queue up meanwhile). Returns srpc_fanout()'s status. */
static st_status_t sc_fan_grpc(sc_fan_t *f)
{
    srpc_fanout_item_t *rest;
    size_t n_rest = 0;
    st_status_t st;

    if (sc_fan_all_sent(f)) {
        return ST_OK;
    }
    rest = calloc(f->n, sizeof(*rest));
    if (rest == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < f->n; i++) {
        if (f->via[i] == 0) {
            rest[n_rest++] = f->items[i];
        }
    }
    st = srpc_fanout(f->method, rest, n_rest, f->timeout_ms);
    for (size_t i = 0, k = 0; i < f->n; i++) {
        if (f->via[i] == 0) {
            f->items[i] = rest[k++];
        }
    }
    free(rest);
    return st;
}

st_status_t sc_fanout(st_client_t *c, const srpc_method_t *method, uint32_t tcm,
                      srpc_fanout_item_t *items, size_t n, int timeout_ms)
{
    sc_fan_t f;
    st_status_t st;

    if (c->dp == NULL || !c->tcalls || n == 0 ||
        !sc_fan_start(&f, c, method, tcm, items, n, timeout_ms)) {
        return srpc_fanout(method, items, n, timeout_ms);
    }
    st = sc_fan_grpc(&f);
    sc_fan_end(&f);
    return st;
}

/* ------------------------------------------------- local registration -- */

/* The registered buffer that holds [p, p + len), or NULL. dp->lock held. */
static st_transport_mem_t *sc_dp_find_buf(sc_dp_t *dp, const void *p, size_t len)
{
    const uint8_t *b = p;

    for (size_t i = 0; i < dp->n_bufs; i++) {
        if (b >= dp->bufs[i].ptr && b + len <= dp->bufs[i].ptr + dp->bufs[i].len) {
            return dp->bufs[i].mem;
        }
    }
    return NULL;
}

st_status_t st_client_register(st_client_t *c, void *ptr, size_t len)
{
    sc_dp_t *dp = c != NULL ? c->dp : NULL;
    st_transport_mem_t *mem;
    st_status_t st;

    if (c == NULL || ptr == NULL || len == 0) {
        return sc_error(ST_ERR_INVALID, "register: NULL client or buffer, or length 0");
    }
    if (dp == NULL) {
        return ST_OK; /* inline: nothing to register */
    }
    pthread_mutex_lock(&dp->lock);
    if (dp->n_bufs == dp->cap_bufs) {
        size_t cap = dp->cap_bufs ? 2 * dp->cap_bufs : 8;
        sc_dp_buf_t *b = realloc(dp->bufs, sizeof(*b) * cap);

        if (b == NULL) {
            pthread_mutex_unlock(&dp->lock);
            return sc_error(ST_ERR_NOMEM, "register: out of memory");
        }
        dp->bufs = b;
        dp->cap_bufs = cap;
    }
    st = st_transport_mem_register(dp->tp, ptr, len, &mem);
    if (st == ST_OK) {
        dp->bufs[dp->n_bufs++] = (sc_dp_buf_t){ptr, len, mem};
    }
    pthread_mutex_unlock(&dp->lock);
    return st == ST_OK ? ST_OK
                       : sc_error(st, "register: the transport refused %zu bytes at %p: %s", len,
                                  ptr, st_strerror(st));
}

st_status_t st_client_deregister(st_client_t *c, void *ptr)
{
    sc_dp_t *dp = c != NULL ? c->dp : NULL;

    if (c == NULL || ptr == NULL) {
        return sc_error(ST_ERR_INVALID, "deregister: NULL client or buffer");
    }
    if (dp == NULL) {
        return ST_OK;
    }
    pthread_mutex_lock(&dp->lock);
    for (size_t i = 0; i < dp->n_bufs; i++) {
        if (dp->bufs[i].ptr == ptr) {
            st_transport_mem_deregister(dp->tp, dp->bufs[i].mem);
            dp->bufs[i] = dp->bufs[--dp->n_bufs];
            pthread_mutex_unlock(&dp->lock);
            return ST_OK;
        }
    }
    pthread_mutex_unlock(&dp->lock);
    return sc_error(ST_ERR_NOT_FOUND, "deregister: %p was not registered", ptr);
}

/* ------------------------------------------------------- operations -- */

/* One op's transfers. */
typedef struct sc_dp_op {
    _Atomic size_t *pending;   /* the batch's count of transfers in flight */
    _Atomic int failed;        /* a transfer of this op failed */
    st_transport_mem_t *tmp;   /* registered for this batch only */
    st_transport_rkey_t *wkey; /* puts: the reservation's write key, unpacked (dp->lock) */
    uint64_t wkey_resets;      /* the node's resets when it was unpacked */
    uint32_t node;
    int posted; /* transfers were posted (the op is decided after them) */
    uint64_t checksum;
    uint64_t lease;      /* index into the node's Locate answer */
    uint64_t expiry_ns;  /* rows: the lease's end by our clock (0: ask Release) */
    int cached;          /* rows posted from the lease cache, without a Locate */
    uint64_t bound_ns;   /* whole objects: the lease's end by our clock (0: no lease) */
    uint8_t check;       /* whole objects: verify the landed bytes by their checksum */
    uint64_t *rsum;      /* rows: room for the sum of each row (in the batch's buffer) */
    uint8_t has_rsum;    /* rows: rsum holds the sums the rows are verified by */
    uint8_t now_checked; /* rows: all copied at the post (st_transport_get_now) and
                            checked against rsum then, while in cache */
    uint8_t now_bad;     /* ... and one of them failed its sum (first: now_row) */
    uint32_t now_row;
    uint8_t prechecked; /* hashed while copied (sc_dp_copy_hashed): 2 matched, 1 differed */
} sc_dp_op_t;

static uint64_t sc_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The set of an object's entries: SC_LC_WAYS consecutive slots. */
static sc_lc_ent_t *sc_lc_set(sc_dp_t *dp, const st_hash_t *h, uint8_t kind, uint16_t layer)
{
    uint64_t x;

    memcpy(&x, h->b, sizeof(x));
    x ^= (uint64_t)kind * 0x9e3779b97f4a7c15ull ^ (uint64_t)layer * 0xc2b2ae3d27d4eb4full;
    return &dp->lc[((x ^ (x >> 29)) % SC_LC_SETS) * SC_LC_WAYS];
}

static int sc_lc_match(const sc_lc_ent_t *e, const st_hash_t *h, uint8_t kind, uint16_t layer)
{
    return e->gen != 0 && e->kind == kind && e->layer == layer &&
           memcmp(e->hash.b, h->b, ST_HASH_BYTES) == 0;
}

/* The sums of op's rows from an object's packed row sums, into rsum (room
 * for one per row of op); 0 when the sums do not cover them (another row
 * size, a row past them) or there is no room. */
static int sc_rows_sums(const st_get_op_t *op, uint32_t row_bytes, const uint8_t *sums,
                        uint64_t n_sums, uint64_t *rsum)
{
    if (sums == NULL || rsum == NULL || row_bytes != op->row_bytes || PR_ROW_GROUP != 1) {
        return 0;
    }
    for (uint32_t x = 0; x < op->n_rows; x++) {
        if (op->rows[x] >= n_sums) {
            return 0;
        }
        rsum[x] = pr_rowsum_at(sums, op->rows[x]);
    }
    return 1;
}

/* One buffer with room for a sum per row of every op of the batch (NULL
 * when there is no memory: no row can be verified, the rows are read
 * inline); ops[i].rsum point into it. The caller frees it. */
static uint64_t *sc_dp_rsum_room(const st_get_op_t *gets, sc_dp_op_t *ops, size_t n)
{
    size_t total = 0;
    uint64_t *buf;

    for (size_t i = 0; i < n; i++) {
        total += gets[i].n_rows;
    }
    buf = total > 0 ? malloc(sizeof(*buf) * total) : NULL;
    for (size_t i = 0, at = 0; buf != NULL && i < n; at += gets[i++].n_rows) {
        ops[i].rsum = buf + at;
    }
    return buf;
}

/* The cached location of a row read's object with enough lease left, into
 * *out (out->sums is not the slot's: NULL); for rows (op->n_rows > 0) also
 * their sums into o->rsum, and an entry that has none for them is no hit. */
static int sc_lc_find(sc_dp_t *dp, uint32_t node, const st_hash_t *h, uint8_t kind, uint16_t layer,
                      uint64_t now, sc_lc_ent_t *out, const st_get_op_t *op, sc_dp_op_t *o)
{
    sc_lc_ent_t *set;
    int hit = 0;

    now -= (uint64_t)dp->row_slow_ns;
    pthread_mutex_lock(&dp->lc_lock);
    set = sc_lc_set(dp, h, kind, layer);
    for (uint32_t w = 0; !hit && w < SC_LC_WAYS; w++) {
        hit = sc_lc_match(&set[w], h, kind, layer) && set[w].node == node &&
              now + SC_LC_MIN_LEFT < set[w].expiry_ns;
        if (hit && op->n_rows > 0 && !dp->rows_unverified) {
            hit = o->has_rsum =
                (uint8_t)sc_rows_sums(op, set[w].row_bytes, set[w].sums, set[w].n_sums, o->rsum);
        }
        if (hit) {
            *out = set[w];
            out->sums = NULL;
        }
    }
    pthread_mutex_unlock(&dp->lc_lock);
    return hit;
}

/* Into the object's own entry, else an empty one, else the one whose lease ends first. */
static void sc_lc_put(sc_dp_t *dp, const sc_lc_ent_t *v)
{
    sc_lc_ent_t *set, *e = NULL;

    pthread_mutex_lock(&dp->lc_lock);
    set = sc_lc_set(dp, &v->hash, v->kind, v->layer);
    for (uint32_t w = 0; e == NULL && w < SC_LC_WAYS; w++) {
        e = sc_lc_match(&set[w], &v->hash, v->kind, v->layer) ? &set[w] : NULL;
    }
    for (uint32_t w = 0; e == NULL && w < SC_LC_WAYS; w++) {
        e = set[w].gen == 0 ? &set[w] : NULL;
    }
    if (e == NULL) {
        e = &set[0];
        for (uint32_t w = 1; w < SC_LC_WAYS; w++) {
            e = set[w].expiry_ns < e->expiry_ns ? &set[w] : e;
        }
    }
    free(e->sums);
    *e = *v; /* the slot takes v->sums */
    pthread_mutex_unlock(&dp->lc_lock);
}

static void sc_lc_drop(sc_dp_t *dp, const st_hash_t *h, uint8_t kind, uint16_t layer)
{
    sc_lc_ent_t *set;

    pthread_mutex_lock(&dp->lc_lock);
    set = sc_lc_set(dp, h, kind, layer);
    for (uint32_t w = 0; w < SC_LC_WAYS; w++) {
        if (sc_lc_match(&set[w], h, kind, layer)) {
            set[w].gen = 0;
            free(set[w].sums);
            set[w].sums = NULL;
        }
    }
    pthread_mutex_unlock(&dp->lc_lock);
}

static void sc_dp_done(void *user, st_status_t status)
{
    sc_dp_op_t *o = user;

    if (status != ST_OK) {
        o->failed = 1;
    }
    atomic_fetch_sub(o->pending, 1);
}

/* The registration covering [p, p + len): a registered buffer, or a
 * temporary one recorded in o->tmp. NULL on failure. dp->lock held. */
static st_transport_mem_t *sc_dp_local(sc_dp_t *dp, sc_dp_op_t *o, void *p, size_t len)
{
    st_transport_mem_t *m = sc_dp_find_buf(dp, p, len);

    if (m == NULL && o->tmp == NULL &&
        st_transport_mem_register(dp->tp, p, len, &o->tmp) != ST_OK) {
        return NULL;
    }
    return m != NULL ? m : o->tmp;
}

/* Progresses until the batch's transfers have all completed. */
static void sc_dp_wait(sc_dp_t *dp, _Atomic size_t *pending)
{
    while (atomic_load(pending) > 0) {
        int n;

        n = sc_dp_poll(dp);
        if (n <= 0) {
            sched_yield();
        }
    }
}

/* sc_dp_wait with a deadline: ST_OK once every transfer completed,
 * ST_ERR_TIMEOUT when some are still in flight after timeout_ms. */
static st_status_t sc_dp_wait_until(sc_dp_t *dp, _Atomic size_t *pending, uint32_t timeout_ms)
{
    uint64_t until = sc_now_ns() + (uint64_t)timeout_ms * 1000000ull;

    while (atomic_load(pending) > 0) {
        if (sc_dp_poll(dp) <= 0) {
            if (sc_now_ns() >= until) {
                return ST_ERR_TIMEOUT;
            }
            sched_yield();
        }
    }
    return ST_OK;
}

static void sc_dp_free_tmp(sc_dp_t *dp, sc_dp_op_t *o, size_t n)
{
    pthread_mutex_lock(&dp->lock);
    for (size_t i = 0; i < n; i++) {
        st_transport_mem_deregister(dp->tp, o[i].tmp);
        o[i].tmp = NULL;
    }
    pthread_mutex_unlock(&dp->lock);
}

/* Looks up region id of node n, refreshing once per batch when unknown or
 * when the epoch moved. Node lock held. */
static sc_dp_region_t *sc_dp_region(st_client_t *c, uint32_t node, uint32_t id, uint64_t epoch,
                                    int *refreshed)
{
    sc_dp_node_t *n = &c->dp->node[node];

    if ((id >= n->cap || n->reg[id].rkey == NULL || epoch != n->epoch) && !*refreshed) {
        *refreshed = 1;
        sc_dp_refresh(c, node);
    }
    if (n->ep == NULL || id >= n->cap || n->reg[id].rkey == NULL) {
        return NULL;
    }
    return &n->reg[id];
}

/* The owner of each op, or -1 when it has no data plane (served inline). */
static int sc_dp_owner(st_client_t *c, const st_hash_t *chain, uint64_t block)
{
    int o = sc_owner(c, sc_segment_first(c, chain, block));

    return o >= 0 && c->dp->node[o].ep != NULL ? o : -1;
}

/* Groups ops by owner into batches of at most max_batch; returns the number
 * of batches, filling node[b], first[b], count[b] over the permutation perm. */
static size_t sc_dp_batches(st_client_t *c, const int *owner, size_t n, size_t *perm,
                            uint32_t *bnode, size_t *bfirst, size_t *bcount)
{
    size_t k = 0, nb = 0;

    for (uint32_t x = 0; x < c->n_nodes; x++) {
        size_t start = k;

        for (size_t i = 0; i < n; i++) {
            if (owner[i] == (int)x) {
                perm[k++] = i;
            }
        }
        for (size_t s = start; s < k; s += c->max_batch) {
            bnode[nb] = x;
            bfirst[nb] = s;
            bcount[nb] = k - s < c->max_batch ? k - s : c->max_batch;
            nb++;
        }
    }
    return nb;
}

/* The bytes op will read (whole objects: at most dst_len). */
static uint64_t sc_dp_get_bytes(const st_get_op_t *op)
{
    return op->n_rows ? (uint64_t)op->n_rows * op->row_bytes : op->dst_len;
}

/*
 * Groups a get batch's ops by owner into waves: each node's ops are cut into
 * batches of at most max_batch ops whose bytes grow four-fold from SC_DP_WAVE0 to
 * SC_DP_WAVE_MAX (at least one op each), and the k-th batch of every node
 * is in wave k. Fills node[b], first[b], count[b] (over the permutation
 * perm) and wave[b] for the batches in wave order; returns their number,
 * or 0 with *nomem set when out of memory.
 */
static size_t sc_dp_waves(st_client_t *c, const st_handle_t *h, const int *owner, size_t n,
                          size_t *perm, uint32_t *bnode, size_t *bfirst, size_t *bcount,
                          uint32_t *bwave, int *nomem)
{
    size_t k = 0, nb = 0;
    uint32_t nw = 0;
    size_t *tmp = NULL, *per_wave = NULL;

    for (uint32_t x = 0; x < c->n_nodes; x++) {
        size_t s = k;
        uint32_t w = 0;

        for (size_t i = 0; i < n; i++) {
            if (owner[i] == (int)x) {
                perm[k++] = i;
            }
        }
        while (s < k) {
            uint64_t target = w < 8 ? (uint64_t)SC_DP_WAVE0 << (2 * w) : SC_DP_WAVE_MAX, bytes = 0;
            size_t e = s;

            target = target < SC_DP_WAVE_MAX ? target : SC_DP_WAVE_MAX;
            while (e < k && e - s < c->max_batch && (e == s || bytes < target)) {
                bytes += sc_dp_get_bytes(&h->gets[perm[e]]);
                e++;
            }
            bnode[nb] = x;
            bfirst[nb] = s;
            bcount[nb] = e - s;
            bwave[nb++] = w++;
            s = e;
        }
        nw = w > nw ? w : nw;
    }
    if (nw <= 1) {
        return nb; /* one wave: already in order */
    }
    /* Stable counting sort of the batches by wave. */
    tmp = calloc(4 * nb, sizeof(*tmp));
    per_wave = calloc(nw + 1, sizeof(*per_wave));
    if (tmp == NULL || per_wave == NULL) {
        free(tmp), free(per_wave);
        *nomem = 1;
        return 0;
    }
    for (size_t b = 0; b < nb; b++) {
        per_wave[bwave[b] + 1]++;
    }
    for (uint32_t w = 0; w < nw; w++) {
        per_wave[w + 1] += per_wave[w];
    }
    for (size_t b = 0; b < nb; b++) {
        size_t to = per_wave[bwave[b]]++;

        tmp[to] = bnode[b];
        tmp[nb + to] = bfirst[b];
        tmp[2 * nb + to] = bcount[b];
        tmp[3 * nb + to] = bwave[b];
    }
    for (size_t b = 0; b < nb; b++) {
        bnode[b] = (uint32_t)tmp[b];
        bfirst[b] = tmp[nb + b];
        bcount[b] = tmp[2 * nb + b];
        bwave[b] = (uint32_t)tmp[3 * nb + b];
    }
    free(tmp), free(per_wave);
    return nb;
}

/* Runs one wave's Locate fan-out (on a locator thread, or the batch's own). */
static void sc_dp_loc_run(sc_dp_loc_t *j)
{
    j->t_sent = sc_now_ns();
    j->ok = sc_fanout(j->c, &srpc_cache_methods[SRPC_CACHE_LOCATE], ST_TCALL_LOCATE, j->items, j->n,
                      j->timeout_ms) == ST_OK;
}

/* Queues the Locate fan-outs of the waves, in order, for the locator threads. */
static void sc_dp_loc_submit(sc_dp_t *dp, sc_dp_loc_t *loc, size_t nw)
{
    if (nw == 0) {
        return;
    }
    for (size_t w = 0; w + 1 < nw; w++) {
        loc[w].next = &loc[w + 1];
    }
    loc[nw - 1].next = NULL;
    pthread_mutex_lock(&dp->loc_lock);
    if (dp->loc_tail != NULL) {
        dp->loc_tail->next = &loc[0];
    } else {
        dp->loc_head = &loc[0];
    }
    dp->loc_tail = &loc[nw - 1];
    if (nw == 1) {
        pthread_cond_signal(&dp->loc_work);
    } else {
        pthread_cond_broadcast(&dp->loc_work);
    }
    pthread_mutex_unlock(&dp->loc_lock);
}

/* Waits for a wave's Locate, progressing the batch's transfers meanwhile. */
static void sc_dp_loc_wait(sc_dp_t *dp, sc_dp_loc_t *j, _Atomic size_t *pending)
{
    if (j->fan != NULL && !atomic_load_explicit(&j->done, memory_order_acquire)) {
        sc_fan_wait(j->fan, j->lo, j->hi); /* one wave of the batch's own fan-out */
        atomic_store_explicit(&j->done, 1, memory_order_release);
        return;
    }
    while (!atomic_load_explicit(&j->done, memory_order_acquire)) {
        if (atomic_load(pending) > 0) {
            int n;

            n = sc_dp_poll(dp);
            if (n <= 0) {
                sched_yield();
            }
            continue;
        }
        pthread_mutex_lock(&dp->loc_lock);
        while (!atomic_load_explicit(&j->done, memory_order_acquire)) {
            pthread_cond_wait(&dp->loc_done, &dp->loc_lock);
        }
        pthread_mutex_unlock(&dp->loc_lock);
    }
}

/* Checksums of whole objects landed by one-sided gets, over [lo, hi). */
typedef struct sc_dp_verify {
    st_handle_t *h;
    const sc_dp_op_t *ops;
    size_t lo, hi;
    uint8_t *ok;
} sc_dp_verify_t;

static void *sc_dp_verify_range(void *arg)
{
    sc_dp_verify_t *v = arg;

    for (size_t i = v->lo; i < v->hi; i++) {
        const st_get_op_t *op = &v->h->gets[i];
        const sc_dp_op_t *o = &v->ops[i];

        if (o->posted && !o->failed && op->n_rows == 0) {
            v->ok[i] =
                !o->check || (o->prechecked ? o->prechecked == 2
                                            : XXH3_64bits(op->dst, op->length) == o->checksum);
        }
    }
    return NULL;
}

/*
 * Checks the whole objects that landed and must be checked (o->check; the
 * others are vouched for by their lease). Hashing costs about as much CPU
 * as the copy itself, so a large batch is split over two threads (the
 * machine this was tuned on has two cores; more would not pay on one
 * socket's memory bandwidth).
 */
static void sc_dp_verify_all(st_handle_t *h, const sc_dp_op_t *ops, size_t n, uint8_t *ok)
{
    sc_dp_verify_t a = {h, ops, 0, n, ok}, b;
    uint64_t bytes = 0, half = 0;
    size_t split = n;
    pthread_t th;

    for (size_t i = 0; i < n; i++) {
        if (ops[i].posted && ops[i].check && !ops[i].prechecked && h->gets[i].n_rows == 0) {
            bytes += h->gets[i].length;
        }
    }
    if (bytes >= (8u << 20) && n > 1) {
        for (size_t i = 0; i < n; i++) {
            if (ops[i].posted && ops[i].check && !ops[i].prechecked && h->gets[i].n_rows == 0) {
                half += h->gets[i].length;
            }
            if (half >= bytes / 2) {
                split = i + 1;
                break;
            }
        }
    }
    if (split < n) {
        b = (sc_dp_verify_t){h, ops, split, n, ok};
        a.hi = split;
        if (pthread_create(&th, NULL, sc_dp_verify_range, &b) == 0) {
            sc_dp_verify_range(&a);
            pthread_join(th, NULL);
            return;
        }
        a.hi = n;
    }
    sc_dp_verify_range(&a);
}

/* Leases released in the background, after the batch that took them completed. */
typedef struct sc_dp_release_job {
    sc_job_t job; /* first: the pool hands this pointer back */
    st_client_t *c;
    size_t n;
    uint64_t *lease;
    uint32_t *node;
} sc_dp_release_job_t;

/* Releases j's leases: one request per node (leases are grouped by node)
 * of at most max_batch leases. */
static void sc_dp_release_run(sc_job_t *job)
{
    sc_dp_release_job_t *j = (sc_dp_release_job_t *)job;
    Strata__V1__ReleaseRequest *rel = calloc(j->n, sizeof(*rel));
    srpc_fanout_item_t *items = calloc(j->n, sizeof(*items));
    size_t nr = 0;

    if (rel != NULL && items != NULL) {
        for (size_t k = 0; k < j->n; k++) {
            if (nr > 0 && j->node[k] == j->node[k - 1] &&
                rel[nr - 1].n_lease_ids < j->c->max_batch) {
                rel[nr - 1].n_lease_ids++;
                continue;
            }
            strata__v1__release_request__init(&rel[nr]);
            rel[nr].namespace_id = j->c->ns;
            rel[nr].lease_ids = &j->lease[k];
            rel[nr].n_lease_ids = 1;
            items[nr].ch = j->c->nodes[j->node[k]].ch;
            items[nr].req = &rel[nr].base;
            nr++;
        }
        /* A lease that cannot be released ends by time: nothing to do on error. */
        (void)sc_fanout(j->c, &srpc_cache_methods[SRPC_CACHE_RELEASE], ST_TCALL_RELEASE, items, nr,
                        (int)j->c->timeout_ms);
        srpc_fanout_free(items, nr);
    }
    free(rel);
    free(items);
    free(j);
}

/* Releases node's leases ids[0..n) with one message over the transport
 * whose answer nobody waits for. Returns 1 when it was sent (0: the node
 * takes no calls over the transport, or the batch is over max_batch). */
static int sc_dp_release_now(st_client_t *c, uint32_t node, uint64_t *ids, size_t n)
{
    Strata__V1__ReleaseRequest rel = STRATA__V1__RELEASE_REQUEST__INIT;
    srpc_fanout_item_t item = {0};

    if (!c->tcalls || n > c->max_batch || !c->dp->node[node].tcalls) {
        return 0;
    }
    rel.namespace_id = c->ns;
    rel.lease_ids = ids;
    rel.n_lease_ids = n;
    item.req = &rel.base;
    return sc_tc_send(c, node, ST_TCALL_RELEASE, &item, NULL);
}

/* Whether op fits an object of len bytes: ST_OK or ST_ERR_INVALID. */
static st_status_t sc_dp_get_fits(const st_get_op_t *op, uint64_t len)
{
    if (op->n_rows == 0) {
        return len > op->dst_len ? ST_ERR_INVALID : ST_OK;
    }
    if ((size_t)op->n_rows * op->row_bytes > op->dst_len) {
        return ST_ERR_INVALID;
    }
    for (uint32_t x = 0; x < op->n_rows; x++) {
        if (((uint64_t)op->rows[x] + 1) * op->row_bytes > len) {
            return ST_ERR_INVALID;
        }
    }
    return ST_OK;
}

/* Posts op's gets (the object, or its rows) from reg at off. Node lock held. */
static void sc_dp_post_get(sc_dp_t *dp, sc_dp_node_t *nd, st_get_op_t *op, sc_dp_op_t *o,
                           const sc_dp_region_t *reg, uint64_t off, uint64_t len)
{
    size_t nx = op->n_rows ? op->n_rows : 1, xlen = op->n_rows ? op->row_bytes : len;
    st_transport_mem_t *mem;

    pthread_mutex_lock(&dp->lock);
    mem =
        sc_dp_local(dp, o, op->dst, op->n_rows ? (size_t)op->n_rows * op->row_bytes : (size_t)len);
    for (size_t x = 0; mem != NULL && x < nx; x++) {
        uint64_t src = reg->base + off + (op->n_rows ? (uint64_t)op->rows[x] * op->row_bytes : 0);
        st_status_t st;

        atomic_fetch_add(o->pending, 1);
        st = st_transport_get(nd->ep, (uint8_t *)op->dst + x * xlen, xlen, mem, src, reg->rkey,
                              sc_dp_done, o);
        if (st != ST_OK) {
            atomic_fetch_sub(o->pending, 1);
            o->failed = 1;
            break;
        }
    }
    pthread_mutex_unlock(&dp->lock);
    o->posted = mem != NULL;
    op->length = op->n_rows ? (size_t)op->n_rows * op->row_bytes : (size_t)len;
}

/*
 * Posts the rows of op from the object at off in reg: one get per run of
 * consecutive row indices (a run is contiguous at both ends, as its rows
 * land one after another in dst). Node lock held.
 */
static void sc_dp_post_rows(sc_dp_t *dp, sc_dp_node_t *nd, st_get_op_t *op, sc_dp_op_t *o,
                            const sc_dp_region_t *reg, uint64_t off)
{
    size_t rb = op->row_bytes;
    st_transport_mem_t *mem;
    /* Where the transport copies at once (shared memory), each run is
     * checked against its row sums as soon as it is in dst, still in cache. */
    int now = o->has_rsum && !dp->rows_unverified;

    pthread_mutex_lock(&dp->lock);
    mem = sc_dp_local(dp, o, op->dst, (size_t)op->n_rows * rb);
    for (uint32_t x = 0, y; mem != NULL && x < op->n_rows; x = y) {
        uint8_t *dst;
        st_status_t st = ST_ERR_UNSUPPORTED;

        for (y = x + 1; y < op->n_rows && op->rows[y] == op->rows[y - 1] + 1; y++) {
        }
        dst = (uint8_t *)op->dst + (size_t)x * rb;
        if (now) {
            st = st_transport_get_now(nd->ep, dst, (size_t)(y - x) * rb, mem,
                                      reg->base + off + (uint64_t)op->rows[x] * rb, reg->rkey);
        }
        if (st == ST_OK) {
            for (uint32_t r = x; r < y && !o->now_bad; r++, dst += rb) {
                o->now_bad = pr_rowsum(dst, rb) != o->rsum[r];
                o->now_row = op->rows[r];
            }
            continue;
        }
        now = 0; /* the rest posted; all rows are checked when they have landed */
        atomic_fetch_add(o->pending, 1);
        st = st_transport_get(nd->ep, dst, (size_t)(y - x) * rb, mem,
                              reg->base + off + (uint64_t)op->rows[x] * rb, reg->rkey, sc_dp_done,
                              o);
        if (st != ST_OK) {
            atomic_fetch_sub(o->pending, 1);
            o->failed = 1;
            break;
        }
    }
    pthread_mutex_unlock(&dp->lock);
    o->posted = mem != NULL;
    o->now_checked = (uint8_t)(now && mem != NULL && !o->failed);
    op->length = (size_t)op->n_rows * rb;
}

/* A located whole object waiting to be posted with the others of its batch. */
struct sc_dp_post {
    size_t i; /* op index */
    uint64_t raddr, len;
    st_transport_rkey_t *rkey;
    st_transport_mem_t *mem; /* the local registration; NULL: the op failed */
    st_status_t st;          /* the direct copy's; ST_ERR_UNSUPPORTED: post a get */
};

/* Bytes of whole-object gets posted under one hold of dp->lock: one hold
 * per get would hand the lock back and forth between batches that post at
 * once (each hand-off a futex wake-up), a hold per batch would stall them. */
#define SC_DP_POST_BYTES (1u << 20)

/* Copies p[lo, hi) where the region is mapped here (any thread: a direct
 * copy touches neither the transport's worker nor dp->lock). Returns the
 * bytes copied. */
/*
 * A node whose committed extents are not read-only has every object hashed
 * (o->check). Hashing after the batch reads every byte back from memory (the
 * copy streams it out with non-temporal stores); instead, the copy is cut
 * into pieces below STT_STREAM_MIN (plain stores: the piece stays in L1) and
 * each piece is hashed right after it landed, in the copying thread. What is
 * hashed is the destination: the bytes accepted, not the source.
 */
#define SC_DP_FUSE_PIECE 4032u

/* STRATA_DP_FUSE=0 turns sc_dp_copy_hashed() off (for measurements). */
static int sc_dp_fuse_off(void)
{
    static _Atomic int off = -1;
    int v = atomic_load_explicit(&off, memory_order_relaxed);

    if (v < 0) {
        const char *e = getenv("STRATA_DP_FUSE");

        v = e != NULL && strcmp(e, "0") == 0;
        atomic_store_explicit(&off, v, memory_order_relaxed);
    }
    return v;
}

static st_status_t sc_dp_copy_hashed(sc_dp_node_t *nd, st_get_op_t *op, sc_dp_op_t *o,
                                     const sc_dp_post_t *q)
{
    XXH3_state_t xs;
    size_t len = (size_t)q->len;

    if (XXH3_64bits_reset(&xs) != XXH_OK) {
        return ST_ERR_UNSUPPORTED;
    }
    for (size_t off = 0; off < len; off += SC_DP_FUSE_PIECE) {
        size_t n = len - off < SC_DP_FUSE_PIECE ? len - off : SC_DP_FUSE_PIECE;
        st_status_t st = st_transport_get_now(nd->ep, (uint8_t *)op->dst + off, n, q->mem,
                                              q->raddr + off, q->rkey);

        if (st != ST_OK) {
            return st; /* ST_ERR_UNSUPPORTED (not mapped here): the first piece, post a get */
        }
        (void)XXH3_64bits_update(&xs, (const uint8_t *)op->dst + off, n);
    }
    o->prechecked = XXH3_64bits_digest(&xs) == o->checksum ? 2 : 1;
    return ST_OK;
}

static uint64_t sc_dp_copy_range(sc_dp_node_t *nd, st_handle_t *h, sc_dp_op_t *ops, sc_dp_post_t *p,
                                 size_t lo, size_t hi)
{
    uint64_t copied = 0;

    for (size_t k = lo; k < hi; k++) {
        st_get_op_t *op = &h->gets[p[k].i];

        if (p[k].mem == NULL) {
            continue;
        }
        if (!nd->committed_ro && op->n_rows == 0 && p[k].len > SC_DP_FUSE_PIECE &&
            !sc_dp_fuse_off()) {
            p[k].st = sc_dp_copy_hashed(nd, op, &ops[p[k].i], &p[k]);
        } else {
            p[k].st = st_transport_get_now(nd->ep, op->dst, (size_t)p[k].len, p[k].mem, p[k].raddr,
                                           p[k].rkey);
        }
        if (p[k].st == ST_OK) {
            copied += p[k].len;
        } else if (p[k].st != ST_ERR_UNSUPPORTED) {
            atomic_store(&ops[p[k].i].failed, 1);
        }
    }
    return copied;
}

static void *sc_dp_copier_main(void *arg)
{
    struct sc_dp_copier *me = arg;
    sc_dp_t *dp = me->dp;
    uint64_t seen = 0;

    for (;;) {
        uint64_t until = sc_now_ns() + SC_DP_CP_SPIN_NS, g;

        while ((g = atomic_load_explicit(&dp->cp_gen, memory_order_acquire)) == seen) {
            if (sc_now_ns() < until) {
                sched_yield();
                continue;
            }
            int stop;

            pthread_mutex_lock(&dp->cp_lock);
            while (!dp->cp_stop && atomic_load(&dp->cp_gen) == seen) {
                pthread_cond_wait(&dp->cp_work, &dp->cp_lock);
            }
            stop = dp->cp_stop;
            pthread_mutex_unlock(&dp->cp_lock);
            if (stop) {
                return NULL;
            }
        }
        seen = g;
        {
            sc_dp_share_t *sh = &dp->cp_share[me->idx];

            atomic_fetch_add_explicit(
                &dp->cp_bytes, sc_dp_copy_range(sh->nd, sh->h, sh->ops, sh->p, sh->lo, sh->hi),
                memory_order_relaxed);
            atomic_fetch_sub_explicit(&dp->cp_left, 1, memory_order_release);
        }
    }
}

/*
 * The direct copies of p[0, np), bytes in all: cut into equal shares of
 * bytes, one for this thread and one per copy thread, when the copy threads
 * are free and the list is large enough; else all on this thread. Returns
 * when every share is done.
 */
static void sc_dp_copy_shared(sc_dp_t *dp, sc_dp_node_t *nd, st_handle_t *h, sc_dp_op_t *ops,
                              sc_dp_post_t *p, size_t np, uint64_t bytes)
{
    size_t k = 0, mine;
    uint64_t acc = 0, per;
    int n = dp->n_cp;

    if (n == 0 || bytes < SC_DP_SHARE_MIN || pthread_mutex_trylock(&dp->cp_use) != 0) {
        (void)sc_dp_copy_range(nd, h, ops, p, 0, np);
        return;
    }
    per = bytes / (uint64_t)(n + 1);
    /* This thread's share first, then one per copy thread (the last takes the rest). */
    while (k < np && acc < per) {
        acc += p[k].mem != NULL ? p[k].len : 0;
        k++;
    }
    mine = k;
    for (int t = 0; t < n; t++) {
        sc_dp_share_t *sh = &dp->cp_share[t];
        uint64_t target = per * (uint64_t)(t + 2);

        sh->nd = nd, sh->h = h, sh->ops = ops, sh->p = p;
        sh->lo = k;
        while (k < np && (t == n - 1 || acc < target)) {
            acc += p[k].mem != NULL ? p[k].len : 0;
            k++;
        }
        sh->hi = k;
    }
    atomic_store_explicit(&dp->cp_left, n, memory_order_relaxed);
    pthread_mutex_lock(&dp->cp_lock);
    atomic_fetch_add_explicit(&dp->cp_gen, 1, memory_order_release);
    pthread_cond_broadcast(&dp->cp_work);
    pthread_mutex_unlock(&dp->cp_lock);
    (void)sc_dp_copy_range(nd, h, ops, p, 0, mine);
    while (atomic_load_explicit(&dp->cp_left, memory_order_acquire) > 0) {
        sched_yield();
    }
    pthread_mutex_unlock(&dp->cp_use);
}

/*
 * The gets of whole objects p[0, np) on one node (node lock held): local
 * registrations under dp->lock, then the direct copies (shared with the copy
 * threads), then gets posted for what the transport cannot copy directly.
 */
static void sc_dp_post_objects(sc_dp_t *dp, sc_dp_node_t *nd, st_handle_t *h, sc_dp_op_t *ops,
                               sc_dp_post_t *p, size_t np)
{
    uint64_t direct = 0;

    for (size_t k = 0; k < np;) {
        uint64_t bytes = 0;

        pthread_mutex_lock(&dp->lock);
        for (; k < np && bytes < SC_DP_POST_BYTES; k++) {
            st_get_op_t *op = &h->gets[p[k].i];
            sc_dp_op_t *o = &ops[p[k].i];

            p[k].mem = sc_dp_local(dp, o, op->dst, (size_t)p[k].len);
            p[k].st = ST_ERR_UNSUPPORTED;
            op->length = (size_t)p[k].len;
            o->posted = p[k].mem != NULL;
            bytes += p[k].len;
        }
        pthread_mutex_unlock(&dp->lock);
        direct += bytes;
    }
    sc_dp_copy_shared(dp, nd, h, ops, p, np, direct);
    for (size_t k = 0; k < np;) {
        uint64_t bytes = 0;

        pthread_mutex_lock(&dp->lock);
        for (; k < np && bytes < SC_DP_POST_BYTES; k++) {
            sc_dp_op_t *o = &ops[p[k].i];
            st_status_t st;

            if (p[k].mem == NULL || p[k].st != ST_ERR_UNSUPPORTED) {
                continue; /* failed, or copied */
            }
            bytes += p[k].len;
            atomic_fetch_add(o->pending, 1);
            st = st_transport_get(nd->ep, h->gets[p[k].i].dst, (size_t)p[k].len, p[k].mem,
                                  p[k].raddr, p[k].rkey, sc_dp_done, o);
            if (st != ST_OK) {
                atomic_fetch_sub(o->pending, 1);
                o->failed = 1;
            }
        }
        pthread_mutex_unlock(&dp->lock);
    }
}

/* Whether every row of op that landed in dst matches its row sum (o->rsum,
 * as the daemon computed it at commit), checked at the post (now_checked)
 * or here. A mismatch is counted and logged (rate-limited); the caller
 * makes the op a miss. */
static int sc_dp_rows_ok(sc_dp_t *dp, const st_get_op_t *op, const sc_dp_op_t *o)
{
    const uint8_t *dst = op->dst;
    uint32_t bad = UINT32_MAX;

    if (dp->rows_unverified) {
        return 1; /* benches only: the rows as they landed, under the lease */
    }
    if (!o->has_rsum) {
        return 0;
    }
    if (o->now_checked) {
        bad = o->now_bad ? o->now_row : bad;
    }
    for (uint32_t x = 0; !o->now_checked && bad == UINT32_MAX && x < op->n_rows; x++) {
        if (pr_rowsum(dst + (size_t)x * op->row_bytes, op->row_bytes) != o->rsum[x]) {
            bad = op->rows[x];
        }
    }
    if (bad != UINT32_MAX) {
        atomic_fetch_add(&dp->rows_refused, 1);
        st_warn_ratelimited("get: a row read does not match its row sum (changed after its "
                            "commit, or its extent reused): a miss row=%u row_bytes=%u",
                            bad, op->row_bytes);
        return 0;
    }
    return 1;
}

/* Posts a row read from its lease-cache entry; 0 when the entry is stale. */
static int sc_dp_post_cached(st_client_t *c, st_get_op_t *op, sc_dp_op_t *o, const sc_lc_ent_t *e)
{
    sc_dp_t *dp = c->dp;
    sc_dp_node_t *nd = &dp->node[e->node];
    int ok;

    pthread_mutex_lock(&nd->lock);
    ok = nd->gen == e->gen && nd->epoch == e->epoch && nd->ep != NULL && e->region_id < nd->cap &&
         nd->reg[e->region_id].rkey != NULL && e->offset + e->length <= nd->reg[e->region_id].len;
    if (ok) {
        op->status = sc_dp_get_fits(op, e->length);
        if (op->n_rows == 0 && op->status != ST_OK) {
            op->length = (size_t)e->length; /* dst too small: the size it needs */
        } else if (op->n_rows == 0) {
            /* A whole object (cache_locations = all): vouched for as located ones are. */
            o->bound_ns = e->expiry_ns;
            sc_dp_post_get(dp, nd, op, o, &nd->reg[e->region_id], e->offset, e->length);
        } else if (op->status == ST_OK) {
            o->expiry_ns = e->expiry_ns;
            sc_dp_post_rows(dp, nd, op, o, &nd->reg[e->region_id], e->offset);
        }
    }
    pthread_mutex_unlock(&nd->lock);
    return ok;
}

/* Entry j of a Locate answer of n entries carries the row sums of a row
 * read op of an object of len bytes: their sums into rsum (as
 * sc_rows_sums). */
static int sc_dp_located_sums(const Strata__V1__Locations *l, size_t j, size_t n,
                              const st_get_op_t *op, uint64_t len, uint64_t *rsum)
{
    uint64_t groups = pr_rowsum_groups(len, op->row_bytes, PR_ROW_GROUP);

    if (l->n_row_group != n || l->n_row_sums != n || l->n_row_bytes != n ||
        l->row_group[j] != PR_ROW_GROUP || l->row_bytes[j] != op->row_bytes ||
        l->row_sums[j].len != groups * 8) {
        return 0;
    }
    return sc_rows_sums(op, l->row_bytes[j], l->row_sums[j].data, groups, rsum);
}

int sc_dp_get_now(st_handle_t *h)
{
    st_client_t *c = h->client;
    sc_dp_t *dp = c->dp;
    size_t n = h->n, i;
    sc_dp_op_t *ops;
    sc_lc_ent_t *ce;
    uint64_t *rsum;
    _Atomic size_t pending = 0;
    uint64_t now = sc_now_ns();
    int ok = 1;

    if (dp == NULL || n == 0 || n > SC_DP_NOW_MAX) {
        return 0;
    }
    for (i = 0; i < n; i++) {
        if (h->gets[i].n_rows == 0) {
            return 0; /* whole objects: Locate and checksums, on a worker */
        }
    }
    ops = calloc(n, sizeof(*ops));
    ce = calloc(n, sizeof(*ce));
    rsum = ops != NULL ? sc_dp_rsum_room(h->gets, ops, n) : NULL;
    if (ops == NULL || ce == NULL || rsum == NULL) {
        free(ops), free(ce), free(rsum);
        return 0;
    }
    for (i = 0; ok && i < n; i++) {
        const st_get_op_t *op = &h->gets[i];
        int owner = sc_dp_owner(c, h->chain, op->block);

        ok = owner >= 0 && sc_lc_find(dp, (uint32_t)owner, &h->chain[op->block], op->kind,
                                      op->layer, now, &ce[i], op, &ops[i]);
    }
    for (i = 0; ok && i < n; i++) {
        ops[i].pending = &pending;
        ok = sc_dp_post_cached(c, &h->gets[i], &ops[i], &ce[i]) && h->gets[i].status == ST_OK;
    }
    sc_dp_wait(dp, &pending); /* what was posted, whatever happens next */
    now = sc_now_ns() - (uint64_t)dp->row_slow_ns;
    for (i = 0; ok && i < n; i++) {
        ok = ops[i].posted && !ops[i].failed && now < ops[i].expiry_ns;
    }
    for (i = 0; ok && i < n; i++) {
        if (!sc_dp_rows_ok(dp, &h->gets[i], &ops[i])) {
            ok = 0; /* the worker locates it again, and reads it inline if it fails again */
            sc_lc_drop(dp, &h->chain[h->gets[i].block], h->gets[i].kind, h->gets[i].layer);
        }
    }
    sc_dp_free_tmp(dp, ops, n);
    for (i = 0; i < n; i++) {
        st_get_op_t *op = &h->gets[i];

        if (ok) {
            op->status = ST_OK;
            continue;
        }
        /* Undecided: a worker does the batch again, with a Locate for the
         * object whose entry failed. */
        if (ops[i].pending != NULL && (!ops[i].posted || ops[i].failed)) {
            sc_lc_drop(dp, &h->chain[op->block], op->kind, op->layer);
        }
        op->status = ST_ERR_UNAVAILABLE;
        op->length = 0;
    }
    free(ops), free(ce), free(rsum);
    return ok;
}

void sc_dp_get(st_handle_t *h, uint8_t *todo)
{
    st_client_t *c = h->client;
    sc_dp_t *dp = c->dp;
    size_t n = h->n, nb, n_cached = 0;
    int *owner = calloc(n + 1, sizeof(*owner));
    uint64_t *rsum = NULL;
    size_t *perm = calloc(n + 1, sizeof(*perm));
    uint32_t *bnode = calloc(n + 1, sizeof(*bnode));
    size_t *bfirst = calloc(n + 1, sizeof(*bfirst)), *bcount = calloc(n + 1, sizeof(*bcount));
    uint32_t *bwave = calloc(n + 1, sizeof(*bwave));
    sc_dp_op_t *ops = calloc(n + 1, sizeof(*ops));
    sc_lc_ent_t *ce = calloc(n + 1, sizeof(*ce));
    sc_dp_loc_t *loc = NULL;
    sc_dp_post_t *plist = NULL;
    const st_hash_t *seg = NULL;
    size_t nw = 0, np = 0;
    int nomem = 0, seg_owner = -1;
    Strata__V1__LocateRequest *reqs = NULL;
    Strata__V1__ObjectKey *keys = NULL, **kp = NULL;
    srpc_fanout_item_t *items = NULL;
    uint64_t *lease_ids = NULL, now = sc_now_ns(), t_sent = 0;
    uint8_t *verified = NULL, *keep = NULL;
    _Atomic size_t pending = 0;
    int located = 0, fan_on = 0, fan_ok = 0;
    sc_fan_t fan;

    if (!owner || !perm || !bnode || !bfirst || !bcount || !bwave || !ops || !ce) {
        goto out; /* everything stays todo: the inline path answers */
    }
    rsum = sc_dp_rsum_room(h->gets, ops, n); /* NULL: rows unverifiable, read inline */
    for (size_t i = 0; i < n; i++) {
        st_get_op_t *op = &h->gets[i];
        const st_hash_t *first = sc_segment_first(c, h->chain, op->block);

        /* The ring is asked once per run of ops in one segment. */
        if (first != seg) {
            seg = first;
            seg_owner = sc_dp_owner(c, h->chain, op->block);
        }
        owner[i] = seg_owner;
        ops[i].pending = &pending;
        if (owner[i] >= 0 && (op->n_rows > 0 || c->cache_all) &&
            sc_lc_find(dp, (uint32_t)owner[i], &h->chain[op->block], op->kind, op->layer,
                       op->n_rows > 0 ? now + SC_LC_REFRESH : now, &ce[i], op, &ops[i])) {
            ops[i].cached = 1; /* no Locate: straight to the gets below */
            ops[i].node = (uint32_t)owner[i];
            owner[i] = -1;
            n_cached++;
            todo[i] = 0;
            continue;
        }
        todo[i] = owner[i] < 0;
    }
    nb = sc_dp_waves(c, h, owner, n, perm, bnode, bfirst, bcount, bwave, &nomem);
    if (nb == 0 && n_cached == 0 && !nomem) {
        goto out;
    }
    nw = nb > 0 ? (size_t)bwave[nb - 1] + 1 : 0;
    loc = calloc(nw + 1, sizeof(*loc));
    plist = calloc(n + 1, sizeof(*plist));
    reqs = calloc(nb + 1, sizeof(*reqs));
    items = calloc(nb + 1, sizeof(*items));
    keys = calloc(n + 1, sizeof(*keys));
    kp = calloc(n + 1, sizeof(*kp));
    lease_ids = calloc(nb + 1, sizeof(*lease_ids));
    keep = calloc(nb + 1, 1);
    if (nomem || !loc || !plist || !reqs || !items || !keys || !kp || !lease_ids || !keep) {
        for (size_t i = 0; i < n; i++) {
            todo[i] = 1;
            ops[i].cached = 0;
        }
        goto out;
    }
    for (size_t b = 0; b < nb; b++) {
        strata__v1__locate_request__init(&reqs[b]);
        reqs[b].namespace_id = c->ns;
        reqs[b].keys = &kp[bfirst[b]];
        reqs[b].n_keys = bcount[b];
        reqs[b].lease = 1;
        for (size_t j = bfirst[b]; j < bfirst[b] + bcount[b]; j++) {
            st_get_op_t *op = &h->gets[perm[j]];

            /* Rows verify by them. */
            reqs[b].want_row_sums |= op->n_rows > 0 && !dp->rows_unverified;
            strata__v1__object_key__init(&keys[j]);
            keys[j].block_hash.data = (uint8_t *)h->chain[op->block].b;
            keys[j].block_hash.len = ST_HASH_BYTES;
            keys[j].kind = sc_kind(op->kind);
            keys[j].layer = op->kind == ST_KIND_KDA ? 0 : op->layer;
            kp[j] = &keys[j];
        }
        items[b].ch = c->nodes[bnode[b]].ch;
        items[b].req = &reqs[b].base;
    }
    /* The waves' Locates run on the locator threads, in order; the gets of a
     * wave are posted as soon as its answers are in, while the next waves
     * are being located. */
    for (size_t b = 0; b < nb; b++) {
        sc_dp_loc_t *w = &loc[bwave[b]];

        if (w->items == NULL) {
            w->items = &items[b];
            w->timeout_ms = (int)c->timeout_ms;
            w->c = c;
        }
        w->n++;
        for (size_t j = bfirst[b]; j < bfirst[b] + bcount[b]; j++) {
            w->bytes += sc_dp_get_bytes(&h->gets[perm[j]]);
        }
    }
    /* The first waves (up to SC_DP_INLINE_BYTES per node) in one fan-out on
     * this thread (nothing to post before their answers), the rest on the
     * locators, started first. */
    if (nw > 0) {
        sc_dp_loc_t first = {.items = loc[0].items, .timeout_ms = (int)c->timeout_ms, .c = c};
        uint64_t lim = (uint64_t)SC_DP_INLINE_BYTES * loc[0].n, sum = 0;
        size_t m = 0;

        while (m < nw && (m == 0 || sum + loc[m].bytes <= lim)) {
            sum += loc[m].bytes;
            first.n += loc[m++].n;
        }
        sc_dp_loc_submit(dp, loc + m, nw - m);
        if (c->tcalls && sc_fan_start(&fan, c, &srpc_cache_methods[SRPC_CACHE_LOCATE],
                                      ST_TCALL_LOCATE, first.items, first.n, first.timeout_ms)) {
            /* Each wave's Locate is its own message: the first answers (a few
             * objects) come while the daemon still serves the later ones, and
             * their gets run meanwhile. */
            fan_on = 1;
            /* Nodes without calls over the transport: over gRPC, now. */
            fan_ok = sc_fan_grpc(&fan) == ST_OK;
        } else {
            sc_dp_loc_run(&first);
        }
        for (size_t w = 0; w < m; w++) {
            if (fan_on) {
                loc[w].fan = &fan;
                loc[w].lo = (size_t)(loc[w].items - first.items);
                loc[w].hi = loc[w].lo + loc[w].n;
                loc[w].t_sent = fan.start;
                loc[w].ok = fan_ok;
                continue;
            }
            loc[w].t_sent = first.t_sent;
            loc[w].ok = first.ok;
            atomic_store_explicit(&loc[w].done, 1, memory_order_release);
        }
    }
    for (size_t b = 0; b < nb; b++) {
        const Strata__V1__LocateResponse *r;
        const Strata__V1__Locations *l;
        sc_dp_node_t *nd = &dp->node[bnode[b]];
        int refreshed = 0;

        if (b == 0 || bwave[b] != bwave[b - 1]) {
            sc_dp_loc_wait(dp, &loc[bwave[b]], &pending);
            t_sent = loc[bwave[b]].t_sent;
            located = loc[bwave[b]].ok;
        }
        if (!located) {
            for (size_t j = 0; j < bcount[b]; j++) {
                todo[perm[bfirst[b] + j]] = 1;
            }
            continue;
        }
        r = (const void *)items[b].resp;
        l = r != NULL ? r->locations : NULL;
        if (items[b].status != ST_OK || l == NULL || l->n_state != bcount[b] ||
            l->n_region_id != bcount[b] || l->n_offset != bcount[b] || l->n_length != bcount[b] ||
            l->n_checksum != bcount[b]) {
            sc_node_failed(c, bnode[b], items[b].status, &items[b].err);
            continue; /* those ops stay ST_ERR_UNAVAILABLE */
        }
        lease_ids[b] = r->lease_id;
        pthread_mutex_lock(&nd->lock);
        for (size_t j = 0; j < bcount[b]; j++) {
            size_t i = perm[bfirst[b] + j];
            st_get_op_t *op = &h->gets[i];
            sc_dp_op_t *o = &ops[i];
            sc_dp_region_t *reg;
            uint64_t len = l->length[j], off = l->offset[j];

            op->status = ST_ERR_NOT_FOUND;
            if (l->state[j] != STRATA__V1__OBJECT_STATE__OBJECT_PRESENT) {
                todo[i] = op->kind == ST_KIND_KDA; /* the next replica may have it */
                continue;
            }
            if (sc_dp_get_fits(op, len) != ST_OK) {
                op->status = ST_ERR_INVALID;
                op->length = op->n_rows ? 0 : len;
                continue;
            }
            if (op->n_rows != 0 && !dp->rows_unverified &&
                !(o->has_rsum = (uint8_t)sc_dp_located_sums(l, j, bcount[b], op, len, o->rsum))) {
                todo[i] = 1; /* no row sums to verify the rows by: inline, whole, checked */
                continue;
            }
            if (np > 0 && !refreshed &&
                (l->region_id[j] >= nd->cap || nd->reg[l->region_id[j]].rkey == NULL ||
                 r->region_epoch != nd->epoch)) {
                /* A refresh may replace the keys the list holds: post it first. */
                sc_dp_post_objects(dp, nd, h, ops, plist, np);
                np = 0;
            }
            reg = sc_dp_region(c, bnode[b], l->region_id[j], r->region_epoch, &refreshed);
            if (reg == NULL || off + len > reg->len) {
                continue; /* a region we cannot reach: a miss */
            }
            o->node = bnode[b];
            o->checksum = l->checksum[j];
            o->lease = b;
            if (op->n_rows == 0 && r->lease_id != 0) {
                /* A whole object landed under the lease is the committed one. */
                o->bound_ns = t_sent + (uint64_t)r->lease_ms * 900000ull;
            }
            if ((op->n_rows != 0 || c->cache_all) && r->lease_id != 0) {
                /* Rows (and with cache_locations = all, whole objects) keep the
                 * lease: valid until 90% of it by our clock. */
                sc_lc_ent_t e = {.hash = h->chain[op->block],
                                 .gen = nd->gen,
                                 .epoch = r->region_epoch,
                                 .offset = off,
                                 .length = len,
                                 .expiry_ns = t_sent + (uint64_t)r->lease_ms * 900000ull,
                                 .node = bnode[b],
                                 .region_id = l->region_id[j],
                                 .layer = op->layer,
                                 .kind = op->kind};

                if (op->n_rows != 0 && l->n_row_sums == bcount[b]) {
                    e.row_bytes = op->row_bytes;
                    e.n_sums = l->row_sums[j].len / 8;
                    e.sums = malloc(l->row_sums[j].len); /* NULL: later reads locate */
                    if (e.sums != NULL) {
                        memcpy(e.sums, l->row_sums[j].data, l->row_sums[j].len);
                    }
                }
                o->expiry_ns = e.expiry_ns;
                keep[b] = 1;
                sc_lc_put(dp, &e);
            }
            if (op->n_rows == 0) {
                plist[np++] = (sc_dp_post_t){i, reg->base + off, len, reg->rkey, NULL, ST_OK};
                continue;
            }
            sc_dp_post_get(dp, nd, op, o, reg, off, len);
        }
        sc_dp_post_objects(dp, nd, h, ops, plist, np);
        np = 0;
        pthread_mutex_unlock(&nd->lock);
    }
    for (size_t i = 0; i < n; i++) {
        if (ops[i].cached && !sc_dp_post_cached(c, &h->gets[i], &ops[i], &ce[i])) {
            ops[i].cached = 0; /* stale: the inline path answers */
            todo[i] = 1;
            sc_lc_drop(dp, &h->chain[h->gets[i].block], h->gets[i].kind, h->gets[i].layer);
        }
    }
    sc_dp_wait(dp, &pending);
    /* Every transfer has completed by now: whatever landed before now. */
    now = sc_now_ns();

    /* Release the leases that no row read keeps, in the background: the
     * batch does not wait for it (its gets have landed; rows keep theirs). */
    {
        size_t nr = 0;

        for (size_t b = 0; b < nb; b++) {
            nr += lease_ids[b] != 0 && !keep[b];
        }
        if (nr > 0) {
            sc_dp_release_job_t *j =
                calloc(1, sizeof(*j) + nr * (sizeof(uint64_t) + sizeof(uint32_t)));

            if (j != NULL) {
                j->c = c;
                j->lease = (uint64_t *)(j + 1);
                j->node = (uint32_t *)(j->lease + nr);
                for (uint32_t x = 0; x < c->n_nodes && j->n < nr; x++) {
                    size_t first = j->n;

                    for (size_t b = 0; b < nb; b++) {
                        if (bnode[b] == x && lease_ids[b] != 0 && !keep[b]) {
                            j->lease[j->n] = lease_ids[b];
                            j->node[j->n++] = x;
                        }
                    }
                    /* Over the transport it is one message, sent from here and
                     * not waited for; the other nodes' go to a worker. */
                    if (j->n > first && sc_dp_release_now(c, x, j->lease + first, j->n - first)) {
                        j->n = first;
                    }
                }
                if (j->n > 0) {
                    j->job.run = sc_dp_release_run;
                    sc_pool_submit(c, &j->job);
                } else {
                    free(j);
                }
            } /* else the leases end by time */
        }
    }
    /* Whole objects that may have landed after their lease (or had none) are
     * checked by their checksum; with verify_reads = always, all are. */
    for (size_t i = 0; i < n; i++) {
        sc_dp_op_t *o = &ops[i];

        /* A node whose transport does not keep committed bytes read-only
         * (Hello's committed_read_only) has every object checked. */
        o->check = c->verify_always || o->bound_ns == 0 || !dp->node[o->node].committed_ro ||
                   (int64_t)(now - o->bound_ns) + dp->lease_skew_ns >= 0;
    }
    verified = calloc(n + 1, 1);
    if (verified != NULL) {
        sc_dp_verify_all(h, ops, n, verified);
    }
    for (size_t i = 0; i < n; i++) {
        st_get_op_t *op = &h->gets[i];
        sc_dp_op_t *o = &ops[i];

        if (!o->posted) {
            if (op->status == ST_ERR_NOT_FOUND) {
                op->length = 0;
            }
            continue;
        }
        if (o->failed || verified == NULL) {
            op->status = ST_ERR_NOT_FOUND;
        } else if (op->n_rows == 0) {
            op->status = verified[i] ? ST_OK : ST_ERR_NOT_FOUND;
            if (op->status != ST_OK) {
                st_warn_ratelimited("get: one-sided read does not match its checksum (the "
                                    "extent was reused after its lease): a miss bytes=%zu",
                                    op->length);
            }
        } else {
            /* Rows count when each matches its row sum, computed by the daemon
             * at commit: also rows that landed after the lease's bound. */
            op->status = sc_dp_rows_ok(dp, op, o) ? ST_OK : ST_ERR_NOT_FOUND;
        }
        if (op->status != ST_OK) {
            op->length = 0;
            /* KDA may be on the next replica; rows under a cached lease that
             * ran out or failed are read again inline. */
            todo[i] = op->kind == ST_KIND_KDA || o->cached || o->expiry_ns != 0;
            if (o->expiry_ns != 0) {
                sc_lc_drop(dp, &h->chain[op->block], op->kind, op->layer);
            }
        }
    }
out:
    if (fan_on) {
        sc_fan_end(&fan); /* every wave was waited for; frees */
    }
    if (items != NULL) {
        srpc_fanout_free(items, nb);
    }
    if (ops != NULL) {
        sc_dp_free_tmp(dp, ops, n);
    }
    free(owner), free(perm), free(bnode), free(bfirst), free(bcount), free(ops), free(ce);
    free(reqs), free(items), free(keys), free(kp), free(lease_ids);
    free(verified), free(keep), free(bwave), free(loc), free(plist), free(rsum);
}

void sc_dp_put(st_handle_t *h, uint8_t *todo, uint8_t *acked)
{
    st_client_t *c = h->client;
    sc_dp_t *dp = c->dp;
    size_t n = h->n, nb = 0;
    int *owner = calloc(n + 1, sizeof(*owner));
    size_t *perm = calloc(n + 1, sizeof(*perm));
    uint32_t *bnode = calloc(n + 1, sizeof(*bnode));
    size_t *bfirst = calloc(n + 1, sizeof(*bfirst)), *bcount = calloc(n + 1, sizeof(*bcount));
    sc_dp_op_t *ops = calloc(n + 1, sizeof(*ops));
    Strata__V1__ReserveRequest *reqs = NULL;
    Strata__V1__CommitRequest *com = NULL;
    Strata__V1__ObjectKey *keys = NULL, **kp = NULL;
    Strata__V1__BlockLink *links = NULL, **lp = NULL;
    uint64_t *lengths = NULL, *sums = NULL;
    uint32_t *rowb = NULL;
    srpc_fanout_item_t *items = NULL, *citems = NULL;
    size_t *cwhich = NULL;
    _Atomic size_t pending = 0;

    if (!owner || !perm || !bnode || !bfirst || !bcount || !ops) {
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        /* A durable KDA object goes inline (Put): a Reserve that finds the object already
         * there answers KEY_EXISTS, which says nothing of whether it is on disk, while a
         * durable Put of the same bytes writes it through before answering. */
        int inline_only = (h->flags & ST_PUT_DURABLE) && h->puts[i].kind == ST_KIND_KDA;

        owner[i] = inline_only ? -1 : sc_dp_owner(c, h->chain, h->puts[i].block);
        todo[i] = owner[i] < 0;
        ops[i].pending = &pending;
    }
    nb = sc_dp_batches(c, owner, n, perm, bnode, bfirst, bcount);
    if (nb == 0) {
        goto out;
    }
    reqs = calloc(nb, sizeof(*reqs));
    com = calloc(nb, sizeof(*com));
    items = calloc(nb, sizeof(*items));
    citems = calloc(nb, sizeof(*citems));
    cwhich = calloc(nb, sizeof(*cwhich));
    keys = calloc(n, sizeof(*keys));
    kp = calloc(n, sizeof(*kp));
    links = calloc(n, sizeof(*links));
    lp = calloc(n, sizeof(*lp));
    lengths = calloc(n, sizeof(*lengths));
    sums = calloc(n, sizeof(*sums));
    rowb = calloc(n, sizeof(*rowb));
    if (!reqs || !com || !items || !citems || !cwhich || !keys || !kp || !links || !lp ||
        !lengths || !sums || !rowb) {
        for (size_t i = 0; i < n; i++) {
            todo[i] = 1;
        }
        nb = 0;
        goto out;
    }
    for (size_t b = 0; b < nb; b++) {
        strata__v1__reserve_request__init(&reqs[b]);
        reqs[b].namespace_id = c->ns;
        reqs[b].keys = &kp[bfirst[b]];
        reqs[b].n_keys = bcount[b];
        reqs[b].lengths = &lengths[bfirst[b]];
        reqs[b].n_lengths = bcount[b];
        reqs[b].links = &lp[bfirst[b]];
        reqs[b].row_bytes = &rowb[bfirst[b]];
        reqs[b].n_row_bytes = bcount[b];
        for (size_t j = bfirst[b]; j < bfirst[b] + bcount[b]; j++) {
            st_put_op_t *op = &h->puts[perm[j]];
            int dup = 0;

            strata__v1__object_key__init(&keys[j]);
            keys[j].block_hash.data = (uint8_t *)h->chain[op->block].b;
            keys[j].block_hash.len = ST_HASH_BYTES;
            keys[j].kind = sc_kind(op->kind);
            keys[j].layer = op->kind == ST_KIND_KDA ? 0 : op->layer;
            kp[j] = &keys[j];
            lengths[j] = op->len;
            rowb[j] = op->kind == ST_KIND_KV || op->kind == ST_KIND_IDX ? op->row_bytes : 0;
            for (size_t k = bfirst[b]; k < j && !dup; k++) {
                dup = h->puts[perm[k]].block == op->block;
            }
            if (dup) {
                continue;
            }
            strata__v1__block_link__init(&links[j]);
            links[j].hash = keys[j].block_hash;
            links[j].parent_hash.data =
                (uint8_t *)(op->block == 0 ? c->seed.b : h->chain[op->block - 1].b);
            links[j].parent_hash.len = ST_HASH_BYTES;
            links[j].block_index = op->block;
            lp[bfirst[b] + reqs[b].n_links++] = &links[j];
        }
        items[b].ch = c->nodes[bnode[b]].ch;
        items[b].req = &reqs[b].base;
    }
    if (srpc_fanout(&srpc_cache_methods[SRPC_CACHE_RESERVE], items, nb, (int)c->timeout_ms) !=
        ST_OK) {
        for (size_t i = 0; i < n; i++) {
            todo[i] = 1;
        }
        goto out;
    }
    for (size_t b = 0; b < nb; b++) {
        const Strata__V1__ReserveResponse *r = (const void *)items[b].resp;
        const Strata__V1__Locations *l = r != NULL ? r->extents : NULL;
        sc_dp_node_t *nd = &dp->node[bnode[b]];
        int refreshed = 0;

        if (items[b].status != ST_OK || l == NULL || r->n_status != bcount[b] ||
            l->n_region_id != bcount[b] || l->n_offset != bcount[b]) {
            sc_node_failed(c, bnode[b], items[b].status, &items[b].err);
            for (size_t j = 0; j < bcount[b]; j++) {
                h->puts[perm[bfirst[b] + j]].status =
                    items[b].status != ST_OK ? items[b].status : ST_ERR_PROTOCOL;
            }
            continue;
        }
        pthread_mutex_lock(&nd->lock);
        for (size_t j = 0; j < bcount[b]; j++) {
            size_t i = perm[bfirst[b] + j];
            st_put_op_t *op = &h->puts[i];
            sc_dp_op_t *o = &ops[i];
            sc_dp_region_t *reg;
            st_transport_mem_t *mem;
            st_status_t st = sc_key_status(r->status[j]);

            if (st == ST_ERR_EXISTS) {
                op->status = ST_OK; /* the block's object is there already */
                acked[i] = 1;
                continue;
            }
            if (st != ST_OK) {
                op->status = st;
                continue;
            }
            o->posted = 1; /* has a reservation: commit or refuse it */
            reg = sc_dp_region(c, bnode[b], l->region_id[j], r->region_epoch, &refreshed);
            if (reg == NULL || l->offset[j] + op->len > reg->len) {
                o->failed = 1;
                continue;
            }
            pthread_mutex_lock(&dp->lock);
            mem = sc_dp_local(dp, o, (void *)op->src, op->len);
            /* Where the node enforces keys, the region's key is read-only:
             * the extent is written through its reservation's own key. */
            st = ST_OK;
            if (r->n_write_rkeys == bcount[b] && r->write_rkeys[j].len > 0) {
                st = st_transport_rkey_unpack(nd->ep, r->write_rkeys[j].data, r->write_rkeys[j].len,
                                              &o->wkey);
                o->wkey_resets = nd->resets;
            } else if (nd->committed_ro) {
                st = ST_ERR_PROTOCOL; /* a read-only region and no write key */
            }
            atomic_fetch_add(&pending, 1);
            st = mem == NULL ? ST_ERR_NOMEM
                 : st != ST_OK
                     ? st
                     : st_transport_put(nd->ep, op->src, op->len, mem, reg->base + l->offset[j],
                                        o->wkey != NULL ? o->wkey : reg->rkey, sc_dp_done, o);
            if (st != ST_OK) {
                atomic_fetch_sub(&pending, 1);
                o->failed = 1;
            }
            pthread_mutex_unlock(&dp->lock);
            o->node = bnode[b];
        }
        pthread_mutex_unlock(&nd->lock);
    }
    if (sc_dp_wait_until(dp, &pending, c->timeout_ms) != ST_OK) {
        /* Puts that never complete: a provider that drops a write it refused
         * (libfabric shm, through a write key the daemon revoked because the
         * reservation expired) never reports them. Closing the endpoint
         * cancels them (their callbacks run: failed); the node connects again
         * at its next Hello. */
        st_warn_ratelimited("dataplane: puts still in flight after %u ms: closing the endpoints "
                            "of the batch's nodes",
                            c->timeout_ms);
        for (size_t b = 0; b < nb; b++) {
            sc_dp_node_t *nd = &dp->node[bnode[b]];

            pthread_mutex_lock(&nd->lock);
            pthread_mutex_lock(&dp->lock);
            if (nd->ep != NULL) {
                sc_dp_node_reset(nd);
                nd->tcalls = 0;
            }
            pthread_mutex_unlock(&dp->lock);
            pthread_mutex_unlock(&nd->lock);
        }
        sc_dp_wait(dp, &pending);
    }
    /* The bytes are in the daemons' memory only after a flush. */
    for (size_t b = 0; b < nb; b++) {
        sc_dp_node_t *nd = &dp->node[bnode[b]];
        st_status_t st = ST_OK;

        if (items[b].status != ST_OK) {
            continue;
        }
        pthread_mutex_lock(&nd->lock);
        pthread_mutex_lock(&dp->lock);
        /* No endpoint: it was closed under this batch's puts (above). */
        st =
            nd->ep != NULL ? st_transport_ep_flush(nd->ep, (int)c->timeout_ms) : ST_ERR_UNAVAILABLE;
        /* Flushed (or given up): the write keys go; the daemon revokes them
         * at Commit anyway. */
        for (size_t j = 0; j < bcount[b]; j++) {
            sc_dp_op_t *o = &ops[perm[bfirst[b] + j]];

            if (o->wkey != NULL && o->wkey_resets == nd->resets) {
                st_transport_rkey_destroy(o->wkey); /* else its endpoint's close did */
            }
            o->wkey = NULL;
        }
        pthread_mutex_unlock(&dp->lock);
        pthread_mutex_unlock(&nd->lock);
        for (size_t j = 0; st != ST_OK && j < bcount[b]; j++) {
            ops[perm[bfirst[b] + j]].failed = 1;
        }
    }
    /* Commit: a failed put gets a checksum that cannot match its bytes, so
     * the daemon refuses it and frees the extent. */
    {
        size_t nc = 0;

        for (size_t b = 0; b < nb; b++) {
            const Strata__V1__ReserveResponse *r = (const void *)items[b].resp;

            if (items[b].status != ST_OK || r->reservation_id == 0) {
                continue;
            }
            strata__v1__commit_request__init(&com[nc]);
            com[nc].namespace_id = c->ns;
            com[nc].reservation_id = r->reservation_id;
            com[nc].checksums = &sums[bfirst[b]];
            com[nc].n_checksums = bcount[b];
            com[nc].durable = 0; /* durable KDA objects went inline (above); none here */
            for (size_t j = bfirst[b]; j < bfirst[b] + bcount[b]; j++) {
                st_put_op_t *op = &h->puts[perm[j]];

                sums[j] = ops[perm[j]].posted ? XXH3_64bits(op->src, op->len) : 0;
                if (ops[perm[j]].failed) {
                    sums[j] = ~sums[j];
                }
            }
            citems[nc].ch = c->nodes[bnode[b]].ch;
            citems[nc].req = &com[nc].base;
            cwhich[nc++] = b;
        }
        if (nc > 0 && srpc_fanout(&srpc_cache_methods[SRPC_CACHE_COMMIT], citems, nc,
                                  (int)c->timeout_ms) == ST_OK) {
            for (size_t k = 0; k < nc; k++) {
                const Strata__V1__CommitResponse *cr = (const void *)citems[k].resp;
                size_t b = cwhich[k];

                if (citems[k].status != ST_OK || cr->n_status != bcount[b]) {
                    sc_node_failed(c, bnode[b], citems[k].status, &citems[k].err);
                    continue;
                }
                for (size_t j = 0; j < bcount[b]; j++) {
                    size_t i = perm[bfirst[b] + j];

                    if (!ops[i].posted) {
                        continue;
                    }
                    h->puts[i].status =
                        ops[i].failed ? ST_ERR_UNAVAILABLE : sc_key_status(cr->status[j]);
                    acked[i] = h->puts[i].status == ST_OK;
                }
            }
        }
        srpc_fanout_free(citems, nc);
    }
out:
    if (items != NULL) {
        srpc_fanout_free(items, nb);
    }
    if (ops != NULL) {
        sc_dp_free_tmp(dp, ops, n);
    }
    free(owner), free(perm), free(bnode), free(bfirst), free(bcount), free(ops);
    free(reqs), free(com), free(items), free(citems), free(cwhich), free(keys), free(kp);
    free(links), free(lp), free(lengths), free(sums), free(rowb);
}
