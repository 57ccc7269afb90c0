/*
 * dp_internal.h - libstrata's one-sided data plane (ARCHITECTURE §8): gets
 * and puts straight between the caller's buffers and the daemons' arenas.
 * The state every file of it shares, and how it works:
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
 * tp_get_now: whole objects, and the runs of rows of a worker batch's cached
 * row reads) while the batch's thread copies the first share and
 * then waits for theirs; one batch at a time has them (the others copy
 * alone), and the batch's thread holds the node's lock for them meanwhile.
 * One transport per client, serialised by dp->lock; a worker posts its
 * batch and progresses until its own operations completed (callbacks of
 * other workers' operations may run in its progress calls). Per node, the
 * endpoint and the unpacked region keys are guarded by the node's lock, held
 * while a batch looks keys up and posts, so a refresh never frees a key in
 * use. Keys replaced by a refresh are kept until the client closes.
 *
 * Files, one concern each: dp.c (set-up, Hello, registration, transfer
 * helpers), call.c (calls over the transport with gRPC fallback), lease.c
 * (the lease cache), dp_locate.c (grouping by owner, waves, locator
 * threads), dp_post.c (posting gets, direct copies, copy threads),
 * dp_verify.c (checksums and row sums), dp_release.c (background release),
 * dp_get.c and dp_put.c (a batch's phases).
 */
#ifndef STRATA_CLIENT_DP_INTERNAL_H
#define STRATA_CLIENT_DP_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "call.h"
#include "client_internal.h"
#include "clock.h"
#include "lease.h"
#include "transport.h"

typedef struct sc_dp_region {
    uint64_t base;
    size_t len;
    tp_rkey_t *rkey;
} sc_dp_region_t;

typedef struct sc_dp_node {
    pthread_mutex_t lock;
    int tcalls;           /* Hello said the node serves calls over the transport */
    int committed_ro;     /* Hello: the node's transport keeps committed bytes (else verify) */
    uint64_t resets;      /* endpoint closes: keys unpacked before one are gone with it */
    uint8_t call_key[16]; /* ... and gave the key they present */
    uint64_t gen;         /* bumped when the endpoint or the regions change (lease cache) */
    tp_ep_t *ep;
    uint8_t *addr;
    size_t addr_len;
    sc_dp_region_t *reg; /* by region id */
    size_t cap;
    uint64_t epoch;
    tp_rkey_t **old; /* replaced keys, destroyed at close */
    size_t n_old, cap_old;
} sc_dp_node_t;

typedef struct sc_dp_buf {
    uint8_t *ptr;
    size_t len;
    tp_mem_t *mem;
} sc_dp_buf_t;

/* Row reads of at most this many ops are read on the calling thread. */
#define SC_DP_NOW_MAX 256u

/* Whole-object waves: the first batch per node, and the largest. */
#define SC_DP_WAVE0        (512u << 10)
#define SC_DP_WAVE_MAX     (64u << 20)
#define SC_DP_LOCATORS     4
/* The first waves, up to this many bytes per node, are located by the
 * batch's own thread in one fan-out: a batch of that size or less wakes no
 * locator (on a loaded machine each wake-up costs more than the overlap). */
#define SC_DP_INLINE_BYTES (32u << 20)

/* The Locate fan-out of one wave of a get batch (on the batch's stack). */
typedef struct sc_dp_loc sc_dp_loc_t;
struct sc_dp_loc {
    sc_job_t job; /* first: queued for the locator threads (dp->loc_head) */
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
 * shares of the batches' direct copies (tp_get_now) beside the batches' own
 * threads. Every batch that copies at once queues its shares (at most
 * SC_DP_SHARES_MAX wait at a time): the threads take them in order, and a
 * batch waiting for its own shares runs queued ones too. */
#define SC_DP_COPIERS_MAX 15
#define SC_DP_SHARES_MAX  64
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
    _Atomic int *left; /* the queuing batch's shares not finished */
} sc_dp_share_t;

struct sc_dp {
    sc_lc_t lc; /* the lease cache (SC_LC_SETS sets) */
    /* The locator threads and their queue. */
    pthread_mutex_t loc_lock;
    pthread_cond_t loc_work, loc_done;
    sc_job_t *loc_head, *loc_tail; /* sc_dp_loc_t's */
    pthread_t loc_th[SC_DP_LOCATORS];
    int n_loc, loc_stop;
    int64_t lease_skew_ns;     /* tests: sc_dp_test_lease_skew() */
    int64_t row_slow_ns;       /* tests: sc_dp_test_row_clock_slow() */
    int rows_unverified;       /* benches: sc_dp_bench_rows_unverified() */
    void (*on_posted)(void *); /* tests: sc_dp_test_on_posted() */
    void *on_posted_arg;
    _Atomic uint64_t rows_refused; /* row reads whose rows failed their row sums */
    pthread_mutex_t lock;          /* the transport and bufs */
    tp_transport_t *tp;
    tp_backend_t backend;
    sc_dp_node_t node[SC_MAX_NODES];
    sc_dp_buf_t *bufs;
    size_t n_bufs, cap_bufs;
    sc_tc_t *tc_head; /* calls over the transport in flight (lock) */
    uint64_t tc_next;
    /* The copy threads and the queue of shares (cp_lock: a ring of cp_qn
     * shares from cp_qh; cp_queued mirrors cp_qn for the threads' spin). */
    pthread_mutex_t cp_lock;
    pthread_cond_t cp_work;
    pthread_t cp_th[SC_DP_COPIERS_MAX];
    int n_cp, cp_stop;
    sc_dp_share_t cp_q[SC_DP_SHARES_MAX];
    unsigned cp_qh, cp_qn;
    _Atomic unsigned cp_queued;
    _Atomic uint64_t cp_bytes; /* copied in queued shares (tests) */
};

