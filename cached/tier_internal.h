/*
 * tier_internal.h - what the files of stratad's SSD tier share, and nothing
 * else includes (the daemon uses tier.h):
 *
 *   tier.c          life cycle, write-through, spill on eviction, promote;
 *   tier_index.c    the T2 index on cd_htab (htab.h);
 *   tier_wb.c       the write-behind thread;
 *   tier_recover.c  recovery at start;
 *   tier_format.c   the daemon's values in the tier: the object prefix, the
 *                   namespace record and the session record.
 *
 * Locks: t->lock guards the index (and its condition, a promotion that
 * finished); t->wb_lock the write-behind's batch; t->close_lock closing the
 * environment against the metrics thread's stats. None is held across a
 * store call or a blocking tier call.
 */
#ifndef STRATA_CACHED_TIER_INTERNAL_H
#define STRATA_CACHED_TIER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "bytes.h"
#include "clock.h"
#include "htab.h"
#include "tier.h"

#define CD_TIER_PREFIX      24 /* bytes before a KV, IDX or KDA object's own: tier_format.c */
#define CD_TIER_SESS_BYTES  64 /* a session record */
#define CD_TIER_NS_BYTES    (16 + 2 * CD_NAME_MAX) /* the largest namespace record */
#define CD_TIER_NS_LAYER    0xffffu                /* SESSION-kind key of a namespace record */
#define CD_TIER_PLACE_LAYER 0xfffeu /* SESSION-kind key of a KDA block's placement record */
#define CD_TIER_PLACE_BYTES 40      /* a placement record */

#define CD_TIER_WB_CAP 1024 /* objects per write-behind batch */

/* The wire namespaces of the T2 index: its tag is a position here. */
typedef struct cd_tier_wires {
    uint64_t *w;
    uint32_t n, cap;
} cd_tier_wires_t;

struct cd_tier {
    cd_tier_params_t p; /* as given to cd_tier_open (its strings outlive the tier) */
    cd_store_t *store;  /* from cd_tier_recover on */
    ssd_t *ssd;
    int recovering;
    _Atomic uint64_t wire[CD_TIER_NS_MAX + 1]; /* local namespace id -> wire id */

    pthread_mutex_t close_lock; /* ssd_close against cd_tier_stats (the metrics thread) */
    pthread_mutex_t lock;       /* the index */
    pthread_cond_t cond;        /* a promotion finished */
    cd_htab_t index;            /* (block hash, wire position) -> cd_tier_block_t */
    cd_tier_wires_t wires;
    size_t nblocks, nobjects;

    _Atomic uint64_t inflight; /* bytes of spills queued, not yet done */
    _Atomic uint64_t gen;      /* promotions finished */
    _Atomic uint64_t spill_queued, spill_dropped, promoted, promote_misses;
    _Atomic uint64_t spill_clean; /* evictions of objects whose tier copy stayed */
    /* Per local namespace and cd_kind_t (KV, IDX, KDA): objects written to
     * the tier from DRAM (spills and the write-behind's), and promoted. */
    _Atomic uint64_t flow_spills[CD_TIER_NS_MAX + 1][3];
    _Atomic uint64_t flow_promoted[CD_TIER_NS_MAX + 1][3];
    uint64_t recovered_ms, recovered_sessions, recovered_objects;

    /* Write-behind (tier_wb.c): one thread writes the coldest objects of
     * each namespace out ahead of eviction, a batch at a time. */
    uint64_t wb_ahead;      /* ssd_writeback; 0: no thread */
    _Atomic int wb_running; /* read by evictions on any thread */
    int wb_stop;
    pthread_t wb_thread;
    pthread_mutex_t wb_lock;
    pthread_cond_t wb_cond;      /* a kick or the stop */
    pthread_cond_t wb_done_cond; /* the batch's last write finished */
    uint32_t wb_pending;         /* writes of the batch not finished */
    _Atomic uint8_t wb_want[CD_TIER_NS_MAX + 1];
    /* Per namespace: the window's size when a pass last found it all
     * written, and an estimate of its written bytes left since (evictions
     * of written objects take from it; under half the window, a kick). */
    _Atomic uint64_t wb_window[CD_TIER_NS_MAX + 1];
    _Atomic int64_t wb_clean[CD_TIER_NS_MAX + 1];
    cd_clean_t *wb_items;
    struct cd_tier_wb_job *wb_jobs;
    _Atomic uint64_t wb_objects, wb_bytes, wb_failed;
};

/* The tier library's kind of a cd_kind_t (0: the tier keeps none). */
extern const uint8_t cd_tier_ssd_kind[CD_KIND_COUNT];

/* The key of an object or record in the tier. */
ssd_key_t cd_tier_key(uint64_t wire, const st_hash_t *h, unsigned kind, unsigned layer);

/* The tiered hint's token (store.h): nonzero, and it changes whenever
 * anything may have been removed from the tier (ssd_removals). */
uint64_t cd_tier_token(cd_tier_t *t);

/* The local namespace id of a wire id (0: none bound). Lock-free. */
uint32_t cd_tier_local_of(cd_tier_t *t, uint64_t wire);

/* ------------------------------------------------ values (tier_format.c) -- */

