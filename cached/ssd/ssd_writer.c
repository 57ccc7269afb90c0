/*
 * ssd_writer.c - every write goes through one queue to one writer thread,
 * which commits many operations per LMDB write transaction (group commit):
 * durable puts of several callers share one commit and one sync, and
 * spills are batched. When a batch fails (the map is full, say), it is
 * aborted, so nothing of it is written, and its operations are retried one
 * per transaction so that each gets its own status. A durable or spilled
 * write that finds the map full first evicts the oldest spilled objects
 * (cache data gives way) and retries once. The callers' side of the queue
 * (ssd_put, ssd_spill, ssd_delete, ssd_flush): ssd_queue.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>

#include "log.h"
#include "ssd_internal.h"

/* Spilled objects evicted during a transaction, and the payload bytes each
 * write (+) and removal (-) changed, reported after its commit. */
typedef struct ssd_keyed {
    ssd_key_t key;
    int64_t v; /* an evicted object's length, or a change of payload bytes */
} ssd_keyed_t;

typedef struct ssd_keylist {
    ssd_keyed_t *v;
    size_t n, cap;
} ssd_keylist_t;

typedef struct ssd_evicted {
    ssd_keylist_t evicted; /* for params.on_evict */
    ssd_keylist_t deltas;  /* for params.on_usage */
} ssd_evicted_t;

/* Counts of one batch, added to the stats after its commit; ev collects what
 * is reported then. */
typedef struct ssd_tally {
    uint64_t puts, durable_puts, spills, deletes, evictions, evicted_bytes;
    ssd_evicted_t *ev;
} ssd_tally_t;

/* Appends (key, v) to l; without memory, the entry is lost (the write or
 * eviction still happens; only its report is lost). */
static void ssd_keylist_push(ssd_keylist_t *l, const ssd_key_t *key, int64_t v)
{
    if (l->n == l->cap) {
        size_t cap = l->cap != 0 ? l->cap * 2 : 64;
        ssd_keyed_t *nv = realloc(l->v, cap * sizeof(*nv));

        if (nv == NULL) {
            return;
        }
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n].key = *key;
    l->v[l->n].v = v;
    l->n++;
}

/* Notes a change of key's stored payload bytes, for params.on_usage. */
static void ssd_delta_push(ssd_t *ssd, ssd_evicted_t *ev, const ssd_key_t *key, int64_t delta)
{
    if (ssd->params.on_usage != NULL && ev != NULL) {
        ssd_keylist_push(&ev->deltas, key, delta);
    }
}

/* Forgets what a transaction that did not commit collected. */
static void ssd_evicted_clear(ssd_evicted_t *ev)
{
    ev->evicted.n = 0;
    ev->deltas.n = 0;
}

static void ssd_evicted_push(ssd_evicted_t *ev, const ssd_key_t *key, uint64_t length)
{
    ssd_keylist_push(&ev->evicted, key, (int64_t)length);
}

/* Removes the object at k (its value, metadata and LRU entry). */
static int w_remove(ssd_t *ssd, MDB_txn *txn, const ssd_key_t *key, MDB_val *k,
                    const ssd_hdr_t *hdr, ssd_usage_t *u, ssd_tally_t *t)
{
    uint8_t sk[8];
    MDB_val skv = {sizeof(sk), sk};
    int rc;

    /* Before the commit that makes it visible (and also when the
     * transaction aborts after all: the count may only overstate). */
    atomic_fetch_add(&ssd->removals, 1);
    rc = mdb_del(txn, ssd_kind_spilled(key->kind) ? ssd->dbi_spill : ssd->dbi_durable, k, NULL);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return rc;
    }
    rc = mdb_del(txn, ssd->dbi_meta, k, NULL);
    if (rc != 0 && rc != MDB_NOTFOUND) {
        return rc;
    }
    if (hdr == NULL) {
        return 0;
    }
    if (ssd_kind_spilled(key->kind)) {
        cm_put_be64(sk, hdr->seq);
        rc = mdb_del(txn, ssd->dbi_lru, &skv, NULL);
        if (rc != 0 && rc != MDB_NOTFOUND) {
            return rc;
        }
    }
    if (u->objects[key->kind] > 0) {
        u->objects[key->kind]--;
    }
    u->bytes[key->kind] -= hdr->length < u->bytes[key->kind] ? hdr->length : u->bytes[key->kind];
    ssd_delta_push(ssd, t->ev, key, -(int64_t)hdr->length);
    return 0;
}

