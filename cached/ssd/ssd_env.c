/*
 * ssd_env.c - the LMDB environment of the SSD tier: open and close, error
 * mapping, stale readers, counters, and the recovery iteration.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "log.h"
#include "ssd_internal.h"

#define SSD_MAX_DBS      8
#define SSD_ITER_CHUNK   65536
#define SSD_DEF_MAP      (64ull << 30)
#define SSD_MIN_MAP      (1ull << 20)
#define SSD_USAGE_KEY    "usage"
#define SSD_USAGE_KEYLEN 5

uint64_t ssd_wall_us(void)
{
    return cm_real_us();
}

st_status_t ssd_check_pid(const ssd_t *ssd)
{
    if (ssd == NULL) {
        return ST_ERR_INVALID;
    }
    if (getpid() != ssd->pid) {
        lg_error("ssd environment used after fork dir=%s opener_pid=%d pid=%d", ssd->dir,
                 (int)ssd->pid, (int)getpid());
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

st_status_t ssd_mdb_status(ssd_t *ssd, int rc, const char *what)
{
    const char *dir = ssd != NULL ? ssd->dir : "?";

    switch (rc) {
    case 0: return ST_OK;
    case MDB_NOTFOUND: return ST_ERR_NOT_FOUND;
    case MDB_MAP_FULL:
        lg_ratelimited(LG_ERROR,
                       "ssd map full, write refused op=%s dir=%s map_size=%llu (raise the "
                       "ssd map size)",
                       what, dir, (unsigned long long)(ssd != NULL ? ssd->params.map_size : 0));
        return ST_ERR_EXHAUSTED;
    case ENOSPC:
    case EDQUOT:
    case EFBIG:
        lg_ratelimited(
            LG_ERROR,
            "ssd no space, write refused (disk full or file size limit) op=%s dir=%s err=\"%s\"",
            what, dir, mdb_strerror(rc));
        return ST_ERR_EXHAUSTED;
    case MDB_TXN_FULL:
    case MDB_READERS_FULL:
    case MDB_DBS_FULL:
        lg_ratelimited(LG_ERROR, "ssd limit reached op=%s dir=%s err=\"%s\"", what, dir,
                       mdb_strerror(rc));
        return ST_ERR_EXHAUSTED;
    case ENOMEM: lg_error("ssd out of memory op=%s dir=%s", what, dir); return ST_ERR_NOMEM;
    case MDB_CORRUPTED:
    case MDB_PAGE_NOTFOUND:
        lg_ratelimited(LG_ERROR, "ssd database damaged op=%s dir=%s err=\"%s\"", what, dir,
                       mdb_strerror(rc));
        return ST_ERR_CORRUPT;
    default:
        lg_ratelimited(LG_ERROR, "ssd i/o error op=%s dir=%s err=\"%s\"", what, dir,
                       mdb_strerror(rc));
        return ST_ERR_IO;
    }
}

static st_status_t ssd_params_fill(const ssd_params_t *in, ssd_params_t *out)
{
    if (in == NULL || in->dir == NULL || in->dir[0] == '\0') {
        lg_error("ssd open refused: no data directory given");
        return ST_ERR_INVALID;
    }
    *out = *in;
    if (out->map_size == 0) {
        out->map_size = SSD_DEF_MAP;
    }
    if (out->map_size < SSD_MIN_MAP) {
        lg_error("ssd open refused: map size too small map_size=%llu min=%llu",
                 (unsigned long long)out->map_size, (unsigned long long)SSD_MIN_MAP);
        return ST_ERR_INVALID;
    }
    if (out->spill_budget == 0) {
        out->spill_budget = out->map_size / 2;
    }
    if (out->sync != SSD_SYNC_DURABLE && out->sync != SSD_SYNC_NONE) {
        lg_error("ssd open refused: unknown sync mode sync=%d", (int)out->sync);
        return ST_ERR_INVALID;
    }
    if (out->max_readers == 0) {
        out->max_readers = 256;
    }
    if (out->queue_max == 0) {
        out->queue_max = 65536;
    }
    if (out->queue_bytes == 0) {
        out->queue_bytes = 256ull << 20;
    }
    if (out->batch_bytes == 0) {
        out->batch_bytes = 64ull << 20;
    }
    if (out->batch_max == 0) {
        out->batch_max = 4096;
    }
    if (out->reader_check_ms == 0) {
        out->reader_check_ms = 10000;
    }
    if (out->linger_ms == 0) {
        out->linger_ms = 5;
    }
    return ST_OK;
}

/* Opens the named tables and reads (or creates) the usage record. */
static st_status_t ssd_open_tables(ssd_t *ssd)
{
    MDB_txn *txn;
    MDB_val k = {SSD_USAGE_KEYLEN, (void *)SSD_USAGE_KEY}, v;
    uint8_t buf[SSD_USAGE_BYTES];
    st_status_t status;
    int rc;

    rc = mdb_txn_begin(ssd->env, NULL, 0, &txn);
    if (rc != 0) {
        return ssd_mdb_status(ssd, rc, "open");
    }
    if ((rc = mdb_dbi_open(txn, "durable", MDB_CREATE, &ssd->dbi_durable)) != 0 ||
        (rc = mdb_dbi_open(txn, "spill", MDB_CREATE, &ssd->dbi_spill)) != 0 ||
        (rc = mdb_dbi_open(txn, "lru", MDB_CREATE, &ssd->dbi_lru)) != 0 ||
        (rc = mdb_dbi_open(txn, "meta", MDB_CREATE, &ssd->dbi_meta)) != 0 ||
        (rc = mdb_dbi_open(txn, "info", MDB_CREATE, &ssd->dbi_info)) != 0) {
        mdb_txn_abort(txn);
        return ssd_mdb_status(ssd, rc, "open tables");
    }
    rc = mdb_get(txn, ssd->dbi_info, &k, &v);
    if (rc == 0) {
        status = ssd_usage_decode(v.mv_data, v.mv_size, &ssd->usage);
        if (status != ST_OK) {
            mdb_txn_abort(txn);
            lg_error("ssd usage record unreadable dir=%s size=%zu", ssd->dir, v.mv_size);
            return ST_ERR_CORRUPT;
        }
    } else if (rc == MDB_NOTFOUND) {
        memset(&ssd->usage, 0, sizeof(ssd->usage));
        ssd_usage_encode(&ssd->usage, buf);
        v.mv_size = sizeof(buf);
        v.mv_data = buf;
        rc = mdb_put(txn, ssd->dbi_info, &k, &v, 0);
    }
    if (rc == 0) {
        rc = mdb_txn_commit(txn);
    } else {
        mdb_txn_abort(txn);
    }
    if (rc != 0) {
        return ssd_mdb_status(ssd, rc, "open tables");
    }
    ssd->usage_pub = ssd->usage;
    return ST_OK;
}

