/*
 * op.c - the operations every backend shares: the pool of op records, their
 * completion and deferred callbacks, progress, the bounds checks before a get
 * or put is posted, and waiting for events.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "stt_internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define STT_OPS_PER_CHUNK 256

/* --- the operation pool ------------------------------------------------- */

static stt_op_t *stt_op_alloc(tp_transport_t *tp)
{
    if (stt_list_empty(&tp->free_ops)) {
        void **chunks = realloc(tp->op_chunks, (tp->n_op_chunks + 1) * sizeof(*chunks));
        if (chunks == NULL) {
            return NULL;
        }
        tp->op_chunks = chunks;
        stt_op_t *ops = calloc(STT_OPS_PER_CHUNK, sizeof(*ops));
        if (ops == NULL) {
            return NULL;
        }
        chunks[tp->n_op_chunks++] = ops;
        for (size_t i = 0; i < STT_OPS_PER_CHUNK; i++) {
            stt_list_push(&tp->free_ops, &ops[i].link);
        }
    }
    stt_link_t *node = tp->free_ops.next;
    stt_list_del(node);
    stt_op_t *op = stt_container_of(node, stt_op_t, link);
    memset(op, 0, offsetof(stt_op_t, link));
    return op;
}

static void stt_op_release(tp_transport_t *tp, stt_op_t *op)
{
    stt_list_del(&op->link);
    stt_list_push(&tp->free_ops, &op->link);
}

void stt_op_complete(stt_op_t *op, st_status_t status)
{
    tp_transport_t *tp;
    if (op->orphaned) {
        /* Its endpoint closed first and its callback ran then; the
         * library is done with the record now. */
        tp = (tp_transport_t *)op->user;
        tp->n_orphaned--;
        stt_op_release(tp, op);
        return;
    }
    tp = op->ep->tp;
    op->status = status;
    op->ep->n_inflight--;
    op->ep = NULL;
    stt_list_del(&op->link);
    stt_list_push(&tp->done, &op->link);
}

int stt_drain(tp_transport_t *tp)
{
    int n = 0;
    if (tp->draining) {
        return 0;
    }
    tp->draining = true;
    while (!stt_list_empty(&tp->done)) {
        stt_op_t *op = stt_container_of(tp->done.next, stt_op_t, link);
        tp_cb_t cb = op->cb;
        void *user = op->user;
        st_status_t status = op->status;
        stt_op_release(tp, op);
        tp->n_inflight--;
        n++;
        if (cb != NULL) {
            cb(user, status);
        }
    }
    tp->draining = false;
    return n;
}

void stt_copy(void *dst, const void *src, size_t len)
{
#if defined(__SSE2__)
    if (len >= STT_STREAM_MIN) {
        uint8_t *d = dst;
        const uint8_t *s = src;
        size_t head = (16 - ((uintptr_t)d & 15)) & 15, n;

        memcpy(d, s, head);
        d += head;
        s += head;
        len -= head;
        n = len & ~(size_t)63;
        for (size_t i = 0; i < n; i += 64) {
            __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
            __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 16));
            __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 32));
            __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 48));

            _mm_stream_si128((__m128i *)(void *)(d + i), a);
            _mm_stream_si128((__m128i *)(void *)(d + i + 16), b);
            _mm_stream_si128((__m128i *)(void *)(d + i + 32), c);
            _mm_stream_si128((__m128i *)(void *)(d + i + 48), e);
        }
        memcpy(d + n, s + n, len - n);
        _mm_sfence(); /* the streamed bytes are visible before the completion is */
        return;
    }
#endif
    memcpy(dst, src, len);
}

int stt_progress_all(tp_transport_t *tp)
{
    int n = tp->ops->progress(tp);
    if (n < 0) {
        return n;
    }
    n += stt_drain(tp);
    if (!stt_list_empty(&tp->msgs)) {
        n += stt_msg_drain(tp);
    }
    return n;
}

int tp_progress(tp_transport_t *tp)
{
    return stt_progress_all(tp);
}

size_t tp_inflight(const tp_transport_t *tp)
{
    return tp->n_inflight;
}

size_t tp_orphaned(const tp_transport_t *tp)
{
    return tp->n_orphaned;
}

/* --- operations --------------------------------------------------------- */