/* Looks up the stored header of key: 0, MDB_NOTFOUND, or an error. */
static int w_lookup(ssd_t *ssd, MDB_txn *txn, const ssd_key_t *key, MDB_val *k, ssd_hdr_t *hdr,
                    int *hdr_ok)
{
    MDB_val v;
    int rc = mdb_get(txn, ssd->dbi_meta, k, &v);

    *hdr_ok = 0;
    if (rc == 0) {
        *hdr_ok = ssd_hdr_decode(key, v.mv_data, v.mv_size, hdr) == ST_OK;
    }
    return rc;
}

static int w_write(ssd_t *ssd, MDB_txn *txn, ssd_op_t *op, ssd_usage_t *u, ssd_tally_t *t)
{
    uint8_t kb[SSD_KEY_BYTES], hb[SSD_HDR_BYTES], sk[8];
    MDB_val k = {sizeof(kb), kb}, v, hv = {sizeof(hb), hb}, skv = {sizeof(sk), sk};
    int spilled = ssd_kind_spilled(op->key.kind);
    ssd_hdr_t hdr, old;
    int rc, old_ok;

    ssd_key_encode(&op->key, kb);
    rc = w_lookup(ssd, txn, &op->key, &k, &old, &old_ok);
    if (rc == 0) {
        rc = w_remove(ssd, txn, &op->key, &k, old_ok ? &old : NULL, u, t);
    } else if (rc == MDB_NOTFOUND) {
        rc = 0;
    }
    if (rc != 0) {
        return rc;
    }
    hdr.kind = op->key.kind;
    hdr.flags = (op->flags & SSD_DURABLE) ? SSD_DURABLE : 0;
    hdr.length = op->length;
    hdr.checksum = op->checksum;
    hdr.seq = ++u->seq;
    hdr.created_us = ssd_wall_us();
    ssd_hdr_encode(&op->key, &hdr, hb);

    v.mv_size = SSD_HDR_BYTES + op->length;
    v.mv_data = NULL;
    rc = mdb_put(txn, spilled ? ssd->dbi_spill : ssd->dbi_durable, &k, &v, MDB_RESERVE);
    if (rc != 0) {
        return rc;
    }
    memcpy(v.mv_data, hb, SSD_HDR_BYTES);
    if (op->head_len != 0) {
        memcpy((uint8_t *)v.mv_data + SSD_HDR_BYTES, op->head, op->head_len);
    }
    if (op->length > op->head_len) {
        memcpy((uint8_t *)v.mv_data + SSD_HDR_BYTES + op->head_len, op->data,
               op->length - op->head_len);
    }
    rc = mdb_put(txn, ssd->dbi_meta, &k, &hv, 0);
    if (rc == 0 && spilled) {
        cm_put_be64(sk, hdr.seq);
        rc = mdb_put(txn, ssd->dbi_lru, &skv, &k, MDB_APPEND);
    }
    if (rc != 0) {
        return rc;
    }
    u->objects[op->key.kind]++;
    u->bytes[op->key.kind] += op->length;
    ssd_delta_push(ssd, t->ev, &op->key, (int64_t)op->length);
    if (spilled) {
        t->spills++;
    } else {
        t->puts++;
        t->durable_puts += (op->flags & SSD_DURABLE) != 0;
    }
    return 0;
}

static int w_delete(ssd_t *ssd, MDB_txn *txn, ssd_op_t *op, ssd_usage_t *u, ssd_tally_t *t)
{
    uint8_t kb[SSD_KEY_BYTES];
    MDB_val k = {sizeof(kb), kb};
    ssd_hdr_t hdr;
    int rc, ok;

    ssd_key_encode(&op->key, kb);
    rc = w_lookup(ssd, txn, &op->key, &k, &hdr, &ok);
    if (rc == MDB_NOTFOUND) {
        op->status = ST_ERR_NOT_FOUND;
        return 0;
    }
    if (rc != 0) {
        return rc;
    }
    if (op->type == SSD_OP_DROP_IFSEQ && (!ok || hdr.seq != op->seq)) {
        op->status = ST_ERR_NOT_FOUND; /* rewritten since: keep the new one */
        return 0;
    }
    rc = w_remove(ssd, txn, &op->key, &k, ok ? &hdr : NULL, u, t);
    if (rc == 0) {
        t->deletes++;
    }
    return rc;
}

/*
 * Deletes the oldest spilled objects until the spilled bytes are at most
 * target, or (with free_bytes) until free_bytes have been freed.
 */