static void ssd_free(ssd_t *ssd)
{
    if (ssd->env != NULL) {
        mdb_env_close(ssd->env);
    }
    free(ssd->batch_ops);
    free(ssd->dir);
    free(ssd);
}

st_status_t ssd_open(const ssd_params_t *params, ssd_t **ssd_p)
{
    ssd_t *ssd;
    st_status_t status;
    unsigned flags;
    MDB_stat mst;
    MDB_envinfo info;
    int rc, dead = 0;

    if (ssd_p == NULL) {
        return ST_ERR_INVALID;
    }
    ssd = calloc(1, sizeof(*ssd));
    if (ssd == NULL) {
        lg_error("ssd open: out of memory");
        return ST_ERR_NOMEM;
    }
    status = ssd_params_fill(params, &ssd->params);
    if (status != ST_OK) {
        free(ssd);
        return status;
    }
    ssd->dir = strdup(params->dir);
    if (ssd->dir == NULL) {
        free(ssd);
        return ST_ERR_NOMEM;
    }
    ssd->params.dir = ssd->dir;
    ssd->pid = getpid();

    if (mkdir(ssd->dir, 0750) != 0 && errno != EEXIST) {
        lg_error("ssd cannot create data directory path=%s err=\"%s\"", ssd->dir, strerror(errno));
        status = ST_ERR_IO;
        goto err_free;
    }
    rc = mdb_env_create(&ssd->env);
    if (rc != 0) {
        status = ssd_mdb_status(ssd, rc, "env create");
        goto err_free;
    }
    flags = MDB_NOTLS | (ssd->params.sync == SSD_SYNC_NONE ? MDB_NOSYNC : MDB_NOMETASYNC);
    if ((rc = mdb_env_set_mapsize(ssd->env, (size_t)ssd->params.map_size)) != 0 ||
        (rc = mdb_env_set_maxreaders(ssd->env, ssd->params.max_readers)) != 0 ||
        (rc = mdb_env_set_maxdbs(ssd->env, SSD_MAX_DBS)) != 0) {
        status = ssd_mdb_status(ssd, rc, "env setup");
        goto err_free;
    }
    rc = mdb_env_open(ssd->env, ssd->dir, flags, 0640);
    if (rc != 0) {
        lg_error("ssd cannot open environment path=%s err=\"%s\"", ssd->dir, mdb_strerror(rc));
        status = rc == ENOMEM ? ST_ERR_NOMEM : ST_ERR_IO;
        goto err_free;
    }
    rc = mdb_reader_check(ssd->env, &dead);
    if (rc != 0) {
        status = ssd_mdb_status(ssd, rc, "reader check");
        goto err_free;
    }
    if (dead > 0) {
        lg_warn("ssd cleared stale readers dir=%s count=%d", ssd->dir, dead);
        ssd->st.stale_readers += (uint64_t)dead;
    }
    status = ssd_open_tables(ssd);
    if (status != ST_OK) {
        goto err_free;
    }
    mdb_env_stat(ssd->env, &mst);
    mdb_env_info(ssd->env, &info);
    ssd->page_size = mst.ms_psize;
    ssd->params.map_size = info.me_mapsize;

    ssd->batch_ops = calloc(ssd->params.batch_max, sizeof(*ssd->batch_ops));
    if (ssd->batch_ops == NULL) {
        lg_error("ssd open: out of memory dir=%s", ssd->dir);
        status = ST_ERR_NOMEM;
        goto err_free;
    }
    pthread_mutex_init(&ssd->lock, NULL);
    pthread_mutex_init(&ssd->rtxn_lock, NULL);
    pthread_cond_init(&ssd->queue_cv, NULL);
    pthread_cond_init(&ssd->room_cv, NULL);
    pthread_cond_init(&ssd->done_cv, NULL);
    ssd->last_reader_check_ms = lg_now_ms();
    rc = pthread_create(&ssd->writer, NULL, ssd_writer_main, ssd);
    if (rc != 0) {
        lg_error("ssd cannot start writer thread dir=%s err=\"%s\"", ssd->dir, strerror(rc));
        status = rc == EAGAIN ? ST_ERR_EXHAUSTED : ST_ERR_INTERNAL;
        goto err_sync;
    }
    ssd->writer_started = 1;
    lg_info("ssd opened dir=%s map_size=%llu spill_budget=%llu sync=%s objects=%llu", ssd->dir,
            (unsigned long long)ssd->params.map_size, (unsigned long long)ssd->params.spill_budget,
            ssd->params.sync == SSD_SYNC_NONE ? "none" : "durable",
            (unsigned long long)(ssd->usage.objects[1] + ssd->usage.objects[2] +
                                 ssd->usage.objects[3] + ssd->usage.objects[4]));
    *ssd_p = ssd;
    return ST_OK;

err_sync:
    pthread_mutex_destroy(&ssd->rtxn_lock);
    pthread_cond_destroy(&ssd->done_cv);
    pthread_cond_destroy(&ssd->room_cv);
    pthread_cond_destroy(&ssd->queue_cv);
    pthread_mutex_destroy(&ssd->lock);
err_free:
    ssd_free(ssd);
    return status;
}