/* The checks every get and put passes before anything is posted. */
static st_status_t stt_check(tp_ep_t *ep, bool is_put, void *local, size_t len, tp_mem_t *local_mem,
                             uint64_t remote_addr, tp_rkey_t *rkey)
{
    const char *what = is_put ? "put" : "get";
    if (len == 0 || local == NULL || local_mem == NULL || rkey == NULL) {
        lg_error("transport %s refused: len=%zu local=%p local_mem=%p rkey=%p", what, len, local,
                 (void *)local_mem, (void *)rkey);
        return ST_ERR_INVALID;
    }
    uintptr_t lo = (uintptr_t)local, mlo = (uintptr_t)local_mem->addr;
    if (lo < mlo || len > local_mem->len || lo - mlo > local_mem->len - len) {
        lg_error("transport %s refused: local buffer outside its region local=%p len=%zu "
                 "region=%p region_len=%zu",
                 what, local, len, local_mem->addr, local_mem->len);
        return ST_ERR_INVALID;
    }
    if (remote_addr < rkey->base || len > rkey->len || remote_addr - rkey->base > rkey->len - len) {
        lg_error("transport %s refused: remote range outside the peer's region "
                 "remote=0x%llx len=%zu region=0x%llx region_len=%zu",
                 what, (unsigned long long)remote_addr, len, (unsigned long long)rkey->base,
                 rkey->len);
        return ST_ERR_INVALID;
    }
    if (rkey->ep != ep) {
        lg_error("transport %s refused: remote key belongs to another endpoint", what);
        return ST_ERR_INVALID;
    }
    if (ep->error != ST_OK) {
        lg_warn_ratelimited("transport %s refused: endpoint failed earlier status=%s", what,
                            st_status_name(ep->error));
        return ep->error;
    }
    if (ep->closing) {
        lg_warn_ratelimited("transport %s refused: endpoint is closing", what);
        return ST_ERR_CANCELLED;
    }
    return ST_OK;
}

static st_status_t stt_post(tp_ep_t *ep, bool is_put, void *local, size_t len, tp_mem_t *local_mem,
                            uint64_t remote_addr, tp_rkey_t *rkey, tp_cb_t cb, void *user)
{
    tp_transport_t *tp = ep->tp;
    st_status_t chk = stt_check(ep, is_put, local, len, local_mem, remote_addr, rkey);
    if (chk != ST_OK) {
        return chk;
    }
    stt_op_t *op = stt_op_alloc(tp);
    if (op == NULL) {
        return ST_ERR_NOMEM;
    }
    op->ep = ep;
    op->cb = cb;
    op->user = user;
    op->is_put = is_put;
    op->local = local;
    op->len = len;
    op->local_mem = local_mem;
    op->remote_addr = remote_addr;
    op->rkey = rkey;
    stt_list_del(&op->link);
    stt_list_push(&tp->inflight, &op->link);
    ep->n_inflight++;
    tp->n_inflight++;
    st_status_t st = tp->ops->post(op);
    if (st != ST_OK) {
        ep->n_inflight--;
        tp->n_inflight--;
        stt_op_release(tp, op);
    }
    return st;
}

st_status_t tp_get_now(tp_ep_t *ep, void *local, size_t len, tp_mem_t *local_mem,
                       uint64_t remote_addr, tp_rkey_t *rkey)
{
    st_status_t st = stt_check(ep, false, local, len, local_mem, remote_addr, rkey);
    if (st != ST_OK) {
        return st;
    }
    if (ep->tp->ops->get_now == NULL) {
        return ST_ERR_UNSUPPORTED;
    }
    return ep->tp->ops->get_now(rkey, local, remote_addr, len);
}

st_status_t tp_get(tp_ep_t *ep, void *local, size_t len, tp_mem_t *local_mem, uint64_t remote_addr,
                   tp_rkey_t *rkey, tp_cb_t cb, void *user)
{
    return stt_post(ep, false, local, len, local_mem, remote_addr, rkey, cb, user);
}

st_status_t tp_put(tp_ep_t *ep, const void *local, size_t len, tp_mem_t *local_mem,
                   uint64_t remote_addr, tp_rkey_t *rkey, tp_cb_t cb, void *user)
{
    return stt_post(ep, true, (void *)local, len, local_mem, remote_addr, rkey, cb, user);
}

/* --- waiting ------------------------------------------------------------ */

st_status_t tp_event_fd(tp_transport_t *tp, int *fd_p)
{
    return tp->ops->event_fd(tp, fd_p);
}

st_status_t tp_arm(tp_transport_t *tp)
{
    if (!stt_list_empty(&tp->done)) {
        return ST_ERR_BUSY;
    }
    return tp->ops->arm(tp);
}

st_status_t tp_wait(tp_transport_t *tp, int timeout_ms)
{
    if (!stt_list_empty(&tp->done) || timeout_ms == 0) {
        return ST_OK;
    }
    int fd;
    if (tp->ops->event_fd(tp, &fd) == ST_OK) {
        st_status_t st = tp->ops->arm(tp);
        if (st == ST_ERR_BUSY) {
            return ST_OK;
        }
        if (st != ST_OK) {
            return st;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, timeout_ms) < 0 && errno != EINTR) {
            lg_error("transport wait failed backend=%s call=poll errno=%d", tp->ops->name, errno);
            return ST_ERR_TRANSPORT;
        }
        return ST_OK;
    }
    /* No event fd: drive the library (no callbacks) in short sleeps. */
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : stt_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        int n = tp->ops->progress(tp);
        if (n != 0 || !stt_list_empty(&tp->done)) {
            return n < 0 ? (st_status_t)n : ST_OK;
        }
        if (stt_now_ms() >= deadline) {
            return ST_OK;
        }
        struct timespec ts = {.tv_sec = 0, .tv_nsec = 50000};
        nanosleep(&ts, NULL);
    }
}
