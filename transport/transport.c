/*
 * transport.c - dispatch to the backend, and what every backend shares:
 * the address and remote-key envelopes, bounds checks, the operation pool,
 * deferred callbacks, flush, close and teardown order.
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "stt_internal.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

/* Envelopes: little-endian header, then the backend's bytes. */
#define STT_ADDR_MAGIC     0x41545453u /* "STTA" */
#define STT_RKEY_MAGIC     0x4b545453u /* "STTK" */
#define STT_WIRE_VERSION   1
#define STT_ADDR_HDR_LEN   24 /* magic, version, backend, 2 spare, len, 4 spare, checksum */
#define STT_RKEY_HDR_LEN   40 /* as above, then base and length before the checksum */
#define STT_OPS_PER_CHUNK  256
#define STT_CLOSE_FLUSH_MS 2000

uint64_t stt_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void stt_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static void stt_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static uint32_t stt_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static uint64_t stt_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

/* The checksum covers the header (checksum field excluded) and the payload. */
static uint64_t stt_envelope_sum(const uint8_t *hdr, size_t hdr_len, const void *payload,
                                 size_t len)
{
    XXH3_state_t state;
    XXH3_64bits_reset(&state);
    XXH3_64bits_update(&state, hdr, hdr_len - 8);
    XXH3_64bits_update(&state, payload, len);
    return XXH3_64bits_digest(&state);
}

static st_status_t stt_envelope_wrap(uint32_t magic, st_transport_backend_t backend,
                                     const void *payload, size_t len, uint64_t base,
                                     uint64_t region_len, uint8_t **blob_p, size_t *blob_len_p)
{
    size_t hdr_len = magic == STT_RKEY_MAGIC ? STT_RKEY_HDR_LEN : STT_ADDR_HDR_LEN;
    if (len > UINT32_MAX) {
        st_error("transport blob too large len=%zu", len);
        return ST_ERR_INVALID;
    }
    uint8_t *blob = malloc(hdr_len + len);
    if (blob == NULL) {
        return ST_ERR_NOMEM;
    }
    memset(blob, 0, hdr_len);
    stt_put_u32(blob, magic);
    blob[4] = STT_WIRE_VERSION;
    blob[5] = (uint8_t)backend;
    stt_put_u32(blob + 8, (uint32_t)len);
    if (magic == STT_RKEY_MAGIC) {
        stt_put_u64(blob + 16, base);
        stt_put_u64(blob + 24, region_len);
    }
    memcpy(blob + hdr_len, payload, len);
    stt_put_u64(blob + hdr_len - 8, stt_envelope_sum(blob, hdr_len, payload, len));
    *blob_p = blob;
    *blob_len_p = hdr_len + len;
    return ST_OK;
}

/* Checks an envelope; on success points *payload_p into blob. what: for logs. */
static st_status_t stt_envelope_open(uint32_t magic, st_transport_backend_t backend,
                                     const void *blob_v, size_t blob_len, const char *what,
                                     const uint8_t **payload_p, size_t *len_p, uint64_t *base_p,
                                     uint64_t *region_len_p)
{
    const uint8_t *blob = blob_v;
    size_t hdr_len = magic == STT_RKEY_MAGIC ? STT_RKEY_HDR_LEN : STT_ADDR_HDR_LEN;
    if (blob == NULL || blob_len < hdr_len) {
        st_error("transport %s refused: too short len=%zu need=%zu", what, blob_len, hdr_len);
        return ST_ERR_INVALID;
    }
    if (stt_get_u32(blob) != magic) {
        st_error("transport %s refused: bad magic 0x%08x", what, stt_get_u32(blob));
        return ST_ERR_INVALID;
    }
    if (blob[4] != STT_WIRE_VERSION) {
        st_error("transport %s refused: version=%u expected=%u", what, blob[4], STT_WIRE_VERSION);
        return ST_ERR_INVALID;
    }
    if (blob[5] != (uint8_t)backend) {
        st_error("transport %s refused: made by backend=%s, this transport is backend=%s", what,
                 st_transport_backend_name((st_transport_backend_t)blob[5]),
                 st_transport_backend_name(backend));
        return ST_ERR_INVALID;
    }
    size_t len = stt_get_u32(blob + 8);
    if (len != blob_len - hdr_len) {
        st_error("transport %s refused: length mismatch header=%zu actual=%zu", what, len,
                 blob_len - hdr_len);
        return ST_ERR_INVALID;
    }
    uint64_t sum = stt_envelope_sum(blob, hdr_len, blob + hdr_len, len);
    if (sum != stt_get_u64(blob + hdr_len - 8)) {
        st_error("transport %s refused: checksum mismatch (corrupted bytes)", what);
        return ST_ERR_INVALID;
    }
    if (magic == STT_RKEY_MAGIC) {
        *base_p = stt_get_u64(blob + 16);
        *region_len_p = stt_get_u64(blob + 24);
    }
    *payload_p = blob + hdr_len;
    *len_p = len;
    return ST_OK;
}