void ssd_close(ssd_t *ssd)
{
    if (ssd == NULL) {
        return;
    }
    if (ssd_check_pid(ssd) != ST_OK) {
        /* A forked child must not touch the parent's environment. */
        return;
    }
    pthread_mutex_lock(&ssd->lock);
    ssd->stopping = 1;
    ssd->paused = 0;
    pthread_cond_broadcast(&ssd->queue_cv);
    pthread_cond_broadcast(&ssd->room_cv);
    pthread_mutex_unlock(&ssd->lock);
    if (ssd->writer_started) {
        pthread_join(ssd->writer, NULL);
    }
    if (ssd->params.sync == SSD_SYNC_DURABLE) {
        mdb_env_sync(ssd->env, 1);
    }
    while (ssd->rtxn_n > 0) {
        mdb_txn_abort(ssd->rtxn_pool[--ssd->rtxn_n]);
    }
    pthread_mutex_destroy(&ssd->rtxn_lock);
    pthread_cond_destroy(&ssd->done_cv);
    pthread_cond_destroy(&ssd->room_cv);
    pthread_cond_destroy(&ssd->queue_cv);
    pthread_mutex_destroy(&ssd->lock);
    lg_info("ssd closed dir=%s", ssd->dir);
    ssd_free(ssd);
}