/* One op's transfers, lease and verdict (get and put batches alike). */
struct sc_dp_op {
    _Atomic size_t *pending; /* the batch's count of transfers in flight */
    _Atomic int failed;      /* a transfer of this op failed */
    tp_mem_t *tmp;           /* registered for this batch only */
    tp_rkey_t *wkey;         /* puts: the reservation's write key, unpacked (dp->lock) */
    uint64_t wkey_resets;    /* the node's resets when it was unpacked */
    int owner;               /* the node its request goes to; -1: none (inline, cached) */
    uint32_t node;
    int posted; /* transfers were posted (the op is decided after them) */
    uint64_t checksum;
    uint64_t lease;      /* index into the node's Locate answer */
    uint64_t expiry_ns;  /* rows: the lease's end by our clock (0: ask Release) */
    int cached;          /* rows posted from the lease cache, without a Locate */
    sc_lc_ent_t ce;      /* ... the lease-cache entry they were posted from */
    uint64_t bound_ns;   /* whole objects: the lease's end by our clock (0: no lease) */
    uint8_t check;       /* whole objects: verify the landed bytes by their checksum */
    uint8_t verified;    /* whole objects: landed and vouched for (sc_dp_verify_all) */
    uint64_t *rsum;      /* rows: room for the sum of each row (in the batch's buffer) */
    uint8_t has_rsum;    /* rows: rsum holds the sums the rows are verified by */
    uint8_t now_checked; /* rows: all copied at the post (tp_get_now) and
                            checked against rsum then, while in cache */
    uint8_t now_bad;     /* ... and one of them failed its sum (first: now_row) */
    uint32_t now_row;
    uint8_t prechecked; /* hashed while copied (sc_dp_copy_hashed): 2 matched, 1 differed */
};

/* A located whole object waiting to be posted with the others of its batch, or a run of
 * adjacent rows of a cached row read (sc_dp_post_cached_rows). */
struct sc_dp_post {
    size_t i; /* op index */
    uint64_t raddr, len;
    tp_rkey_t *rkey;
    tp_mem_t *mem;  /* the local registration; NULL: the op failed */
    st_status_t st; /* the direct copy's; ST_ERR_UNSUPPORTED: post a get */
    /* Rows: the run is the op's rows [x0, x0 + len / row_bytes), at dst + x0 x row_bytes; bad
     * is 1 + the first row whose sum did not match (checked by the copying thread), or 0. */
    uint32_t x0, bad;
};

/* One request of a batch to one node: ops perm[first, first + count), in
 * wave `wave` (gets; puts have one wave). */
typedef struct sc_dp_req {
    uint32_t node, wave;
    size_t first, count;
    uint64_t lease; /* gets: the lease its Locate took (0: none) */
    uint8_t keep;   /* gets: a lease-cache entry keeps the lease (not released) */
} sc_dp_req_t;

/* --- dp.c: the nodes, local memory, transfers ---------------------------- */

/* Forgets node n's endpoint, keys and regions (dp->lock held). */
void sc_dp_node_reset(sc_dp_node_t *n);
/* sc_dp_node_reset without the endpoint's flush: its transfers in flight
 * are cancelled and land nothing after it returned (tp_ep_abort). */
void sc_dp_node_abort(sc_dp_node_t *n);
/* One progress call of the client's transport, under its lock. */
int sc_dp_poll(sc_dp_t *dp);
/* A transfer's completion: counts it done, marks the op failed on error. */
void sc_dp_done(void *user, st_status_t status);
/* The registration covering [p, p + len): a registered buffer, or a
 * temporary one recorded in o->tmp. NULL on failure. dp->lock held. */
tp_mem_t *sc_dp_local(sc_dp_t *dp, sc_dp_op_t *o, void *p, size_t len);
/* Progresses until the batch's transfers have all completed. */
void sc_dp_wait(sc_dp_t *dp, _Atomic size_t *pending);
/* After endpoints were aborted: progresses until the transport holds no
 * cancelled transfer any more (tp_orphaned is 0), so that none writes or
 * reads a buffer the caller is about to hand back; gives up with a warning
 * after SC_DP_SETTLE_MS (a transport that never releases them). */
#define SC_DP_SETTLE_MS 200
void sc_dp_settle(sc_dp_t *dp);
/* sc_dp_wait with a deadline: ST_OK once every transfer completed,
 * ST_ERR_TIMEOUT when some are still in flight at until (cm_mono_ns). */