st_status_t st_transport_parse_backend(const char *text, st_transport_backend_t *backend_p)
{
    if (text != NULL && strcasecmp(text, "ucx") == 0) {
        *backend_p = ST_TRANSPORT_UCX;
        return ST_OK;
    }
    if (text != NULL && (strcasecmp(text, "libfabric") == 0 || strcasecmp(text, "fabric") == 0 ||
                         strcasecmp(text, "ofi") == 0)) {
        *backend_p = ST_TRANSPORT_FABRIC;
        return ST_OK;
    }
    st_error("unknown transport backend name=%s expected=ucx|libfabric", text ? text : "(null)");
    return ST_ERR_INVALID;
}

const char *st_transport_backend_name(st_transport_backend_t backend)
{
    switch (backend) {
    case ST_TRANSPORT_UCX: return "ucx";
    case ST_TRANSPORT_FABRIC: return "libfabric";
    }
    return "unknown";
}

st_transport_backend_t st_transport_backend(const st_transport_t *tp)
{
    return tp->backend;
}

/* --- the operation pool ------------------------------------------------- */

static stt_op_t *stt_op_alloc(st_transport_t *tp)
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

static void stt_op_release(st_transport_t *tp, stt_op_t *op)
{
    stt_list_del(&op->link);
    stt_list_push(&tp->free_ops, &op->link);
}