st_status_t ssd_reader_check(ssd_t *ssd, int *cleared_p)
{
    int dead = 0, rc;
    st_status_t status = ssd_check_pid(ssd);

    if (status != ST_OK) {
        return status;
    }
    rc = mdb_reader_check(ssd->env, &dead);
    if (rc != 0) {
        return ssd_mdb_status(ssd, rc, "reader check");
    }
    if (dead > 0) {
        lg_warn("ssd cleared stale readers dir=%s count=%d", ssd->dir, dead);
        pthread_mutex_lock(&ssd->lock);
        ssd->st.stale_readers += (uint64_t)dead;
        pthread_mutex_unlock(&ssd->lock);
    }
    if (cleared_p != NULL) {
        *cleared_p = dead;
    }
    return ST_OK;
}

void ssd_stats(ssd_t *ssd, ssd_stats_t *stats)
{
    MDB_envinfo info;

    memset(stats, 0, sizeof(*stats));
    if (ssd_check_pid(ssd) != ST_OK) {
        return;
    }
    pthread_mutex_lock(&ssd->lock);
    *stats = ssd->st;
    for (int k = 0; k < SSD_KIND_MAX_; k++) {
        stats->objects[k] = ssd->usage_pub.objects[k];
        stats->bytes[k] = ssd->usage_pub.bytes[k];
    }
    pthread_mutex_unlock(&ssd->lock);
    stats->gets = atomic_load(&ssd->gets);
    stats->misses = atomic_load(&ssd->misses);
    stats->corrupt = atomic_load(&ssd->corrupt);
    stats->promotions = atomic_load(&ssd->promotions);
    stats->spill_bytes = stats->bytes[SSD_KV] + stats->bytes[SSD_IDX];
    stats->spill_budget = ssd->params.spill_budget;
    mdb_env_info(ssd->env, &info);
    stats->map_size = info.me_mapsize;
    stats->map_used = ((uint64_t)info.me_last_pgno + 1) * ssd->page_size;
}

