/*
 * client_internal.h - libstrata's internals: the client, its nodes, the
 * worker pool that runs asynchronous batches, and the per-thread error.
 */
#ifndef STRATA_CLIENT_INTERNAL_H
#define STRATA_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "clock.h"
#include "kinds.h"
#include "ring.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/strata.h"

#define SC_MAX_NODES 256
#define SC_WORKERS   4

typedef struct sc_node {
    char *addr;
    srpc_channel_t *ch;
    int left; /* no longer a serving member (etcd): no points on the ring, not retried */
} sc_node_t;

struct srpc_etcd;

/* A unit of work of the pool; run() fills the handle's ops. */
typedef struct sc_job {
    void (*run)(struct sc_job *job);
    struct sc_job *next;
    st_handle_t *handle;
} sc_job_t;

struct st_handle {
    sc_job_t job;
    st_client_t *client;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done;
    /* The batch: */
    const st_hash_t *chain;
    size_t n_chain;
    st_get_op_t *gets;
    st_put_op_t *puts;
    size_t n;
    unsigned flags;
    uint32_t *written;    /* puts: per op, the replicas that stored it */
    uint64_t deadline_ns; /* by the monotonic clock: submitted + timeout_ms */
    int behind;           /* gets: a node answered with a newer ring epoch than ours */
};

typedef struct sc_dp sc_dp_t; /* the one-sided data plane (dp_internal.h) */

/* The time left to handle h's call (its timeout_ms covers the whole call:
 * every phase takes what the ones before it left), in ms, at least 1 (a
 * phase started at its deadline still gets one try: what it returns is
 * decided by sc_past). */
static inline int sc_left_ms(const st_handle_t *h)
{
    uint64_t now = cm_mono_ns();

    return now + 1000000ull >= h->deadline_ns ? 1 : (int)((h->deadline_ns - now) / 1000000ull);
}

/* Whether handle h's call is past its deadline. */
static inline int sc_past(const st_handle_t *h)
{
    return cm_mono_ns() >= h->deadline_ns;
}

struct st_client {
    sc_dp_t *dp; /* NULL: inline Put/Get only */
    sc_node_t nodes[SC_MAX_NODES];
    uint32_t n_nodes;
    ring_t ring;
    char *tenant, *model, *token;
    char *tls_ca_pem, *tls_cert_pem, *tls_key_pem; /* NULL: plaintext control plane */
    uint32_t replicas;
    uint32_t write_quorum; /* W of durable writes, 1..replicas */
    uint32_t timeout_ms;
    uint32_t health_interval_ms;
    int verify_always;     /* verify_reads = always: hash every whole object read */
    int cache_all;         /* cache_locations = all: whole objects use the lease cache too */
    int tcalls;            /* transport_calls: Locate/Release/Lookup over the transport */
    uint32_t copy_threads; /* threads that copy a batch's mapped objects (1: its own) */

    /* From Hello (the same on every node of a cluster). */
    uint64_t ns;
    st_hash_t seed;
    uint32_t block_tokens;
    uint32_t segment_blocks;
    uint32_t max_batch;
    uint32_t max_message;
    uint32_t max_hashes;

    pthread_mutex_t pool_lock;
    pthread_cond_t pool_cond;
    sc_job_t *queue_head, *queue_tail;
    pthread_t workers[SC_WORKERS];
    int n_workers;
    int stopping;
    uint64_t completed; /* handles completed, for st_client_poll */
    uint64_t polled;

    /* Membership on etcd (members.c); etcd NULL: the nodes list. */
    struct srpc_etcd *etcd;
    char *etcd_prefix;
    uint64_t ring_epoch;      /* atomic access */
    uint64_t etcd_read_epoch; /* the epoch of the last read (health thread) */
    uint64_t etcd_checked_ms;

    pthread_t health;
    int health_running;
    pthread_mutex_t health_lock;
    pthread_cond_t health_cond;
    /* A round asked for out of turn (sc_health_refresh): kicks asked, the
     * kicks the last finished round served, and when it finished (all under
     * health_lock); view_gen (atomic) grows whenever the ring is rebuilt or
     * a node comes back, so a caller can tell whether its placement moved. */
    uint64_t health_kicks, health_served, health_kicked_ms;
    uint64_t view_gen;
};

