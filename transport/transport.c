/*
 * transport.c - dispatch to the backend, and what every backend shares:
 * the address and remote-key envelopes, create and teardown order, memory,
 * endpoints (flush, close) and remote keys. The operations (pool, bounds
 * checks, deferred callbacks, waiting) are in op.c, the messages in msg.c.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

#include "bytes.h"
#include "clock.h"
#include "stt_internal.h"

/* Envelopes: little-endian header, then the backend's bytes. */
#define STT_ADDR_MAGIC     0x41545453u /* "STTA" */
#define STT_RKEY_MAGIC     0x4b545453u /* "STTK" */
#define STT_WIRE_VERSION   1
#define STT_ADDR_HDR_LEN   24 /* magic, version, backend, 2 spare, len, 4 spare, checksum */
#define STT_RKEY_HDR_LEN   40 /* as above, then base and length before the checksum */
#define STT_CLOSE_FLUSH_MS 2000

uint64_t stt_now_ms(void)
{
    return cm_mono_ms();
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

static st_status_t stt_envelope_wrap(uint32_t magic, tp_backend_t backend, const void *payload,
                                     size_t len, uint64_t base, uint64_t region_len,
                                     uint8_t **blob_p, size_t *blob_len_p)
{
    size_t hdr_len = magic == STT_RKEY_MAGIC ? STT_RKEY_HDR_LEN : STT_ADDR_HDR_LEN;
    if (len > UINT32_MAX) {
        lg_error("transport blob too large len=%zu", len);
        return ST_ERR_INVALID;
    }
    uint8_t *blob = malloc(hdr_len + len);
    if (blob == NULL) {
        return ST_ERR_NOMEM;
    }
    memset(blob, 0, hdr_len);
    cm_put_le32(blob, magic);
    blob[4] = STT_WIRE_VERSION;
    blob[5] = (uint8_t)backend;
    cm_put_le32(blob + 8, (uint32_t)len);
    if (magic == STT_RKEY_MAGIC) {
        cm_put_le64(blob + 16, base);
        cm_put_le64(blob + 24, region_len);
    }
    memcpy(blob + hdr_len, payload, len);
    cm_put_le64(blob + hdr_len - 8, stt_envelope_sum(blob, hdr_len, payload, len));
    *blob_p = blob;
    *blob_len_p = hdr_len + len;
    return ST_OK;
}

/* Checks an envelope; on success points *payload_p into blob. what: for logs. */
static st_status_t stt_envelope_open(uint32_t magic, tp_backend_t backend, const void *blob_v,
                                     size_t blob_len, const char *what, const uint8_t **payload_p,
                                     size_t *len_p, uint64_t *base_p, uint64_t *region_len_p)
{
    const uint8_t *blob = blob_v;
    size_t hdr_len = magic == STT_RKEY_MAGIC ? STT_RKEY_HDR_LEN : STT_ADDR_HDR_LEN;
    if (blob == NULL || blob_len < hdr_len) {
        lg_error("transport %s refused: too short len=%zu need=%zu", what, blob_len, hdr_len);
        return ST_ERR_INVALID;
    }
    if (cm_get_le32(blob) != magic) {
        lg_error("transport %s refused: bad magic 0x%08x", what, cm_get_le32(blob));
        return ST_ERR_INVALID;
    }
    if (blob[4] != STT_WIRE_VERSION) {
        lg_error("transport %s refused: version=%u expected=%u", what, blob[4], STT_WIRE_VERSION);
        return ST_ERR_INVALID;
    }
    if (blob[5] != (uint8_t)backend) {
        lg_error("transport %s refused: made by backend=%s, this transport is backend=%s", what,
                 tp_backend_name((tp_backend_t)blob[5]), tp_backend_name(backend));
        return ST_ERR_INVALID;
    }
    size_t len = cm_get_le32(blob + 8);
    if (len != blob_len - hdr_len) {
        lg_error("transport %s refused: length mismatch header=%zu actual=%zu", what, len,
                 blob_len - hdr_len);
        return ST_ERR_INVALID;
    }
    uint64_t sum = stt_envelope_sum(blob, hdr_len, blob + hdr_len, len);
    if (sum != cm_get_le64(blob + hdr_len - 8)) {
        lg_error("transport %s refused: checksum mismatch (corrupted bytes)", what);
        return ST_ERR_INVALID;
    }
    if (magic == STT_RKEY_MAGIC) {
        *base_p = cm_get_le64(blob + 16);
        *region_len_p = cm_get_le64(blob + 24);
    }
    *payload_p = blob + hdr_len;
    *len_p = len;
    return ST_OK;
}

st_status_t tp_parse_backend(const char *text, tp_backend_t *backend_p)
{
    if (text != NULL && strcasecmp(text, "ucx") == 0) {
        *backend_p = TP_UCX;
        return ST_OK;
    }
    if (text != NULL && (strcasecmp(text, "libfabric") == 0 || strcasecmp(text, "fabric") == 0 ||
                         strcasecmp(text, "ofi") == 0)) {
        *backend_p = TP_FABRIC;
        return ST_OK;
    }
    lg_error("unknown transport backend name=%s expected=ucx|libfabric", text ? text : "(null)");
    return ST_ERR_INVALID;
}

const char *tp_backend_name(tp_backend_t backend)
{
    switch (backend) {
    case TP_UCX: return "ucx";
    case TP_FABRIC: return "libfabric";
    }
    return "unknown";
}

tp_backend_t tp_backend(const tp_transport_t *tp)
{
    return tp->backend;
}

/* --- create and destroy ------------------------------------------------- */

st_status_t tp_create(const tp_config_t *cfg, tp_transport_t **tp_p)
{
    const stt_ops_t *ops;
    if (cfg == NULL || tp_p == NULL) {
        lg_error("transport create refused: no config");
        return ST_ERR_INVALID;
    }
    switch (cfg->backend) {
    case TP_UCX: ops = &stt_ucx_ops; break;
    case TP_FABRIC: ops = &stt_fabric_ops; break;
    default:
        lg_error("transport create refused: unknown backend=%d", (int)cfg->backend);
        return ST_ERR_INVALID;
    }

    tp_transport_t *tp = NULL;
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
    lg_debug("transport created backend=%s address_bytes=%zu", ops->name, tp->addr_blob_len);
    *tp_p = tp;
    return ST_OK;
}

void tp_destroy(tp_transport_t *tp)
{
    if (tp == NULL) {
        return;
    }
    while (!stt_list_empty(&tp->eps)) {
        tp_ep_close(stt_container_of(tp->eps.next, tp_ep_t, link));
    }
    while (!stt_list_empty(&tp->mems)) {
        tp_mem_t *mem = stt_container_of(tp->mems.next, tp_mem_t, link);
        tp_mem_deregister(tp, mem);
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

st_status_t tp_address(tp_transport_t *tp, const void **addr_p, size_t *len_p)
{
    *addr_p = tp->addr_blob;
    *len_p = tp->addr_blob_len;
    return ST_OK;
}

/* --- memory ------------------------------------------------------------- */

static st_status_t stt_mem_register(tp_transport_t *tp, void *addr, size_t len, unsigned access,
                                    tp_mem_t **mem_p)
{
    tp_mem_t *mem = NULL;
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

st_status_t tp_mem_register(tp_transport_t *tp, void *addr, size_t len, tp_mem_t **mem_p)
{
    if (addr == NULL || len == 0) {
        lg_error("transport register refused: empty region addr=%p len=%zu", addr, len);
        return ST_ERR_INVALID;
    }
    return stt_mem_register(tp, addr, len, TP_REMOTE_RW, mem_p);
}

st_status_t tp_mem_alloc(tp_transport_t *tp, size_t len, tp_mem_t **mem_p)
{
    if (len == 0) {
        lg_error("transport allocation refused: len=0");
        return ST_ERR_INVALID;
    }
    return stt_mem_register(tp, NULL, len, TP_REMOTE_RW, mem_p);
}

st_status_t tp_mem_map(tp_transport_t *tp, void *addr, size_t len, unsigned access,
                       tp_mem_t **mem_p)
{
    if (len == 0 || access == 0 || (access & ~TP_REMOTE_RW) != 0) {
        lg_error("transport register refused: addr=%p len=%zu access=0x%x (want len > 0 and "
                 "access of REMOTE_READ|REMOTE_WRITE)",
                 addr, len, access);
        return ST_ERR_INVALID;
    }
    return stt_mem_register(tp, addr, len, access, mem_p);
}

int tp_enforces_access(const tp_transport_t *tp)
{
    return tp->ops->enforces_access != NULL && tp->ops->enforces_access(tp);
}

void *tp_mem_addr(const tp_mem_t *mem)
{
    return mem->addr;
}

size_t tp_mem_len(const tp_mem_t *mem)
{
    return mem->len;
}

void tp_mem_deregister(tp_transport_t *tp, tp_mem_t *mem)
{
    if (mem == NULL) {
        return;
    }
    stt_list_del(&mem->link);
    free(mem->rkey_blob);
    tp->ops->mem_deregister(tp, mem);
}

st_status_t tp_mem_rkey(tp_mem_t *mem, const void **buf_p, size_t *len_p)
{
    *buf_p = mem->rkey_blob;
    *len_p = mem->rkey_blob_len;
    return ST_OK;
}

/* --- endpoints and keys ------------------------------------------------- */

st_status_t tp_connect(tp_transport_t *tp, const void *addr, size_t len, tp_ep_t **ep_p)
{
    const uint8_t *payload;
    size_t payload_len;
    st_status_t st = stt_envelope_open(STT_ADDR_MAGIC, tp->backend, addr, len, "peer address",
                                       &payload, &payload_len, NULL, NULL);
    if (st != ST_OK) {
        return st;
    }
    tp_ep_t *ep = NULL;
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

st_status_t tp_ep_flush(tp_ep_t *ep, int timeout_ms)
{
    tp_transport_t *tp = ep->tp;
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : stt_now_ms() + (uint64_t)timeout_ms;
    while (ep->n_inflight > 0) {
        int n = stt_progress_all(tp);
        if (n < 0) {
            return (st_status_t)n;
        }
        /* Checked whatever n is: completions of other endpoints' operations
         * keep n above 0 while this endpoint's may never finish. */
        if (ep->n_inflight > 0 && stt_now_ms() >= deadline) {
            lg_warn("transport flush timed out backend=%s inflight=%zu timeout_ms=%d",
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

/* Closes ep, flushing it first (up to STT_CLOSE_FLUSH_MS) when flush. */
static void stt_ep_close(tp_ep_t *ep, bool flush)
{
    if (ep == NULL) {
        return;
    }
    tp_transport_t *tp = ep->tp;
    ep->closing = true;
    if (flush && ep->error == ST_OK) {
        (void)tp_ep_flush(ep, STT_CLOSE_FLUSH_MS);
    }
    bool force = ep->n_inflight > 0 || ep->error != ST_OK;
    if (!force) {
        while (!stt_list_empty(&ep->rkeys)) {
            tp_rkey_destroy(stt_container_of(ep->rkeys.next, tp_rkey_t, link));
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
        tp_cb_t cb = op->cb;
        void *user = op->user;
        op->ep = NULL;
        op->orphaned = true;
        op->user = tp;
        tp->n_orphaned++;
        ep->n_inflight--;
        tp->n_inflight--;
        if (cb != NULL) {
            cb(user, ST_ERR_CANCELLED);
        }
    }
    while (!stt_list_empty(&ep->rkeys)) {
        tp_rkey_destroy(stt_container_of(ep->rkeys.next, tp_rkey_t, link));
    }
    stt_drain(tp);
    stt_list_del(&ep->link);
    free(ep);
}

void tp_ep_close(tp_ep_t *ep)
{
    stt_ep_close(ep, true);
}

void tp_ep_abort(tp_ep_t *ep)
{
    stt_ep_close(ep, false);
}

st_status_t tp_rkey_unpack(tp_ep_t *ep, const void *buf, size_t len, tp_rkey_t **rkey_p)
{
    tp_transport_t *tp = ep->tp;
    const uint8_t *payload;
    size_t payload_len;
    uint64_t base = 0, region_len = 0;
    st_status_t st = stt_envelope_open(STT_RKEY_MAGIC, tp->backend, buf, len, "remote key",
                                       &payload, &payload_len, &base, &region_len);
    if (st != ST_OK) {
        return st;
    }
    if (region_len == 0 || base + region_len < base) {
        lg_error("transport remote key refused: bad region base=0x%llx len=%llu",
                 (unsigned long long)base, (unsigned long long)region_len);
        return ST_ERR_INVALID;
    }
    tp_rkey_t *rkey = NULL;
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

void tp_rkey_destroy(tp_rkey_t *rkey)
{
    if (rkey == NULL) {
        return;
    }
    stt_list_del(&rkey->link);
    rkey->ep->tp->ops->rkey_destroy(rkey);
}

void tp_rkey_bounds(const tp_rkey_t *rkey, uint64_t *base_p, size_t *len_p)
{
    *base_p = rkey->base;
    *len_p = rkey->len;
}
