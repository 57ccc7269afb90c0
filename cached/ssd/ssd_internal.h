/*
 * ssd_internal.h - what the files of the SSD tier share: the environment
 * structure, the on-disk value header, the operation queue.
 *
 * Lock convention: ssd->lock guards the queue, the flags and the counters;
 * functions named ssd_do_*() run with it held.
 */
#ifndef STRATA_SSD_INTERNAL_H
#define STRATA_SSD_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/types.h>

#include <lmdb.h>

#include "bytes.h"
#include "clock.h"
#include "ssd.h"

/* The value header, little-endian, in front of every payload (docs/tiers.md). */
#define SSD_MAGIC       0x56535453u /* "STSV" */
#define SSD_VERSION     1
#define SSD_HDR_BYTES   48
#define SSD_USAGE_BYTES 96
#define SSD_RTXN_POOL   32

typedef struct ssd_hdr {
    uint8_t kind;
    uint16_t flags;
    uint64_t length;
    uint64_t checksum;
    uint64_t seq;
    uint64_t created_us;
} ssd_hdr_t;

/* Writes the header of key into out (SSD_HDR_BYTES). */
void ssd_hdr_encode(const ssd_key_t *key, const ssd_hdr_t *hdr, uint8_t *out);

/*
 * Checks magic, version, kind and the header check (which binds the header
 * to key) and fills *hdr. Returns ST_OK or ST_ERR_CORRUPT.
 */
st_status_t ssd_hdr_decode(const ssd_key_t *key, const uint8_t *in, size_t in_len, ssd_hdr_t *hdr);

/* The persisted usage record: write sequence and per-kind counts and bytes. */
typedef struct ssd_usage {
    uint64_t seq;
    uint64_t objects[SSD_KIND_MAX_];
    uint64_t bytes[SSD_KIND_MAX_];
} ssd_usage_t;

void ssd_usage_encode(const ssd_usage_t *u, uint8_t out[SSD_USAGE_BYTES]);
st_status_t ssd_usage_decode(const uint8_t *in, size_t len, ssd_usage_t *u);

static inline int ssd_kind_spilled(unsigned kind)
{
    return kind == SSD_KV || kind == SSD_IDX;
}

static inline int ssd_kind_valid(unsigned kind)
{
    return kind >= SSD_KV && kind < SSD_KIND_MAX_;
}

typedef enum ssd_op_type {
    SSD_OP_PUT,        /* KDA, SESSION into the durable table */
    SSD_OP_SPILL,      /* KV, IDX into the spill table and the LRU */
    SSD_OP_DELETE,     /* any kind */
    SSD_OP_DROP_IFSEQ, /* delete only if the stored seq is op->seq (promote, corrupt) */
    SSD_OP_BARRIER     /* nothing; completes after the batch before it */
} ssd_op_type_t;

typedef struct ssd_op {
    struct ssd_op *next;
    ssd_op_type_t type;
    unsigned flags;
    ssd_key_t key;
    const void *data;
    size_t length;     /* payload bytes: head_len, then length - head_len from data */
    uint32_t head_len; /* ssd_spill_parts: a copied head in front of data */
    uint8_t head[SSD_HEAD_MAX];
    void *copy;        /* owned copy of the payload, or NULL */
    uint64_t checksum; /* XXH3-64 of the payload, computed by the caller's thread */
    uint64_t seq;
    ssd_done_fn done;
    void *done_arg;
    int waited; /* a caller waits for it (op lives on its stack) */
    int finished;
    st_status_t status;
} ssd_op_t;

struct ssd {
    MDB_env *env;
    MDB_dbi dbi_durable; /* KDA, SESSION: key -> header | payload */
    MDB_dbi dbi_spill;   /* KV, IDX: key -> header | payload */
    MDB_dbi dbi_lru;     /* u64 seq (big-endian) -> key of a spilled object */
    MDB_dbi dbi_meta;    /* every key -> header: the recovery index */
    MDB_dbi dbi_info;    /* "usage" -> ssd_usage_t */
    char *dir;
    ssd_params_t params;
    pid_t pid;
    uint32_t page_size;

    pthread_mutex_t lock;
    pthread_cond_t queue_cv; /* the writer waits for work */
    pthread_cond_t room_cv;  /* producers wait for room in the queue */
    pthread_cond_t done_cv;  /* waiters wait for their op */
    ssd_op_t *head;
    ssd_op_t *tail;
    uint32_t queued;          /* ops queued or in the running batch */
    uint64_t queued_bytes;    /* copied payload bytes held by those */
    uint64_t queued_payload;  /* payload bytes waiting in the queue */
    uint32_t queued_urgent;   /* ops in the queue that a caller waits for, or durable */
    uint64_t head_since_us;   /* when the queue last became non-empty (monotonic) */
    uint64_t urgent_since_us; /* when the first waited-for op was queued */
    uint32_t last_urgent;     /* waited-for ops in the last batch taken */
    int stopping;
    int paused;
    int writer_started;
    pthread_t writer;
    ssd_op_t **batch_ops; /* the writer's batch, batch_max entries */

    /* Reset read transactions kept for reuse (renew is cheaper than begin). */
    pthread_mutex_t rtxn_lock;
    MDB_txn *rtxn_pool[SSD_RTXN_POOL];
    int rtxn_n;

    /* Touched by the writer only; published to stats under lock. */
    ssd_usage_t usage;
    ssd_usage_t usage_pub;
    uint64_t last_reader_check_ms;

    /* Counters, written under lock or atomically. */
    ssd_stats_t st;
    _Atomic uint64_t gets;
    _Atomic uint64_t misses;
    _Atomic uint64_t corrupt;
    _Atomic uint64_t removals; /* ssd_removals(): bumped by every w_remove */
    _Atomic uint64_t promotions;
};

/* Begins a read transaction (from the pool when it can) / ends it. */
int ssd_rtxn_begin(ssd_t *ssd, MDB_txn **txn_p);
void ssd_rtxn_end(ssd_t *ssd, MDB_txn *txn);

/* Maps an LMDB or errno code to a status, logging what and where. */
st_status_t ssd_mdb_status(ssd_t *ssd, int rc, const char *what);

/* Queues op (the caller fills it) and, if op->waited, waits for it (ssd_queue.c). */
st_status_t ssd_submit(ssd_t *ssd, ssd_op_t *op);

/* The writer thread's body. */
void *ssd_writer_main(void *arg);

/* Returns ST_ERR_INVALID (logged) when called in a process forked after open. */
st_status_t ssd_check_pid(const ssd_t *ssd);

uint64_t ssd_wall_us(void);

/* Microseconds of the monotonic clock (ssd_writer.c). */

#endif /* STRATA_SSD_INTERNAL_H */