st_status_t sc_dp_wait_until(sc_dp_t *dp, _Atomic size_t *pending, uint64_t until);
/* Deregisters the temporary registrations of o[0, n). */
void sc_dp_free_tmp(sc_dp_t *dp, sc_dp_op_t *o, size_t n);
/* Looks up region id of node n, refreshing once per batch (*refreshed,
 * a Hello of at most timeout_ms: what is left of the call) when unknown or
 * when the epoch moved. Node lock held. */
sc_dp_region_t *sc_dp_region(st_client_t *c, uint32_t node, uint32_t id, uint64_t epoch,
                             int *refreshed, int timeout_ms);
/* The owner of a block, or -1 when it has no data plane (served inline). */
int sc_dp_owner(st_client_t *c, const st_hash_t *chain, uint64_t block);
/* The protocol key of an object (hash is referenced, not copied). */
void sc_dp_key(Strata__V1__ObjectKey *k, const st_hash_t *hash, uint8_t kind, uint16_t layer);

/* --- dp_locate.c: grouping by owner, waves, the locator threads ---------- */

void *sc_dp_locator_main(void *arg);
void sc_dp_locators_stop(sc_dp_t *dp);
/* Groups ops by owner (ops[i].owner) into requests of at most max_batch
 * ops over the permutation perm; returns their number. */
size_t sc_dp_batches(st_client_t *c, const sc_dp_op_t *ops, size_t n, size_t *perm,
                     sc_dp_req_t *req);
/* The bytes op will read (whole objects: at most dst_len). */
uint64_t sc_dp_get_bytes(const st_get_op_t *op);
/* Groups a get batch's ops by owner into waves (sc_dp_batches with bytes
 * growing four-fold per request of a node), in wave order; returns their
 * number, or 0 with *nomem set when out of memory. */
size_t sc_dp_waves(st_client_t *c, const st_handle_t *h, const sc_dp_op_t *ops, size_t n,
                   size_t *perm, sc_dp_req_t *req, int *nomem);
/* Runs one wave's Locate fan-out (on a locator thread, or the batch's own). */
void sc_dp_loc_run(sc_dp_loc_t *j);
/* Queues the Locate fan-outs of the waves, in order, for the locator threads. */
void sc_dp_loc_submit(sc_dp_t *dp, sc_dp_loc_t *loc, size_t nw);
/* Waits for a wave's Locate, progressing the batch's transfers meanwhile. */
void sc_dp_loc_wait(sc_dp_t *dp, sc_dp_loc_t *j, _Atomic size_t *pending);

/* --- dp_post.c: gets, direct copies, the copy threads -------------------- */

void *sc_dp_copier_main(void *arg);
/* Whether op fits an object of len bytes: ST_OK or ST_ERR_INVALID. */
st_status_t sc_dp_get_fits(const st_get_op_t *op, uint64_t len);
/* Posts op's gets (the object, or its rows) from reg at off. Node lock held. */
void sc_dp_post_get(sc_dp_t *dp, sc_dp_node_t *nd, st_get_op_t *op, sc_dp_op_t *o,
                    const sc_dp_region_t *reg, uint64_t off, uint64_t len);
/* The gets of whole objects p[0, np) on one node (node lock held). */
void sc_dp_post_objects(sc_dp_t *dp, sc_dp_node_t *nd, st_handle_t *h, sc_dp_op_t *ops,
                        sc_dp_post_t *p, size_t np);
/* Posts a read from its lease-cache entry; 0 when the entry is stale. */
int sc_dp_post_cached(st_client_t *c, st_get_op_t *op, sc_dp_op_t *o, const sc_lc_ent_t *e);
/*
 * The cached row reads ix[0, n) of h, all on node `node` (each with its lease-cache entry in
 * ops[ix[j]].ce): what sc_dp_post_cached() does for each, under one hold of the node's lock,
 * with the direct copies of every run of rows shared with the copy threads and each run checked
 * against its row sums by the thread that copied it. ok[j]: as sc_dp_post_cached() returns
 * for op ix[j] (0: the entry is stale, nothing was posted for it).
 */
void sc_dp_post_cached_rows(st_client_t *c, st_handle_t *h, sc_dp_op_t *ops, uint32_t node,
                            const size_t *ix, size_t n, uint8_t *ok);

/* --- dp_verify.c: checksums of whole objects, row sums ------------------- */

/* Sets ops[i].verified for the whole objects of h that landed and are
 * vouched for: by their lease, or by their checksum (ops[i].check). */
void sc_dp_verify_all(st_handle_t *h, sc_dp_op_t *ops, size_t n);
/* Whether every row of op that landed matches its row sum. */
int sc_dp_rows_ok(sc_dp_t *dp, const st_get_op_t *op, const sc_dp_op_t *o);

/* --- dp_release.c: leases released in the background --------------------- */

/* Releases the leases of requests req[0, n_req) that took one and do not
 * keep it: over the transport where it can (not waited for), else on a pool
 * worker; a lease that cannot be released ends by time. */
void sc_dp_release(st_client_t *c, const sc_dp_req_t *req, size_t n_req);

#endif /* STRATA_CLIENT_DP_INTERNAL_H */
