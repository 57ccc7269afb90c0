/*
 * ssd_read.c - reads: get, get into a buffer, promote. Each read is one
 * short read-only transaction: find the value, check its header, copy the
 * payload out, end the transaction, then verify the checksum on the copy, so
 * the bytes verified are the bytes handed over.
 */
#include <stdlib.h>
#include <string.h>

#include "xxh.h"

#include "log.h"
#include "ssd_internal.h"

int ssd_rtxn_begin(ssd_t *ssd, MDB_txn **txn_p)
{
    MDB_txn *txn = NULL;

    pthread_mutex_lock(&ssd->rtxn_lock);
    if (ssd->rtxn_n > 0) {
        txn = ssd->rtxn_pool[--ssd->rtxn_n];
    }
    pthread_mutex_unlock(&ssd->rtxn_lock);
    if (txn != NULL) {
        if (mdb_txn_renew(txn) == 0) {
            *txn_p = txn;
            return 0;
        }
        mdb_txn_abort(txn);
    }
    return mdb_txn_begin(ssd->env, NULL, MDB_RDONLY, txn_p);
}

void ssd_rtxn_end(ssd_t *ssd, MDB_txn *txn)
{
    mdb_txn_reset(txn);
    pthread_mutex_lock(&ssd->rtxn_lock);
    if (ssd->rtxn_n < SSD_RTXN_POOL) {
        ssd->rtxn_pool[ssd->rtxn_n++] = txn;
        txn = NULL;
    }
    pthread_mutex_unlock(&ssd->rtxn_lock);
    if (txn != NULL) {
        mdb_txn_abort(txn);
    }
}

/* Logs, counts and queues the removal of a corrupt value. */
static void ssd_corrupt(ssd_t *ssd, const ssd_key_t *key, uint64_t seq, const char *why)
{
    char hex[33];
    ssd_op_t *op;

    atomic_fetch_add(&ssd->corrupt, 1);
    st_hash_to_hex(&key->id, hex);
    lg_warn_ratelimited("ssd corrupt value detected, dropped dir=%s kind=%s ns=%llu id=%s "
                        "layer=%u why=%s",
                        ssd->dir, ssd_kind_name(key->kind), (unsigned long long)key->ns, hex,
                        (unsigned)key->layer, why);
    op = calloc(1, sizeof(*op));
    if (op == NULL) {
        return;
    }
    op->type = seq != 0 ? SSD_OP_DROP_IFSEQ : SSD_OP_DELETE;
    op->flags = SSD_NOWAIT;
    op->key = *key;
    op->seq = seq;
    if (ssd_submit(ssd, op) != ST_OK) {
        free(op); /* the next read finds it again and retries */
    }
}

/*
 * Checks a value read as head (head_len bytes) and tail against the stored
 * checksum of the whole, and computes the XXH3-64 of the tail alone, in one
 * pass: each piece of the tail is hashed twice while it is in the cache.
 * Returns 1 when the whole matches (then *tail_sum_p is written), 0 when it
 * does not, -1 for no memory.
 */
static int ssd_verify_split(const uint8_t *head, size_t head_len, const uint8_t *tail,
                            size_t tail_len, uint64_t checksum, uint64_t *tail_sum_p)
{
    enum { PIECE = 8192 };
    XXH3_state_t *whole = XXH3_createState(), *part = XXH3_createState();
    int rc = -1;

    if (whole != NULL && part != NULL && XXH3_64bits_reset(whole) == XXH_OK &&
        XXH3_64bits_reset(part) == XXH_OK && XXH3_64bits_update(whole, head, head_len) == XXH_OK) {
        rc = 0;
        for (size_t at = 0; at < tail_len && rc == 0; at += PIECE) {
            size_t n = tail_len - at < PIECE ? tail_len - at : PIECE;

            if (XXH3_64bits_update(whole, tail + at, n) != XXH_OK ||
                XXH3_64bits_update(part, tail + at, n) != XXH_OK) {
                rc = -1;
            }
        }
        if (rc == 0 && XXH3_64bits_digest(whole) == checksum) {
            *tail_sum_p = XXH3_64bits_digest(part);
            rc = 1;
        }
    }
    XXH3_freeState(part);
    XXH3_freeState(whole);
    return rc;
}

/*
 * One read. With head_len > 0 the first head_len bytes of the value go to
 * head and alloc gives room for the rest only (ssd_promote_split).
 */