/* Writes the CD_TIER_PREFIX bytes of an object: magic, flags (a parent; the
 * row size when it fits, so that a promote computes row sums again), the
 * parent hash (zeros without one). */
void cd_tier_prefix_put(uint8_t *p, const st_hash_t *parent, uint32_t row_bytes);

/* Reads a prefix: 0 with *has_parent_p, *parent_p and *row_bytes_p (any
 * may be NULL), -1 when it lacks the magic. */
int cd_tier_prefix_get(const uint8_t *p, int *has_parent_p, st_hash_t *parent_p,
                       uint32_t *row_bytes_p);

/* Encodes a namespace record into buf (CD_TIER_NS_BYTES); returns its
 * length, or 0 when a name is longer than CD_NAME_MAX. */
size_t cd_tier_ns_encode(uint8_t *buf, const char *tenant, const char *model,
                         uint32_t block_tokens);

/* Decodes a namespace record: 0, -1 without the record's magic or header
 * (an unreadable record), -2 for lengths that do not add up (a bad one).
 * tenant and model hold CD_NAME_MAX + 1 bytes. */
int cd_tier_ns_decode(const uint8_t *buf, size_t len, char *tenant, char *model,
                      uint32_t *block_tokens_p);

/* Encodes a placement record (CD_TIER_PLACE_BYTES); decodes one: 0, -1 for
 * a bad length or magic (*has_parent_p, *parent_p, *placement_p set on 0). */
void cd_tier_place_encode(uint8_t *buf, const st_hash_t *parent, const st_hash_t *placement);
int cd_tier_place_decode(const uint8_t *buf, size_t len, int *has_parent_p, st_hash_t *parent_p,
                         st_hash_t *placement_p);

/* Encodes a session record (CD_TIER_SESS_BYTES), its store times as wall
 * clock milliseconds (now_unix, now_store: the two clocks now). */
void cd_tier_session_encode(uint8_t *buf, const cd_session_t *rec, uint64_t now_unix,
                            uint64_t now_store);

/* Decodes a session record into rec (id left as it is), its wall-clock
 * times into *created_p and *updated_p; -1 for a bad length or magic. */
int cd_tier_session_decode(const uint8_t *buf, size_t len, cd_session_t *rec, uint64_t *created_p,
                           uint64_t *updated_p);

/* Milliseconds since 1970. */
uint64_t cd_tier_unix_ms(void);

/* ---------------------------------------------- T2 index (tier_index.c) -- */

/* One block of the T2 index. */
typedef struct cd_tier_block {
    uint32_t n, cap;
    uint32_t pending; /* spills queued, not yet committed */
    int promoting;    /* a thread is promoting the tags it took */
    uint16_t *tags;   /* kind << 8 | layer */
    uint16_t inl[4];
} cd_tier_block_t;

/* The index's tag of a tier key's kind and layer. */
uint16_t cd_tier_tag_of(const ssd_key_t *k);

/* With t->lock held: the block's entry, or NULL. */
cd_tier_block_t *cd_tier_index_find(cd_tier_t *t, uint64_t ns, const st_hash_t *h);

/* With t->lock held: adds tag to the block's entry (made when absent).
 * Returns 0, or -1 for no memory (the index is as it was). */
int cd_tier_index_add_locked(cd_tier_t *t, uint64_t ns, const st_hash_t *h, uint16_t tag,
                             int pending);

/* With t->lock held: frees the entry when it names nothing and nothing is
 * pending or promoting. */
void cd_tier_index_maybe_free(cd_tier_t *t, uint64_t ns, const st_hash_t *h, cd_tier_block_t *e);

/* Adds (ns, h, tag) to the index (with pending, one queued spill too).
 * Takes t->lock. Returns 0, or -1 for no memory. */
int cd_tier_index_add(cd_tier_t *t, uint64_t ns, const st_hash_t *h, uint16_t tag, int pending);

/* Removes a tag (with remove_tag) and, with pending, one queued spill. Takes t->lock. */
void cd_tier_index_remove(cd_tier_t *t, uint64_t ns, const st_hash_t *h, uint16_t tag,
                          int remove_tag, int pending);

/* Frees every entry and the table (cd_tier_free). */
void cd_tier_index_destroy(cd_tier_t *t);

/* ------------------------------------------ write-behind (tier_wb.c) -- */

/* Makes the write-behind's lock and conditions (cd_tier_open, first). */
void cd_tier_wb_init(cd_tier_t *t);

/* Frees what cd_tier_wb_init and cd_tier_wb_start made (after the stop). */
void cd_tier_wb_destroy(cd_tier_t *t);

/* Starts the thread when t->wb_ahead > 0. ST_OK or ST_ERR_NOMEM (logged). */
st_status_t cd_tier_wb_start(cd_tier_t *t);

/* Stops the thread; its batch in flight finishes first (the writer runs). */
void cd_tier_wb_stop(cd_tier_t *t);

/* Called by evictions (namespace lock held) of len bytes, clean (the tier
 * had the copy) or not: wakes the thread when the written part of the
 * window runs low, or at once when an eviction had to write. */
void cd_tier_wb_kick(cd_tier_t *t, uint32_t ns_id, uint64_t len, int clean);

#endif /* STRATA_CACHED_TIER_INTERNAL_H */