static int w_evict(ssd_t *ssd, MDB_txn *txn, ssd_usage_t *u, uint64_t target, uint64_t free_bytes,
                   ssd_tally_t *t, ssd_evicted_t *ev)
{
    MDB_cursor *cur;
    MDB_val sk, kv;
    uint64_t freed = 0;
    int rc;

    rc = mdb_cursor_open(txn, ssd->dbi_lru, &cur);
    if (rc != 0) {
        return rc;
    }
    while (free_bytes != 0 ? freed < free_bytes : u->bytes[SSD_KV] + u->bytes[SSD_IDX] > target) {
        ssd_key_t key;
        ssd_hdr_t hdr;
        uint8_t kb[SSD_KEY_BYTES];
        MDB_val k = {sizeof(kb), kb};
        int ok;

        rc = mdb_cursor_get(cur, &sk, &kv, MDB_FIRST);
        if (rc == MDB_NOTFOUND) {
            if (free_bytes == 0) {
                /* The record says there is more than the LRU holds. */
                lg_warn("ssd spill accounting reset dir=%s bytes=%llu", ssd->dir,
                        (unsigned long long)(u->bytes[SSD_KV] + u->bytes[SSD_IDX]));
                u->bytes[SSD_KV] = u->bytes[SSD_IDX] = 0;
            }
            rc = 0;
            break;
        }
        if (rc != 0) {
            break;
        }
        if (kv.mv_size == SSD_KEY_BYTES && ssd_key_decode(kv.mv_data, &key) == ST_OK) {
            memcpy(kb, kv.mv_data, sizeof(kb));
            rc = w_lookup(ssd, txn, &key, &k, &hdr, &ok);
            if (rc == 0 && ok && sk.mv_size == 8 && hdr.seq == cm_get_be64(sk.mv_data)) {
                /* w_remove deletes this LRU entry too. */
                rc = w_remove(ssd, txn, &key, &k, &hdr, u, t);
                if (rc != 0) {
                    break;
                }
                freed += hdr.length + SSD_HDR_BYTES;
                t->evictions++;
                t->evicted_bytes += hdr.length;
                ssd_evicted_push(ev, &key, hdr.length);
                continue;
            }
            if (rc != 0 && rc != MDB_NOTFOUND) {
                break;
            }
        }
        /* A stale LRU entry: its object was rewritten or removed. */
        rc = mdb_cursor_get(cur, &sk, &kv, MDB_FIRST);
        if (rc == 0) {
            rc = mdb_cursor_del(cur, 0);
        }
        if (rc != 0) {
            break;
        }
    }
    mdb_cursor_close(cur);
    return rc;
}

static int w_save_usage(ssd_t *ssd, MDB_txn *txn, const ssd_usage_t *u)
{
    uint8_t buf[SSD_USAGE_BYTES];
    MDB_val k = {5, (void *)"usage"}, v = {sizeof(buf), buf};

    ssd_usage_encode(u, buf);
    return mdb_put(txn, ssd->dbi_info, &k, &v, 0);
}

static void ssd_tally_publish(ssd_t *ssd, const ssd_tally_t *t)
{
    pthread_mutex_lock(&ssd->lock);
    ssd->st.puts += t->puts;
    ssd->st.durable_puts += t->durable_puts;
    ssd->st.spills += t->spills;
    ssd->st.deletes += t->deletes;
    ssd->st.evictions += t->evictions;
    ssd->st.evicted_bytes += t->evicted_bytes;
    ssd->st.txns++;
    ssd->usage_pub = ssd->usage;
    pthread_mutex_unlock(&ssd->lock);
}

static void ssd_count_error(ssd_t *ssd, int rc, const ssd_op_t *op)
{
    pthread_mutex_lock(&ssd->lock);
    ssd->st.write_errors++;
    ssd->st.map_full += rc == MDB_MAP_FULL;
    ssd->st.spill_failed += op != NULL && op->type == SSD_OP_SPILL;
    pthread_mutex_unlock(&ssd->lock);
}

static void ssd_report_evictions(ssd_t *ssd, ssd_evicted_t *ev)
{
    if (ssd->params.on_evict != NULL) {
        for (size_t i = 0; i < ev->evicted.n; i++) {
            ssd->params.on_evict(ssd->params.evict_arg, &ev->evicted.v[i].key,
                                 (uint64_t)ev->evicted.v[i].v);
        }
    }
    if (ssd->params.on_usage != NULL) {
        for (size_t i = 0; i < ev->deltas.n; i++) {
            ssd->params.on_usage(ssd->params.usage_arg, &ev->deltas.v[i].key, ev->deltas.v[i].v);
        }
    }
    ssd_evicted_clear(ev);
}