static st_status_t ssd_read(ssd_t *ssd, const ssd_key_t *key, void *head, size_t head_len,
                            ssd_alloc_fn alloc, void *alloc_arg, uint64_t *tail_sum_p,
                            ssd_meta_t *meta_p, int promote)
{
    uint8_t kb[SSD_KEY_BYTES];
    MDB_val k = {sizeof(kb), kb}, v;
    MDB_txn *txn;
    ssd_hdr_t hdr;
    ssd_meta_t meta;
    st_status_t status;
    uint64_t tail_sum = 0;
    void *dst;
    int rc;

    status = ssd_check_pid(ssd);
    if (status != ST_OK) {
        return status;
    }
    if (key == NULL || alloc == NULL || !ssd_kind_valid(key->kind) || head_len > SSD_HEAD_MAX ||
        (head_len > 0 && head == NULL)) {
        lg_error("ssd read refused: bad key, allocator or head kind=%u head_len=%zu",
                 key != NULL ? (unsigned)key->kind : 0u, head_len);
        return ST_ERR_INVALID;
    }
    atomic_fetch_add(&ssd->gets, 1);
    ssd_key_encode(key, kb);
    rc = ssd_rtxn_begin(ssd, &txn);
    if (rc != 0) {
        return ssd_mdb_status(ssd, rc, "get");
    }
    rc = mdb_get(txn, ssd_kind_spilled(key->kind) ? ssd->dbi_spill : ssd->dbi_durable, &k, &v);
    if (rc != 0) {
        ssd_rtxn_end(ssd, txn);
        if (rc == MDB_NOTFOUND) {
            atomic_fetch_add(&ssd->misses, 1);
            return ST_ERR_NOT_FOUND;
        }
        return ssd_mdb_status(ssd, rc, "get");
    }
    if (ssd_hdr_decode(key, v.mv_data, v.mv_size, &hdr) != ST_OK ||
        hdr.length != v.mv_size - SSD_HDR_BYTES) {
        ssd_rtxn_end(ssd, txn);
        atomic_fetch_add(&ssd->misses, 1);
        ssd_corrupt(ssd, key, 0, "header");
        return ST_ERR_NOT_FOUND;
    }
    meta.length = hdr.length;
    meta.checksum = hdr.checksum;
    meta.seq = hdr.seq;
    meta.created_us = hdr.created_us;
    meta.flags = hdr.flags;
    if (hdr.length < head_len) {
        ssd_rtxn_end(ssd, txn);
        lg_error("ssd read refused: a value of %llu bytes is shorter than the head of %zu "
                 "kind=%s ns=%llu layer=%u",
                 (unsigned long long)hdr.length, head_len, ssd_kind_name(key->kind),
                 (unsigned long long)key->ns, (unsigned)key->layer);
        return ST_ERR_INVALID;
    }
    if (head_len > 0) {
        memcpy(head, (const uint8_t *)v.mv_data + SSD_HDR_BYTES, head_len);
    }
    dst = alloc(alloc_arg, (size_t)(hdr.length - head_len), &meta);
    if (dst == NULL && hdr.length != head_len) {
        ssd_rtxn_end(ssd, txn);
        return ST_ERR_NOMEM;
    }
    if (hdr.length != head_len) {
        /* From LMDB's map: the pages a read transaction sees are not reused
         * while it lasts. (Reading large values with pread from the same
         * offset of data.mdb instead was slower here: docs/tiers.md,
         * "Reads, checksums and corruption".) */
        memcpy(dst, (const uint8_t *)v.mv_data + SSD_HDR_BYTES + head_len,
               (size_t)(hdr.length - head_len));
    }
    ssd_rtxn_end(ssd, txn);

    if (head_len > 0) {
        rc = ssd_verify_split(head, head_len, dst, (size_t)(hdr.length - head_len), hdr.checksum,
                              &tail_sum);
        if (rc < 0) {
            return ST_ERR_NOMEM;
        }
    } else {
        rc = XXH3_64bits(dst, (size_t)hdr.length) == hdr.checksum;
    }
    if (rc == 0) {
        atomic_fetch_add(&ssd->misses, 1);
        ssd_corrupt(ssd, key, hdr.seq, "checksum");
        return ST_ERR_NOT_FOUND;
    }
    if (promote && ssd_kind_spilled(key->kind)) {
        ssd_op_t *op = calloc(1, sizeof(*op));

        /* Best effort: if it cannot be queued the copy stays on SSD and
         * ages out of the LRU. */
        if (op != NULL) {
            op->type = SSD_OP_DROP_IFSEQ;
            op->flags = SSD_NOWAIT;
            op->key = *key;
            op->seq = hdr.seq;
            if (ssd_submit(ssd, op) != ST_OK) {
                free(op);
            }
        }
        atomic_fetch_add(&ssd->promotions, 1);
    }
    if (meta_p != NULL) {
        *meta_p = meta;
    }
    if (tail_sum_p != NULL) {
        *tail_sum_p = tail_sum;
    }
    return ST_OK;
}