/* Queues the deletion of a key whose metadata failed its check. */
static void ssd_drop_raw(ssd_t *ssd, const ssd_key_t *key)
{
    ssd_op_t *op = calloc(1, sizeof(*op));

    if (op == NULL) {
        return;
    }
    op->type = SSD_OP_DELETE;
    op->flags = SSD_NOWAIT;
    op->key = *key;
    if (ssd_submit(ssd, op) != ST_OK) {
        free(op);
    }
}

st_status_t ssd_iterate(ssd_t *ssd, ssd_iter_fn fn, void *arg, uint64_t *count_p)
{
    MDB_txn *txn = NULL;
    MDB_cursor *cur = NULL;
    MDB_val k, v;
    uint8_t last[SSD_KEY_BYTES];
    int have_last = 0, stop = 0, rc;
    uint64_t count = 0, t0 = lg_now_ms();
    st_status_t status = ssd_check_pid(ssd);

    if (status != ST_OK) {
        return status;
    }
    if (fn == NULL) {
        return ST_ERR_INVALID;
    }
    while (!stop) {
        rc = txn == NULL ? mdb_txn_begin(ssd->env, NULL, MDB_RDONLY, &txn) : mdb_txn_renew(txn);
        if (rc == 0) {
            rc = mdb_cursor_open(txn, ssd->dbi_meta, &cur);
        }
        if (rc != 0) {
            status = ssd_mdb_status(ssd, rc, "iterate");
            break;
        }
        if (have_last) {
            k.mv_size = sizeof(last);
            k.mv_data = last;
            rc = mdb_cursor_get(cur, &k, &v, MDB_SET_RANGE);
            if (rc == 0 && k.mv_size == sizeof(last) &&
                memcmp(k.mv_data, last, sizeof(last)) == 0) {
                rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
            }
        } else {
            rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST);
        }
        for (int n = 0; rc == 0 && n < SSD_ITER_CHUNK && !stop; n++) {
            ssd_key_t key;
            ssd_hdr_t hdr;
            ssd_meta_t meta;

            if (k.mv_size != SSD_KEY_BYTES || ssd_key_decode(k.mv_data, &key) != ST_OK) {
                atomic_fetch_add(&ssd->corrupt, 1);
                lg_warn_ratelimited("ssd metadata key malformed dir=%s size=%zu", ssd->dir,
                                    k.mv_size);
            } else if (ssd_hdr_decode(&key, v.mv_data, v.mv_size, &hdr) != ST_OK) {
                atomic_fetch_add(&ssd->corrupt, 1);
                lg_warn_ratelimited("ssd metadata corrupt, object dropped dir=%s kind=%s "
                                    "ns=%llu layer=%u",
                                    ssd->dir, ssd_kind_name(key.kind), (unsigned long long)key.ns,
                                    (unsigned)key.layer);
                ssd_drop_raw(ssd, &key);
            } else {
                meta.length = hdr.length;
                meta.checksum = hdr.checksum;
                meta.seq = hdr.seq;
                meta.created_us = hdr.created_us;
                meta.flags = hdr.flags;
                count++;
                stop = fn(arg, &key, &meta) != 0;
            }
            if (k.mv_size == SSD_KEY_BYTES) {
                memcpy(last, k.mv_data, sizeof(last));
                have_last = 1;
            }
            rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT);
        }
        mdb_cursor_close(cur);
        cur = NULL;
        mdb_txn_reset(txn);
        if (rc == MDB_NOTFOUND) {
            break;
        }
        if (rc != 0) {
            status = ssd_mdb_status(ssd, rc, "iterate");
            break;
        }
    }
    if (txn != NULL) {
        mdb_txn_abort(txn);
    }
    if (status == ST_OK) {
        lg_info("ssd recovery iteration done dir=%s objects=%llu ms=%llu stopped_early=%d",
                ssd->dir, (unsigned long long)count, (unsigned long long)(lg_now_ms() - t0), stop);
    }
    if (count_p != NULL) {
        *count_p = count;
    }
    return status;
}
