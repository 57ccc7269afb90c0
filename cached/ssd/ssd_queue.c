/*
 * ssd_queue.c - the callers' side of the writer's queue (ssd_writer.c):
 * ssd_submit, which bounds the queue (queue_max operations, queue_bytes of
 * copied payload) and waits for a waited operation, and the write calls of
 * ssd.h that fill an operation for it: ssd_put, ssd_spill,
 * ssd_spill_parts, ssd_delete, ssd_flush and ssd_pause.
 * Payloads are checked and hashed here, in the caller's thread, so that the
 * writer thread spends its time on the transaction.
 */
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include "xxh.h"

#include "log.h"
#include "ssd_internal.h"

st_status_t ssd_submit(ssd_t *ssd, ssd_op_t *op)
{
    st_status_t status = ST_OK;

    pthread_mutex_lock(&ssd->lock);
    for (;;) {
        if (ssd->stopping) {
            status = ST_ERR_UNAVAILABLE;
            break;
        }
        if (ssd->queued < ssd->params.queue_max &&
            (op->copy == NULL || ssd->queued_bytes == 0 ||
             ssd->queued_bytes + op->length <= ssd->params.queue_bytes)) {
            break;
        }
        if (op->flags & SSD_NOWAIT) {
            status = ST_ERR_BUSY;
            break;
        }
        pthread_cond_wait(&ssd->room_cv, &ssd->lock);
    }
    if (status == ST_OK) {
        op->next = NULL;
        if (ssd->tail != NULL) {
            ssd->tail->next = op;
        } else {
            ssd->head = op;
            ssd->head_since_us = cm_mono_us();
        }
        if ((op->waited || (op->flags & SSD_DURABLE)) && ssd->queued_urgent == 0) {
            ssd->urgent_since_us = cm_mono_us();
        }
        ssd->tail = op;
        ssd->queued++;
        ssd->queued_payload += op->length;
        ssd->queued_urgent += op->waited || (op->flags & SSD_DURABLE);
        if (op->copy != NULL) {
            ssd->queued_bytes += op->length;
        }
        pthread_cond_signal(&ssd->queue_cv);
        if (op->waited) {
            while (!op->finished) {
                pthread_cond_wait(&ssd->done_cv, &ssd->lock);
            }
            status = op->status;
        }
    }
    pthread_mutex_unlock(&ssd->lock);
    return status;
}

/* XXH3-64 of head || data, as of one payload. */
static uint64_t ssd_sum_parts(const void *head, size_t head_len, const void *data, size_t length)
{
    XXH3_state_t s;

    if (head_len == 0) {
        return XXH3_64bits(data, length);
    }
    (void)XXH3_64bits_reset(&s);
    (void)XXH3_64bits_update(&s, head, head_len);
    (void)XXH3_64bits_update(&s, data, length);
    return XXH3_64bits_digest(&s);
}

/* Queues an operation that lives on the caller's stack and waits for it
 * (the durable calls); a write's payload is hashed here. */
static st_status_t ssd_submit_waited(ssd_t *ssd, ssd_op_type_t type, unsigned flags,
                                     const ssd_key_t *key, const void *data, size_t length)
{
    ssd_op_t local;

    memset(&local, 0, sizeof(local));
    local.type = type;
    local.flags = flags;
    local.key = *key;
    local.data = data;
    local.length = length;
    if (type != SSD_OP_DELETE) {
        local.checksum = XXH3_64bits(data, length);
    }
    local.waited = 1;
    return ssd_submit(ssd, &local);
}

/* Builds and queues a write; the common part of put and spill. A head
 * (head_len > 0, only with done) goes in front of data. */
static st_status_t ssd_queue_write(ssd_t *ssd, ssd_op_type_t type, const ssd_key_t *key,
                                   const void *head, size_t head_len, const void *data,
                                   size_t length, unsigned flags, ssd_done_fn done, void *done_arg)
{
    ssd_op_t *op;
    st_status_t status;

    if (flags & SSD_DURABLE) {
        return ssd_submit_waited(ssd, type, flags, key, data, length);
    }
    op = malloc(sizeof(*op) + (done == NULL ? length : 0));
    if (op == NULL) {
        lg_ratelimited(LG_ERROR, "ssd out of memory queueing a write length=%zu", length);
        return ST_ERR_NOMEM;
    }
    memset(op, 0, sizeof(*op));
    op->type = type;
    op->flags = flags;
    op->key = *key;
    op->length = head_len + length;
    op->head_len = (uint32_t)head_len;
    if (head_len != 0) {
        memcpy(op->head, head, head_len);
    }
    op->done = done;
    op->done_arg = done_arg;
    /* Hashed here, in the caller's thread, so that the one writer thread
     * spends its time on the transaction. */
    op->checksum = ssd_sum_parts(head, head_len, data, length);
    if (done == NULL) {
        op->copy = op + 1;
        if (length != 0) {
            memcpy(op->copy, data, length);
        }
        op->data = op->copy;
    } else {
        op->data = data;
    }
    status = ssd_submit(ssd, op);
    if (status != ST_OK) {
        free(op);
    }
    return status;
}