void stt_op_complete(stt_op_t *op, st_status_t status)
{
    st_transport_t *tp;
    if (op->orphaned) {
        /* Its endpoint closed first and its callback ran then; the
         * library is done with the record now. */
        tp = (st_transport_t *)op->user;
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

/* Runs the callbacks of completed ops. Returns how many ran. */
static int stt_drain(st_transport_t *tp)
{
    int n = 0;
    if (tp->draining) {
        return 0;
    }
    tp->draining = true;
    while (!stt_list_empty(&tp->done)) {
        stt_op_t *op = stt_container_of(tp->done.next, stt_op_t, link);
        st_transport_cb_t cb = op->cb;
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

void stt_msg_received(st_transport_t *tp, st_transport_msg_t *m)
{
    m->tp = tp;
    stt_list_push(&tp->msgs, &m->link);
}

/* Hands the received messages to the listener. Returns how many. */
static int stt_msg_drain(st_transport_t *tp)
{
    int n = 0;
    if (tp->msg_draining) {
        return 0;
    }
    tp->msg_draining = true;
    while (!stt_list_empty(&tp->msgs)) {
        st_transport_msg_t *m = stt_container_of(tp->msgs.next, st_transport_msg_t, link);
        stt_list_del(&m->link);
        n++;
        m->kept = false;
        if (tp->msg_fn != NULL) {
            tp->msg_fn(tp->msg_arg, m, m->data, m->len);
        } else {
            st_debug("transport message dropped: nobody listens bytes=%zu", m->len);
        }
        if (!m->kept) {
            free(m);
        }
    }
    tp->msg_draining = false;
    return n;
}

int stt_progress_all(st_transport_t *tp)
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

int st_transport_progress(st_transport_t *tp)
{
    return stt_progress_all(tp);
}

size_t st_transport_inflight(const st_transport_t *tp)
{
    return tp->n_inflight;
}

/* --- create and destroy ------------------------------------------------- */

st_status_t st_transport_create(const st_transport_config_t *cfg, st_transport_t **tp_p)
{
    const stt_ops_t *ops;
    if (cfg == NULL || tp_p == NULL) {
        st_error("transport create refused: no config");
        return ST_ERR_INVALID;
    }
    switch (cfg->backend) {
    case ST_TRANSPORT_UCX: ops = &stt_ucx_ops; break;
    case ST_TRANSPORT_FABRIC: ops = &stt_fabric_ops; break;
    default:
        st_error("transport create refused: unknown backend=%d", (int)cfg->backend);
        return ST_ERR_INVALID;
    }

    st_transport_t *tp = NULL;
    void *addr = NULL;
    size_t addr_len = 0;
    st_status_t st = ops->create(cfg, &tp, &addr, &addr_len);
    if (st != ST_OK) {
        return st;
    }
    tp->ops = ops;
    tp->backend = cfg->backend;
    stt_list_init(&tp->eps);
    stt_list_init(&tp->mems);
    stt_list_init(&tp->inflight);
    stt_list_init(&tp->done);
    stt_list_init(&tp->free_ops);
    stt_list_init(&tp->msgs);
    st = stt_envelope_wrap(STT_ADDR_MAGIC, tp->backend, addr, addr_len, 0, 0, &tp->addr_blob,
                           &tp->addr_blob_len);
    free(addr);
    if (st != ST_OK) {
        ops->destroy(tp);
        return st;
    }
    st_debug("transport created backend=%s address_bytes=%zu", ops->name, tp->addr_blob_len);
    *tp_p = tp;
    return ST_OK;
}

void st_transport_destroy(st_transport_t *tp)
{
    if (tp == NULL) {
        return;
    }
    while (!stt_list_empty(&tp->eps)) {
        st_transport_ep_close(stt_container_of(tp->eps.next, st_transport_ep_t, link));
    }
    while (!stt_list_empty(&tp->mems)) {
        st_transport_mem_t *mem = stt_container_of(tp->mems.next, st_transport_mem_t, link);
        st_transport_mem_deregister(tp, mem);
    }
    stt_drain(tp);
    tp->msg_fn = NULL;
    stt_msg_drain(tp); /* frees what nobody took */
    void **chunks = tp->op_chunks;
    size_t n_chunks = tp->n_op_chunks;
    free(tp->addr_blob);
    /* The backend frees tp; the op records outlive it until the library
     * has been closed, because orphaned ops may still be referenced. */
    tp->ops->destroy(tp);
    for (size_t i = 0; i < n_chunks; i++) {
        free(chunks[i]);
    }
    free(chunks);
}

st_status_t st_transport_address(st_transport_t *tp, const void **addr_p, size_t *len_p)
{
    *addr_p = tp->addr_blob;
    *len_p = tp->addr_blob_len;
    return ST_OK;
}

/* --- memory ------------------------------------------------------------- */

static st_status_t stt_mem_register(st_transport_t *tp, void *addr, size_t len, unsigned access,
                                    st_transport_mem_t **mem_p)
{
    st_transport_mem_t *mem = NULL;
    void *key = NULL;
    size_t key_len = 0;
    st_status_t st = tp->ops->mem_register(tp, &addr, len, access, &mem, &key, &key_len);
    if (st != ST_OK) {
        return st;
    }
    mem->tp = tp;
    mem->addr = addr;
    mem->len = len;
    mem->access = access;
    st = stt_envelope_wrap(STT_RKEY_MAGIC, tp->backend, key, key_len, (uint64_t)(uintptr_t)addr,
                           len, &mem->rkey_blob, &mem->rkey_blob_len);
    free(key);
    if (st != ST_OK) {
        tp->ops->mem_deregister(tp, mem);
        return st;
    }
    stt_list_push(&tp->mems, &mem->link);
    *mem_p = mem;
    return ST_OK;
}

st_status_t st_transport_mem_register(st_transport_t *tp, void *addr, size_t len,
                                      st_transport_mem_t **mem_p)
{
    if (addr == NULL || len == 0) {
        st_error("transport register refused: empty region addr=%p len=%zu", addr, len);
        return ST_ERR_INVALID;
    }
    return stt_mem_register(tp, addr, len, ST_TRANSPORT_REMOTE_RW, mem_p);
}

st_status_t st_transport_mem_alloc(st_transport_t *tp, size_t len, st_transport_mem_t **mem_p)
{
    if (len == 0) {
        st_error("transport allocation refused: len=0");
        return ST_ERR_INVALID;
    }
    return stt_mem_register(tp, NULL, len, ST_TRANSPORT_REMOTE_RW, mem_p);
}

st_status_t st_transport_mem_map(st_transport_t *tp, void *addr, size_t len, unsigned access,
                                 st_transport_mem_t **mem_p)
{
    if (len == 0 || access == 0 || (access & ~ST_TRANSPORT_REMOTE_RW) != 0) {
        st_error("transport register refused: addr=%p len=%zu access=0x%x (want len > 0 and "
                 "access of REMOTE_READ|REMOTE_WRITE)",
                 addr, len, access);
        return ST_ERR_INVALID;
    }
    return stt_mem_register(tp, addr, len, access, mem_p);
}

int st_transport_enforces_access(const st_transport_t *tp)
{
    return tp->ops->enforces_access != NULL && tp->ops->enforces_access(tp);
}

void *st_transport_mem_addr(const st_transport_mem_t *mem)
{
    return mem->addr;
}

size_t st_transport_mem_len(const st_transport_mem_t *mem)
{
    return mem->len;
}

void st_transport_mem_deregister(st_transport_t *tp, st_transport_mem_t *mem)
{
    if (mem == NULL) {
        return;
    }
    stt_list_del(&mem->link);
    free(mem->rkey_blob);
    tp->ops->mem_deregister(tp, mem);
}

st_status_t st_transport_mem_rkey(st_transport_mem_t *mem, const void **buf_p, size_t *len_p)
{
    *buf_p = mem->rkey_blob;
    *len_p = mem->rkey_blob_len;
    return ST_OK;
}

/* --- endpoints and keys ------------------------------------------------- */

st_status_t st_transport_connect(st_transport_t *tp, const void *addr, size_t len,
                                 st_transport_ep_t **ep_p)
{
    const uint8_t *payload;
    size_t payload_len;
    st_status_t st = stt_envelope_open(STT_ADDR_MAGIC, tp->backend, addr, len, "peer address",
                                       &payload, &payload_len, NULL, NULL);
    if (st != ST_OK) {
        return st;
    }
    st_transport_ep_t *ep = NULL;
    st = tp->ops->connect(tp, payload, payload_len, &ep);
    if (st != ST_OK) {
        return st;
    }
    ep->tp = tp;
    ep->n_inflight = 0;
    ep->error = ST_OK;
    ep->closing = false;
    stt_list_init(&ep->rkeys);
    stt_list_push(&tp->eps, &ep->link);
    *ep_p = ep;
    return ST_OK;
}

st_status_t st_transport_ep_flush(st_transport_ep_t *ep, int timeout_ms)
{
    st_transport_t *tp = ep->tp;
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : stt_now_ms() + (uint64_t)timeout_ms;
    while (ep->n_inflight > 0) {
        int n = stt_progress_all(tp);
        if (n < 0) {
            return (st_status_t)n;
        }
        if (n == 0 && stt_now_ms() >= deadline) {
            st_warn("transport flush timed out backend=%s inflight=%zu timeout_ms=%d",
                    tp->ops->name, ep->n_inflight, timeout_ms);
            return ST_ERR_TIMEOUT;
        }
    }
    if (ep->error != ST_OK) {
        return ep->error;
    }
    int left = 0;
    if (timeout_ms >= 0) {
        uint64_t now = stt_now_ms();
        left = now >= deadline ? 0 : (int)(deadline - now);
    } else {
        left = -1;
    }
    st_status_t st = tp->ops->ep_flush(ep, left);
    stt_drain(tp);
    return st;
}

void st_transport_ep_close(st_transport_ep_t *ep)
{
    if (ep == NULL) {
        return;
    }
    st_transport_t *tp = ep->tp;
    ep->closing = true;
    if (ep->error == ST_OK) {
        (void)st_transport_ep_flush(ep, STT_CLOSE_FLUSH_MS);
    }
    bool force = ep->n_inflight > 0 || ep->error != ST_OK;
    if (!force) {
        while (!stt_list_empty(&ep->rkeys)) {
            st_transport_rkey_destroy(stt_container_of(ep->rkeys.next, st_transport_rkey_t, link));
        }
    }
    tp->ops->ep_close(ep, force);

    /* Ops the library still holds: their callbacks run now, cancelled, and
     * their records wait for the library to let go of them. */
    stt_link_t *node = tp->inflight.next;
    while (node != &tp->inflight) {
        stt_op_t *op = stt_container_of(node, stt_op_t, link);
        node = node->next;
        if (op->ep != ep) {
            continue;
        }
        st_transport_cb_t cb = op->cb;
        void *user = op->user;
        op->ep = NULL;
        op->orphaned = true;
        op->user = tp;
        ep->n_inflight--;
        tp->n_inflight--;
        if (cb != NULL) {
            cb(user, ST_ERR_CANCELLED);
        }
    }
    while (!stt_list_empty(&ep->rkeys)) {
        st_transport_rkey_destroy(stt_container_of(ep->rkeys.next, st_transport_rkey_t, link));
    }
    stt_drain(tp);
    stt_list_del(&ep->link);
    free(ep);
}

st_status_t st_transport_rkey_unpack(st_transport_ep_t *ep, const void *buf, size_t len,
                                     st_transport_rkey_t **rkey_p)
{
    st_transport_t *tp = ep->tp;
    const uint8_t *payload;
    size_t payload_len;
    uint64_t base = 0, region_len = 0;
    st_status_t st = stt_envelope_open(STT_RKEY_MAGIC, tp->backend, buf, len, "remote key",
                                       &payload, &payload_len, &base, &region_len);
    if (st != ST_OK) {
        return st;
    }
    if (region_len == 0 || base + region_len < base) {
        st_error("transport remote key refused: bad region base=0x%llx len=%llu",
                 (unsigned long long)base, (unsigned long long)region_len);
        return ST_ERR_INVALID;
    }
    st_transport_rkey_t *rkey = NULL;
    st = tp->ops->rkey_unpack(ep, payload, payload_len, &rkey);
    if (st != ST_OK) {
        return st;
    }
    rkey->ep = ep;
    rkey->base = base;
    rkey->len = (size_t)region_len;
    stt_list_push(&ep->rkeys, &rkey->link);
    *rkey_p = rkey;
    return ST_OK;
}

void st_transport_rkey_destroy(st_transport_rkey_t *rkey)
{
    if (rkey == NULL) {
        return;
    }
    stt_list_del(&rkey->link);
    rkey->ep->tp->ops->rkey_destroy(rkey);
}

void st_transport_rkey_bounds(const st_transport_rkey_t *rkey, uint64_t *base_p, size_t *len_p)
{
    *base_p = rkey->base;
    *len_p = rkey->len;
}

/* --- operations --------------------------------------------------------- */

/* The checks every get and put passes before anything is posted. */
static st_status_t stt_check(st_transport_ep_t *ep, bool is_put, void *local, size_t len,
                             st_transport_mem_t *local_mem, uint64_t remote_addr,
                             st_transport_rkey_t *rkey)
{
    const char *what = is_put ? "put" : "get";
    if (len == 0 || local == NULL || local_mem == NULL || rkey == NULL) {
        st_error("transport %s refused: len=%zu local=%p local_mem=%p rkey=%p", what, len, local,
                 (void *)local_mem, (void *)rkey);
        return ST_ERR_INVALID;
    }
    uintptr_t lo = (uintptr_t)local, mlo = (uintptr_t)local_mem->addr;
    if (lo < mlo || len > local_mem->len || lo - mlo > local_mem->len - len) {
        st_error("transport %s refused: local buffer outside its region local=%p len=%zu "
                 "region=%p region_len=%zu",
                 what, local, len, local_mem->addr, local_mem->len);
        return ST_ERR_INVALID;
    }
    if (remote_addr < rkey->base || len > rkey->len || remote_addr - rkey->base > rkey->len - len) {
        st_error("transport %s refused: remote range outside the peer's region "
                 "remote=0x%llx len=%zu region=0x%llx region_len=%zu",
                 what, (unsigned long long)remote_addr, len, (unsigned long long)rkey->base,
                 rkey->len);
        return ST_ERR_INVALID;
    }
    if (rkey->ep != ep) {
        st_error("transport %s refused: remote key belongs to another endpoint", what);
        return ST_ERR_INVALID;
    }
    if (ep->error != ST_OK) {
        st_warn_ratelimited("transport %s refused: endpoint failed earlier status=%s", what,
                            st_status_name(ep->error));
        return ep->error;
    }
    if (ep->closing) {
        st_warn_ratelimited("transport %s refused: endpoint is closing", what);
        return ST_ERR_CANCELLED;
    }
    return ST_OK;
}

static st_status_t stt_post(st_transport_ep_t *ep, bool is_put, void *local, size_t len,
                            st_transport_mem_t *local_mem, uint64_t remote_addr,
                            st_transport_rkey_t *rkey, st_transport_cb_t cb, void *user)
{
    st_transport_t *tp = ep->tp;
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

st_status_t st_transport_get_now(st_transport_ep_t *ep, void *local, size_t len,
                                 st_transport_mem_t *local_mem, uint64_t remote_addr,
                                 st_transport_rkey_t *rkey)
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

st_status_t st_transport_get(st_transport_ep_t *ep, void *local, size_t len,
                             st_transport_mem_t *local_mem, uint64_t remote_addr,
                             st_transport_rkey_t *rkey, st_transport_cb_t cb, void *user)
{
    return stt_post(ep, false, local, len, local_mem, remote_addr, rkey, cb, user);
}

st_status_t st_transport_put(st_transport_ep_t *ep, const void *local, size_t len,
                             st_transport_mem_t *local_mem, uint64_t remote_addr,
                             st_transport_rkey_t *rkey, st_transport_cb_t cb, void *user)
{
    return stt_post(ep, true, (void *)local, len, local_mem, remote_addr, rkey, cb, user);
}

/* --- waiting ------------------------------------------------------------ */

st_status_t st_transport_event_fd(st_transport_t *tp, int *fd_p)
{
    return tp->ops->event_fd(tp, fd_p);
}

st_status_t st_transport_arm(st_transport_t *tp)
{
    if (!stt_list_empty(&tp->done)) {
        return ST_ERR_BUSY;
    }
    return tp->ops->arm(tp);
}

st_status_t st_transport_wait(st_transport_t *tp, int timeout_ms)
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
            st_error("transport wait failed backend=%s call=poll errno=%d", tp->ops->name, errno);
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

/* --- messages ------------------------------------------------------------ */

st_status_t st_transport_msg_listen(st_transport_t *tp, st_transport_msg_fn fn, void *arg)
{
    if (tp->ops->msg_send == NULL) {
        return ST_ERR_UNSUPPORTED;
    }
    tp->msg_fn = fn;
    tp->msg_arg = arg;
    return ST_OK;
}

static st_status_t stt_msg_check(const st_transport_t *tp, size_t len)
{
    if (tp->ops->msg_send == NULL) {
        return ST_ERR_UNSUPPORTED;
    }
    if (len == 0 || len > ST_TRANSPORT_MSG_MAX) {
        st_error("transport message refused backend=%s: bytes=%zu (1..%u)", tp->ops->name, len,
                 ST_TRANSPORT_MSG_MAX);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

st_status_t st_transport_msg_send(st_transport_ep_t *ep, const void *data, size_t len)
{
    st_transport_t *tp = ep->tp;
    st_status_t st = stt_msg_check(tp, len);
    if (st != ST_OK) {
        return st;
    }
    if (ep->closing) {
        return ST_ERR_CANCELLED;
    }
    if (ep->error != ST_OK) {
        return ep->error;
    }
    return tp->ops->msg_send(tp, ep, NULL, data, len);
}

void st_transport_msg_keep(st_transport_msg_t *msg)
{
    msg->kept = true;
}

const void *st_transport_msg_data(const st_transport_msg_t *msg)
{
    return msg->data;
}

size_t st_transport_msg_len(const st_transport_msg_t *msg)
{
    return msg->len;
}

void st_transport_msg_free(st_transport_msg_t *msg)
{
    free(msg);
}

st_status_t st_transport_msg_reply(st_transport_msg_t *msg, const void *data, size_t len)
{
    st_status_t st = stt_msg_check(msg->tp, len);
    if (st != ST_OK) {
        return st;
    }
    if (msg->route == NULL) {
        /* The peer's doing (strata's senders always offer a route), and one
         * line per message would let a peer flood the log. */
        st_warn_ratelimited("transport reply refused backend=%s: the message carries no reply "
                            "route",
                            msg->tp->ops->name);
        return ST_ERR_INVALID;
    }
    return msg->tp->ops->msg_send(msg->tp, NULL, msg->route, data, len);
}