/* Sets this thread's last error message and returns status. */
st_status_t sc_error(st_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * members.c: membership on etcd. sc_members_nodes() reads the serving
 * members at connect into *list_p ("host:port,...", malloc'd) and keeps the
 * etcd client in c; sc_members_refresh() (the health thread's, every
 * health_interval) reads them again and, on a new epoch, adds new members
 * (channel opened, down until the health thread's Hello) and takes those
 * that left off the ring. sc_members_close() frees what they hold.
 */
st_status_t sc_members_nodes(st_client_t *c, const char *etcd, const char *prefix, char **list_p);

/*
 * client.c: a health round now, out of turn: the members read again from
 * etcd (at once, not after health_interval) and a Hello to every member
 * that is down, waited for until deadline_ns (monotonic). For a durable
 * read that missed everywhere it looked: the ring may have moved twice
 * since this client last looked, or a holder may be back. Returns 1 when
 * the view (view_gen) is no longer gen0, so placing again may find more;
 * 0 otherwise. Rounds out of turn are at most one per SC_KICK_MS.
 */
int sc_health_refresh(st_client_t *c, uint64_t gen0, uint64_t deadline_ns);
void sc_members_refresh(st_client_t *c);
void sc_members_close(st_client_t *c);

/* base.c: opens node i's gRPC channel with the client's credentials. */
st_status_t sc_node_channel_open(st_client_t *c, uint32_t i);

/* Marks node i down after a failed call (the health thread brings it back). */
void sc_node_failed(st_client_t *c, uint32_t i, st_status_t status, const srpc_error_t *err);

/* The node holding a segment whose first block hash is first: the first
 * healthy node on the ring. Returns -1 when every node is down. */
int sc_owner(const st_client_t *c, const st_hash_t *first);

/* The segment start of block i of a chain. */
static inline const st_hash_t *sc_segment_first(const st_client_t *c, const st_hash_t *chain,
                                                uint64_t i)
{
    return &chain[i - i % c->segment_blocks];
}

/* Queues a job on the pool. */
void sc_pool_submit(st_client_t *c, sc_job_t *job);
/* A queue of jobs served by threads (the pool's, the data plane's
 * locators): runs the jobs queued at *head one at a time, each with lock
 * not held, until *stop is set and the queue is drained; done(job, arg), if
 * not NULL, runs with lock held after each job (a pool job may free itself
 * in run). Called without lock. */
void sc_jobs_serve(pthread_mutex_t *lock, pthread_cond_t *cond, sc_job_t **head, sc_job_t **tail,
                   const int *stop, void (*done)(sc_job_t *job, void *arg), void *arg);
/* Sets *stop under lock, wakes every thread waiting on cond, joins
 * th[0, *n) and sets *n to 0. */
void sc_threads_stop(pthread_mutex_t *lock, pthread_cond_t *cond, int *stop, pthread_t *th, int *n);
st_status_t sc_pool_start(st_client_t *c);
void sc_pool_stop(st_client_t *c);

/* Marks a handle complete and wakes its waiters. */
void sc_handle_complete(st_handle_t *h);

/* Batch workers (inline.c). */
void sc_run_get(sc_job_t *job);
void sc_run_put(sc_job_t *job);

/* The data plane (dp.c, dp_get.c, dp_put.c). sc_dp_create() parses "ucx", "libfabric" or
 * "libfabric:<provider>" and sets c->dp (error message set on failure);
 * sc_dp_hello() takes node i's Hello answer (endpoint, region keys);
 * sc_dp_get()/sc_dp_put() run a batch's ops at their owners over the
 * transport and set todo[i] for the ops the inline path must still do. */
st_status_t sc_dp_create(st_client_t *c, const char *spec);
void sc_dp_destroy(st_client_t *c);
void sc_dp_hello(st_client_t *c, uint32_t i, const Strata__V1__HelloResponse *resp);
void sc_dp_get(st_handle_t *h, uint8_t *todo);
void sc_dp_put(st_handle_t *h, uint8_t *todo, uint8_t *acked);

/* Row reads on the calling thread: when every op of h is a row read whose
 * object's location is in the lease cache, posts the gets (adjacent rows of
 * an object coalesced), waits for them and fills the statuses; returns 1.
 * Otherwise returns 0 with the ops as they were (the batch goes to a worker). */
int sc_dp_get_now(st_handle_t *h);

/*
 * call.c: srpc_fanout() of method (Locate, Release or Lookup: tcm is its
 * tcall_method_t) with the calls to nodes that serve them over the
 * transport (Hello's transport_calls) sent there instead of over gRPC: same
 * requests, same answers in items, no gRPC round trip. A call whose answer
 * does not come within SC_TC_PATIENCE_MS (or cannot be sent) is made again
 * over gRPC, which also finds out whether the node is down.
 */
st_status_t sc_fanout(st_client_t *c, const srpc_method_t *method, uint32_t tcm,
                      srpc_fanout_item_t *items, size_t n, int timeout_ms);

/* For tests: whole-object reads decide whether they landed under their
 * lease as if this client's clock ran ns ahead (a slow client), so that
 * reads past the lease's bound can be made on purpose. */
void sc_dp_test_lease_skew(st_client_t *c, int64_t ns);
/* Tests: row reads take the lease clock to run ns behind (a client whose
 * process stalled, or whose clock is slow), so that a cached lease seems
 * alive after the daemon let it go. ns must be less than the time since
 * boot (the monotonic clock's value). */
void sc_dp_test_row_clock_slow(st_client_t *c, int64_t ns);
/* Tests: fn(arg) runs in every get batch once its one-sided reads are
 * posted, before it waits for them (a test stops a daemon there, so that
 * the reads are in flight). NULL: none. */
void sc_dp_test_on_posted(st_client_t *c, void (*fn)(void *), void *arg);
/* Benches only (bench_rows): row reads accept rows as they landed under
 * their lease, with no row sums asked for nor checked (the behaviour before
 * row verification), so that one run measures both. */
void sc_dp_bench_rows_unverified(st_client_t *c, int on);
/* Row reads refused because a row did not match its row sum. */
uint64_t sc_dp_rows_refused(st_client_t *c);
/* Tests: the bytes the client's copy threads have copied (copy_threads). */
uint64_t sc_dp_test_shared_bytes(st_client_t *c);

#endif /* STRATA_CLIENT_INTERNAL_H */