st_status_t ssd_get(ssd_t *ssd, const ssd_key_t *key, ssd_alloc_fn alloc, void *alloc_arg,
                    ssd_meta_t *meta_p)
{
    return ssd_read(ssd, key, NULL, 0, alloc, alloc_arg, NULL, meta_p, 0);
}

st_status_t ssd_promote(ssd_t *ssd, const ssd_key_t *key, ssd_alloc_fn alloc, void *alloc_arg,
                        ssd_meta_t *meta_p)
{
    return ssd_read(ssd, key, NULL, 0, alloc, alloc_arg, NULL, meta_p, 1);
}

st_status_t ssd_promote_split(ssd_t *ssd, const ssd_key_t *key, void *head, size_t head_len,
                              ssd_alloc_fn alloc, void *alloc_arg, uint64_t *tail_sum_p,
                              ssd_meta_t *meta_p)
{
    if (head_len == 0) {
        lg_error("ssd promote refused: an empty head (use ssd_promote)");
        return ST_ERR_INVALID;
    }
    return ssd_read(ssd, key, head, head_len, alloc, alloc_arg, tail_sum_p, meta_p, 1);
}

st_status_t ssd_get_split(ssd_t *ssd, const ssd_key_t *key, void *head, size_t head_len,
                          ssd_alloc_fn alloc, void *alloc_arg, uint64_t *tail_sum_p,
                          ssd_meta_t *meta_p)
{
    if (head_len == 0) {
        lg_error("ssd read refused: an empty head (use ssd_get)");
        return ST_ERR_INVALID;
    }
    return ssd_read(ssd, key, head, head_len, alloc, alloc_arg, tail_sum_p, meta_p, 0);
}

int ssd_contains(ssd_t *ssd, const ssd_key_t *key)
{
    uint8_t kb[SSD_KEY_BYTES];
    MDB_val k = {sizeof(kb), kb}, v;
    MDB_txn *txn;
    int rc;

    if (key == NULL || !ssd_kind_valid(key->kind) || ssd_check_pid(ssd) != ST_OK) {
        return 0;
    }
    ssd_key_encode(key, kb);
    if (ssd_rtxn_begin(ssd, &txn) != 0) {
        return 0;
    }
    rc = mdb_get(txn, ssd_kind_spilled(key->kind) ? ssd->dbi_spill : ssd->dbi_durable, &k, &v);
    ssd_rtxn_end(ssd, txn);
    return rc == 0;
}

typedef struct ssd_buf {
    void *buf;
    size_t cap;
    size_t need;
} ssd_buf_t;

static void *ssd_buf_alloc(void *arg, size_t length, const ssd_meta_t *meta)
{
    ssd_buf_t *b = arg;
    static uint8_t empty;

    b->need = length;
    if (length > b->cap) {
        return NULL;
    }
    return b->buf != NULL ? b->buf : &empty;
}

st_status_t ssd_get_buf(ssd_t *ssd, const ssd_key_t *key, void *buf, size_t cap, size_t *length_p,
                        ssd_meta_t *meta_p)
{
    ssd_buf_t b = {buf, buf != NULL ? cap : 0, 0};
    st_status_t status;

    status = ssd_read(ssd, key, NULL, 0, ssd_buf_alloc, &b, NULL, meta_p, 0);
    if (status == ST_ERR_NOMEM && b.need > b.cap) {
        status = ST_ERR_EXHAUSTED;
    }
    if ((status == ST_OK || status == ST_ERR_EXHAUSTED) && length_p != NULL) {
        *length_p = b.need;
    }
    return status;
}

uint64_t ssd_removals(ssd_t *ssd)
{
    return atomic_load(&ssd->removals);
}