static st_status_t ssd_check_write(ssd_t *ssd, const ssd_key_t *key, const void *data,
                                   size_t length, int spill)
{
    st_status_t status = ssd_check_pid(ssd);

    if (status != ST_OK) {
        return status;
    }
    if (key == NULL || (data == NULL && length != 0)) {
        lg_error("ssd write refused: NULL key or data length=%zu", length);
        return ST_ERR_INVALID;
    }
    if (!ssd_kind_valid(key->kind) || ssd_kind_spilled(key->kind) != spill) {
        lg_error("ssd %s refused: wrong kind kind=%s(%u), expected %s", spill ? "spill" : "put",
                 ssd_kind_name(key->kind), (unsigned)key->kind,
                 spill ? "KV or IDX" : "KDA or SESSION");
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

st_status_t ssd_put(ssd_t *ssd, const ssd_key_t *key, const void *data, size_t length,
                    unsigned flags, ssd_done_fn done, void *done_arg)
{
    st_status_t status = ssd_check_write(ssd, key, data, length, 0);

    if (status != ST_OK) {
        return status;
    }
    return ssd_queue_write(ssd, SSD_OP_PUT, key, NULL, 0, data, length, flags, done, done_arg);
}

st_status_t ssd_put_parts(ssd_t *ssd, const ssd_key_t *key, const void *head, size_t head_len,
                          const void *data, size_t length, unsigned flags)
{
    st_status_t status = ssd_check_write(ssd, key, data, length, 0);

    if (status == ST_OK &&
        (head == NULL || head_len == 0 || head_len > SSD_HEAD_MAX || (flags & SSD_DURABLE))) {
        lg_error("ssd put refused: a put in parts needs a head of 1..%d bytes and is queued "
                 "(not SSD_DURABLE) head_len=%zu flags=%#x",
                 SSD_HEAD_MAX, head_len, flags);
        status = ST_ERR_INVALID;
    }
    if (status != ST_OK) {
        return status;
    }
    return ssd_queue_write(ssd, SSD_OP_PUT, key, head, head_len, data, length, flags, NULL, NULL);
}

static st_status_t ssd_spill_queue(ssd_t *ssd, const ssd_key_t *key, const void *head,
                                   size_t head_len, const void *data, size_t length, unsigned flags,
                                   ssd_done_fn done, void *done_arg)
{
    st_status_t status = ssd_check_write(ssd, key, data, length, 1);

    if (status == ST_OK && head_len > 0 &&
        (head == NULL || head_len > SSD_HEAD_MAX || done == NULL)) {
        lg_error("ssd spill refused: a head needs 1..%d bytes and a done callback head_len=%zu",
                 SSD_HEAD_MAX, head_len);
        status = ST_ERR_INVALID;
    }
    if (status == ST_OK && head_len + length > ssd->params.spill_budget) {
        lg_ratelimited(LG_WARN,
                       "ssd spill refused: larger than the budget length=%zu "
                       "spill_budget=%llu",
                       head_len + length, (unsigned long long)ssd->params.spill_budget);
        status = ST_ERR_EXHAUSTED;
    }
    if (status == ST_OK) {
        status = ssd_queue_write(ssd, SSD_OP_SPILL, key, head, head_len, data, length,
                                 flags & ~SSD_DURABLE, done, done_arg);
    }
    if (status != ST_OK && status != ST_ERR_INVALID) {
        pthread_mutex_lock(&ssd->lock);
        ssd->st.spill_failed++;
        pthread_mutex_unlock(&ssd->lock);
    }
    return status;
}

st_status_t ssd_spill(ssd_t *ssd, const ssd_key_t *key, const void *data, size_t length,
                      unsigned flags, ssd_done_fn done, void *done_arg)
{
    return ssd_spill_queue(ssd, key, NULL, 0, data, length, flags, done, done_arg);
}

st_status_t ssd_spill_parts(ssd_t *ssd, const ssd_key_t *key, const void *head, size_t head_len,
                            const void *data, size_t length, unsigned flags, ssd_done_fn done,
                            void *done_arg)
{
    return ssd_spill_queue(ssd, key, head, head_len, data, length, flags, done, done_arg);
}

st_status_t ssd_delete(ssd_t *ssd, const ssd_key_t *key, unsigned flags, ssd_done_fn done,
                       void *done_arg)
{
    st_status_t status = ssd_check_pid(ssd);
    ssd_op_t *op;

    if (status != ST_OK) {
        return status;
    }
    if (key == NULL || !ssd_kind_valid(key->kind)) {
        lg_error("ssd delete refused: bad key kind=%u", key != NULL ? (unsigned)key->kind : 0u);
        return ST_ERR_INVALID;
    }
    if (flags & SSD_DURABLE) {
        return ssd_submit_waited(ssd, SSD_OP_DELETE, SSD_DURABLE, key, NULL, 0);
    }
    op = calloc(1, sizeof(*op));
    if (op == NULL) {
        return ST_ERR_NOMEM;
    }
    op->type = SSD_OP_DELETE;
    op->flags = flags;
    op->key = *key;
    op->done = done;
    op->done_arg = done_arg;
    status = ssd_submit(ssd, op);
    if (status != ST_OK) {
        free(op);
    }
    return status;
}

st_status_t ssd_flush(ssd_t *ssd, int durable)
{
    st_status_t status = ssd_check_pid(ssd);
    ssd_op_t local;

    if (status != ST_OK) {
        return status;
    }
    memset(&local, 0, sizeof(local));
    local.type = SSD_OP_BARRIER;
    local.flags = durable ? SSD_DURABLE : 0;
    local.waited = 1;
    return ssd_submit(ssd, &local);
}

void ssd_pause(ssd_t *ssd, int paused)
{
    if (ssd_check_pid(ssd) != ST_OK) {
        return;
    }
    pthread_mutex_lock(&ssd->lock);
    ssd->paused = paused != 0;
    pthread_cond_broadcast(&ssd->queue_cv);
    pthread_mutex_unlock(&ssd->lock);
}