/*
 * Ends a write transaction: commits it when rc is 0 (aborts it otherwise)
 * and, once committed, makes its usage, counts and evictions known. Returns
 * rc or the commit's code; on failure what ev collected is forgotten.
 */
static int w_finish(ssd_t *ssd, MDB_txn *txn, int rc, const ssd_usage_t *u, const ssd_tally_t *t,
                    ssd_evicted_t *ev)
{
    if (rc == 0) {
        rc = mdb_txn_commit(txn);
    } else {
        mdb_txn_abort(txn);
    }
    if (rc != 0) {
        ssd_evicted_clear(ev);
        return rc;
    }
    ssd->usage = *u;
    ssd_tally_publish(ssd, t);
    ssd_report_evictions(ssd, ev);
    return 0;
}

/*
 * Runs ops[0..n) in one write transaction. Returns 0 when it committed (each
 * op->status set), or the LMDB error that stopped it (nothing written).
 */
static int w_batch(ssd_t *ssd, ssd_op_t **ops, size_t n, ssd_evicted_t *ev)
{
    MDB_txn *txn;
    ssd_usage_t u = ssd->usage;
    ssd_tally_t t = {.ev = ev};
    int rc, durable = 0;
    size_t i;

    ssd_evicted_clear(ev);
    for (i = 0; i < n && ops[i]->type == SSD_OP_BARRIER; i++) {
        ops[i]->status = ST_OK;
        durable |= (ops[i]->flags & SSD_DURABLE) != 0;
    }
    if (i == n) {
        /* Only barriers: everything before them is committed already. */
        goto sync;
    }
    rc = mdb_txn_begin(ssd->env, NULL, 0, &txn);
    if (rc != 0) {
        return rc;
    }
    for (i = 0; i < n && rc == 0; i++) {
        ops[i]->status = ST_OK;
        durable |= (ops[i]->flags & SSD_DURABLE) != 0;
        switch (ops[i]->type) {
        case SSD_OP_PUT:
        case SSD_OP_SPILL: rc = w_write(ssd, txn, ops[i], &u, &t); break;
        case SSD_OP_DELETE:
        case SSD_OP_DROP_IFSEQ: rc = w_delete(ssd, txn, ops[i], &u, &t); break;
        case SSD_OP_BARRIER: break;
        }
    }
    if (rc == 0 && u.bytes[SSD_KV] + u.bytes[SSD_IDX] > ssd->params.spill_budget) {
        rc = w_evict(ssd, txn, &u, ssd->params.spill_budget, 0, &t, ev);
    }
    if (rc == 0) {
        rc = w_save_usage(ssd, txn, &u);
    }
    rc = w_finish(ssd, txn, rc, &u, &t, ev);
    if (rc != 0) {
        return rc;
    }
sync:
    if (durable && ssd->params.sync == SSD_SYNC_DURABLE) {
        /* The data pages were synced by the commit; this syncs the meta page. */
        rc = mdb_env_sync(ssd->env, 1);
        if (rc != 0) {
            st_status_t status = ssd_mdb_status(ssd, rc, "sync");

            for (i = 0; i < n; i++) {
                if (ops[i]->flags & SSD_DURABLE) {
                    ops[i]->status = status;
                }
            }
            ssd_count_error(ssd, rc, NULL);
        }
    }
    return 0;
}

/* Frees free_bytes of spilled objects, oldest first, in a transaction of its own. */
static int w_make_room(ssd_t *ssd, uint64_t free_bytes, ssd_evicted_t *ev)
{
    MDB_txn *txn;
    ssd_usage_t u = ssd->usage;
    ssd_tally_t t = {.ev = ev};
    int rc;

    ssd_evicted_clear(ev);
    rc = mdb_txn_begin(ssd->env, NULL, 0, &txn);
    if (rc != 0) {
        return rc;
    }
    rc = w_evict(ssd, txn, &u, 0, free_bytes, &t, ev);
    if (rc == 0) {
        rc = w_save_usage(ssd, txn, &u);
    }
    rc = w_finish(ssd, txn, rc, &u, &t, ev);
    if (rc != 0) {
        return rc;
    }
    /*
     * LMDB reuses the pages a transaction freed only from the second
     * transaction after it (the previous snapshot stays intact), so commit
     * one small transaction more before the retry.
     */
    rc = mdb_txn_begin(ssd->env, NULL, 0, &txn);
    if (rc != 0) {
        return rc;
    }
    rc = w_save_usage(ssd, txn, &u);
    if (rc == 0) {
        rc = mdb_txn_commit(txn);
    } else {
        mdb_txn_abort(txn);
    }
    return rc;
}

static const char *op_name(const ssd_op_t *op)
{
    switch (op->type) {
    case SSD_OP_PUT: return "put";
    case SSD_OP_SPILL: return "spill";
    case SSD_OP_DELETE:
    case SSD_OP_DROP_IFSEQ: return "delete";
    default: return "flush";
    }
}

/*
 * LMDB reports a short write as EIO, and a full disk or a file size limit
 * usually shows up as a short write. When a write of need bytes failed with
 * EIO, this tells the two apart from a real I/O error: it returns ENOSPC
 * when the file system has less than need plus 1 MiB free, EFBIG when the
 * file size limit leaves less than that, and rc otherwise.
 */
static int w_diagnose(ssd_t *ssd, int rc, uint64_t need)
{
    struct statvfs vfs;
    struct rlimit lim;
    struct stat sb;
    char path[4096];

    if (rc != EIO) {
        return rc;
    }
    need += 1u << 20;
    if (statvfs(ssd->dir, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
        return ENOSPC;
    }
    if (getrlimit(RLIMIT_FSIZE, &lim) == 0 && lim.rlim_cur != RLIM_INFINITY &&
        snprintf(path, sizeof(path), "%s/data.mdb", ssd->dir) < (int)sizeof(path) &&
        stat(path, &sb) == 0 && (uint64_t)sb.st_size + need > (uint64_t)lim.rlim_cur) {
        return EFBIG;
    }
    return rc;
}

/* Runs a batch; on failure runs its operations one per transaction. */
static void w_run(ssd_t *ssd, ssd_op_t **ops, size_t n, ssd_evicted_t *ev)
{
    int rc = w_batch(ssd, ops, n, ev);

    if (rc == 0) {
        return;
    }
    if (n > 1) {
        for (size_t i = 0; i < n; i++) {
            w_run(ssd, &ops[i], 1, ev);
        }
        return;
    }
    if (rc == MDB_MAP_FULL && (ops[0]->type == SSD_OP_PUT || ops[0]->type == SSD_OP_SPILL) &&
        ssd->usage.bytes[SSD_KV] + ssd->usage.bytes[SSD_IDX] > 0) {
        /* Cache data gives way to the write: twice its size, then once more. */
        if (w_make_room(ssd, 2 * (ops[0]->length + SSD_HDR_BYTES) + 4 * ssd->page_size, ev) == 0) {
            rc = w_batch(ssd, ops, 1, ev);
            if (rc == 0) {
                return;
            }
        }
    }
    rc = w_diagnose(ssd, rc, ops[0]->length + SSD_HDR_BYTES);
    ssd_count_error(ssd, rc, ops[0]);
    if (rc != MDB_MAP_FULL) {
        ops[0]->status = ssd_mdb_status(ssd, rc, op_name(ops[0]));
    } else {
        char hex[33];

        st_hash_to_hex(&ops[0]->key.id, hex);
        lg_ratelimited(LG_ERROR,
                       "ssd map full, write refused (raise the ssd map size) op=%s kind=%s "
                       "ns=%llu id=%s layer=%u "
                       "length=%zu map_size=%llu",
                       op_name(ops[0]), ssd_kind_name(ops[0]->key.kind),
                       (unsigned long long)ops[0]->key.ns, hex, (unsigned)ops[0]->key.layer,
                       ops[0]->length, (unsigned long long)ssd->params.map_size);
        ops[0]->status = ST_ERR_EXHAUSTED;
    }
}

static void w_periodic(ssd_t *ssd)
{
    uint64_t now = lg_now_ms();

    if (now - ssd->last_reader_check_ms >= ssd->params.reader_check_ms) {
        ssd->last_reader_check_ms = now;
        (void)ssd_reader_check(ssd, NULL);
    }
}

/* How long a batch of durable puts waits for the callers of the last one. */
#define SSD_GROUP_WAIT_US 300

/*
 * Whether the writer should take a batch now (lock held); when not, how
 * long it may sleep (*wait_us). Now: when closing; when a batch is full;
 * when someone waits (a durable put, a flush) and as many waiters are
 * queued as the last batch had, or SSD_GROUP_WAIT_US passed since the first
 * (the callers of the last batch come back together: without the wait, one
 * of them would start a batch alone and the others would wait a whole
 * commit for the next); when only queued writes are there, after linger_ms.
 */
static int w_ready(ssd_t *ssd, uint64_t *wait_us)
{
    uint64_t now, age, linger = (uint64_t)ssd->params.linger_ms * 1000u;

    *wait_us = 1000000;
    if (ssd->stopping) {
        return 1;
    }
    if (ssd->head == NULL || ssd->paused) {
        return 0;
    }
    if (ssd->queued >= ssd->params.batch_max || ssd->queued_payload >= ssd->params.batch_bytes) {
        return 1;
    }
    now = cm_mono_us();
    if (ssd->queued_urgent > 0) {
        age = now - ssd->urgent_since_us;
        if (ssd->queued_urgent >= ssd->last_urgent || age >= SSD_GROUP_WAIT_US) {
            return 1;
        }
        *wait_us = SSD_GROUP_WAIT_US - age;
        return 0;
    }
    age = now - ssd->head_since_us;
    if (age >= linger) {
        return 1;
    }
    *wait_us = linger - age;
    return 0;
}

void *ssd_writer_main(void *arg)
{
    ssd_t *ssd = arg;
    ssd_op_t **ops = ssd->batch_ops;
    ssd_evicted_t ev = {0};

    pthread_mutex_lock(&ssd->lock);
    for (;;) {
        size_t n = 0, w;
        uint64_t bytes = 0, wait_us;
        uint32_t urgent = 0;
        ssd_op_t *finished = NULL, **fin_tail = &finished;

        while (!w_ready(ssd, &wait_us)) {
            struct timespec ts = cm_deadline_us(wait_us);

            pthread_cond_timedwait(&ssd->queue_cv, &ssd->lock, &ts);
            if (wait_us >= 1000000) {
                pthread_mutex_unlock(&ssd->lock);
                w_periodic(ssd);
                pthread_mutex_lock(&ssd->lock);
            }
        }
        if (ssd->head == NULL) {
            break; /* stopping and drained */
        }
        while (ssd->head != NULL && n < ssd->params.batch_max &&
               (n == 0 || bytes + ssd->head->length <= ssd->params.batch_bytes)) {
            ops[n] = ssd->head;
            ssd->head = ops[n]->next;
            bytes += ops[n]->length;
            urgent += ops[n]->waited || (ops[n]->flags & SSD_DURABLE);
            ssd->queued_payload -= ops[n]->length;
            n++;
        }
        ssd->queued_urgent -= urgent;
        ssd->last_urgent = urgent;
        if (ssd->head == NULL) {
            ssd->tail = NULL;
        } else {
            /* What is left has waited long enough. */
            ssd->head_since_us = 0;
            ssd->urgent_since_us = 0;
        }
        pthread_mutex_unlock(&ssd->lock);
        w_run(ssd, ops, n, &ev);
        w_periodic(ssd);
        pthread_mutex_lock(&ssd->lock);
        /*
         * Callbacks first, then the waiters: a flush that returns has seen
         * the done callbacks of everything queued before it.
         */
        w = 0;
        for (size_t i = 0; i < n; i++) {
            ssd_op_t *op = ops[i];

            ssd->queued--;
            if (op->copy != NULL) {
                ssd->queued_bytes -= op->length;
            }
            if (op->waited) {
                ops[w++] = op; /* kept for the second pass; callers own them */
            } else {
                op->next = NULL;
                *fin_tail = op;
                fin_tail = &op->next;
            }
        }
        pthread_cond_broadcast(&ssd->room_cv);
        pthread_mutex_unlock(&ssd->lock);
        while (finished != NULL) {
            ssd_op_t *op = finished;

            finished = op->next;
            if (op->done != NULL) {
                op->done(op->done_arg, &op->key, op->status);
            }
            free(op);
        }
        pthread_mutex_lock(&ssd->lock);
        for (size_t i = 0; i < w; i++) {
            ops[i]->finished = 1; /* the waiter owns the op from here */
        }
        pthread_cond_broadcast(&ssd->done_cv);
    }
    pthread_mutex_unlock(&ssd->lock);
    free(ev.evicted.v);
    free(ev.deltas.v);
    return NULL;
}
