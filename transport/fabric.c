/*
 * fabric.c - the libfabric backend: one RDM endpoint with an AV table and
 * one completion queue, regions registered for remote read and write under
 * whatever mr_mode the provider asks for, and fi_read/fi_write whose
 * completions come back through fi_cq_read. Operations the provider refuses
 * with FI_EAGAIN wait in a queue and are posted again from progress.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#include "stt_internal.h"

#define STT_FI_VERSION  FI_VERSION(1, 10)
#define STT_FI_CQ_BATCH 64
#define STT_FI_MAX_NAME 256
#define STT_FI_KEY_RAW  0x1 /* the key is raw bytes: map with fi_mr_map_raw */
#define STT_FI_KEY_VIRT 0x2 /* the target addresses by virtual address */
#define STT_FI_KEY_HDR  24  /* flags u32, key length u32, raw base u64, key u64 (not raw) */

typedef struct stt_fi {
    tp_transport_t base;
    struct fi_info *info;
    struct fid_fabric *fabric;
    struct fid_domain *domain;
    struct fid_cq *cq;
    struct fid_av *av;
    struct fid_ep *ep;
    uint64_t mr_mode;
    size_t max_msg_size;
    uint64_t next_key; /* requested keys when the provider does not pick them */
    bool has_wait_fd;
    bool delivery_complete;
    stt_link_t pending; /* ops refused with FI_EAGAIN, in order */
    stt_link_t peers;   /* stt_fi_peer_t, the AV's entries */
} stt_fi_t;

typedef struct stt_fi_mem {
    tp_mem_t base;
    struct fid_mr *mr;
    void *desc;
    void *allocated; /* mmap'd here: unmapped on deregister */
    size_t allocated_len;
} stt_fi_mem_t;

/* One AV entry per peer, shared by its endpoints: some providers (shm in
 * 1.17) break the other entries of a peer when one of them is removed. */
typedef struct stt_fi_peer {
    stt_link_t link;
    fi_addr_t addr;
    size_t refs;
    size_t name_len;
    uint8_t name[];
} stt_fi_peer_t;

typedef struct stt_fi_ep {
    tp_ep_t base;
    fi_addr_t addr;
    stt_fi_peer_t *peer;
} stt_fi_ep_t;

typedef struct stt_fi_rkey {
    tp_rkey_t base;
    uint64_t key;
    bool mapped; /* key came from fi_mr_map_raw: unmap on destroy */
    bool virt;
} stt_fi_rkey_t;

static st_status_t stt_fi_fail(const char *call, int ret)
{
    lg_error("transport call failed backend=libfabric call=%s ret=%d error=%s", call, ret,
             fi_strerror(ret < 0 ? -ret : ret));
    return ST_ERR_TRANSPORT;
}

static st_status_t stt_fi_status(int err)
{
    switch (err) {
    case FI_ECANCELED: return ST_ERR_CANCELLED;
    case FI_EHOSTUNREACH:
    case FI_ECONNREFUSED:
    case FI_ECONNRESET:
    case FI_ENOTCONN:
    case FI_ECONNABORTED:
    case FI_ETIMEDOUT: return ST_ERR_UNAVAILABLE;
    default: return ST_ERR_TRANSPORT;
    }
}

static void stt_fi_close(struct fid *fid, const char *what)
{
    if (fid == NULL) {
        return;
    }
    int ret = fi_close(fid);
    if (ret != 0) {
        lg_warn("transport call failed backend=libfabric call=fi_close object=%s error=%s", what,
                fi_strerror(-ret));
    }
}

static void stt_fi_teardown(stt_fi_t *f)
{
    stt_fi_close(f->ep ? &f->ep->fid : NULL, "endpoint");
    stt_fi_close(f->av ? &f->av->fid : NULL, "av");
    stt_fi_close(f->cq ? &f->cq->fid : NULL, "cq");
    stt_fi_close(f->domain ? &f->domain->fid : NULL, "domain");
    stt_fi_close(f->fabric ? &f->fabric->fid : NULL, "fabric");
    if (f->info != NULL) {
        fi_freeinfo(f->info);
    }
    free(f);
}

/* fi_getinfo for RMA on an RDM endpoint, with every mr_mode bit we handle. */
static st_status_t stt_fi_getinfo(const tp_config_t *cfg, bool delivery, struct fi_info **info_p,
                                  int *ret_p)
{
    struct fi_info *hints = fi_allocinfo();
    if (hints == NULL) {
        return ST_ERR_NOMEM;
    }
    hints->caps = FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE;
    hints->mode = FI_CONTEXT | FI_CONTEXT2;
    hints->ep_attr->type = FI_EP_RDM;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                  FI_MR_RAW | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_DOMAIN;
    hints->domain_attr->resource_mgmt = FI_RM_ENABLED;
    if (delivery) {
        hints->tx_attr->op_flags = FI_DELIVERY_COMPLETE;
    }
    if (cfg->fabric_provider != NULL &&
        (hints->fabric_attr->prov_name = strdup(cfg->fabric_provider)) == NULL) {
        fi_freeinfo(hints);
        return ST_ERR_NOMEM;
    }
    /* The domain is picked from the answers below: layered providers
     * (tcp;ofi_rxm) do not filter on the domain name of the hints. */
    struct fi_info *list = NULL;
    *ret_p = fi_getinfo(STT_FI_VERSION, NULL, NULL, 0, hints, &list);
    fi_freeinfo(hints);
    if (*ret_p != 0) {
        return ST_OK;
    }
    struct fi_info *pick = list;
    if (cfg->fabric_domain != NULL) {
        for (pick = list; pick != NULL; pick = pick->next) {
            if (pick->domain_attr->name != NULL &&
                strcmp(pick->domain_attr->name, cfg->fabric_domain) == 0) {
                break;
            }
        }
    }
    if (pick == NULL) {
        fi_freeinfo(list);
        *ret_p = -FI_ENODATA;
        return ST_OK;
    }
    *info_p = fi_dupinfo(pick);
    fi_freeinfo(list);
    return *info_p == NULL ? ST_ERR_NOMEM : ST_OK;
}

static st_status_t stt_fi_open_cq(stt_fi_t *f)
{
    struct fi_cq_attr attr = {
        .format = FI_CQ_FORMAT_CONTEXT,
        .wait_obj = FI_WAIT_FD,
        .size = 0,
    };
    int ret = fi_cq_open(f->domain, &attr, &f->cq, NULL);
    if (ret == 0) {
        f->has_wait_fd = true;
        return ST_OK;
    }
    lg_debug("transport cq has no wait fd backend=libfabric error=%s", fi_strerror(-ret));
    attr.wait_obj = FI_WAIT_NONE;
    ret = fi_cq_open(f->domain, &attr, &f->cq, NULL);
    if (ret != 0) {
        return stt_fi_fail("fi_cq_open", ret);
    }
    return ST_OK;
}

static st_status_t stt_fi_create(const tp_config_t *cfg, tp_transport_t **tp_p, void **addr_p,
                                 size_t *addr_len_p)
{
    stt_fi_t *f = calloc(1, sizeof(*f));
    if (f == NULL) {
        return ST_ERR_NOMEM;
    }
    stt_list_init(&f->pending);
    stt_list_init(&f->peers);
    f->next_key = 1;

    int ret = 0;
    st_status_t st = stt_fi_getinfo(cfg, true, &f->info, &ret);
    if (st == ST_OK && ret == -FI_ENODATA) {
        st = stt_fi_getinfo(cfg, false, &f->info, &ret);
    }
    if (st != ST_OK) {
        free(f);
        return st;
    }
    if (ret != 0) {
        free(f);
        lg_error("transport unavailable backend=libfabric call=fi_getinfo provider=%s domain=%s "
                 "error=%s (no RDM endpoint with FI_RMA here)",
                 cfg->fabric_provider ? cfg->fabric_provider : "(any)",
                 cfg->fabric_domain ? cfg->fabric_domain : "(any)", fi_strerror(-ret));
        return ret == -FI_ENODATA ? ST_ERR_UNSUPPORTED : ST_ERR_TRANSPORT;
    }
    struct fi_info *info = f->info;
    f->mr_mode = info->domain_attr->mr_mode;
    f->max_msg_size = info->ep_attr->max_msg_size;
    f->delivery_complete = (info->tx_attr->op_flags & FI_DELIVERY_COMPLETE) != 0;

    if ((ret = fi_fabric(info->fabric_attr, &f->fabric, NULL)) != 0) {
        st = stt_fi_fail("fi_fabric", ret);
        goto err;
    }
    if ((ret = fi_domain(f->fabric, info, &f->domain, NULL)) != 0) {
        st = stt_fi_fail("fi_domain", ret);
        goto err;
    }
    if ((st = stt_fi_open_cq(f)) != ST_OK) {
        goto err;
    }
    struct fi_av_attr av_attr = {.type = FI_AV_TABLE};
    if ((ret = fi_av_open(f->domain, &av_attr, &f->av, NULL)) != 0) {
        st = stt_fi_fail("fi_av_open", ret);
        goto err;
    }
    if ((ret = fi_endpoint(f->domain, info, &f->ep, NULL)) != 0) {
        st = stt_fi_fail("fi_endpoint", ret);
        goto err;
    }
    if ((ret = fi_ep_bind(f->ep, &f->av->fid, 0)) != 0) {
        st = stt_fi_fail("fi_ep_bind(av)", ret);
        goto err;
    }
    if ((ret = fi_ep_bind(f->ep, &f->cq->fid, FI_TRANSMIT | FI_RECV)) != 0) {
        st = stt_fi_fail("fi_ep_bind(cq)", ret);
        goto err;
    }
    if ((ret = fi_enable(f->ep)) != 0) {
        st = stt_fi_fail("fi_enable", ret);
        goto err;
    }

    /* The address: u32 addr_format, u16 provider-name length, the provider
     * name, then fi_getname's bytes. */
    uint8_t name[STT_FI_MAX_NAME];
    size_t name_len = sizeof(name);
    if ((ret = fi_getname(&f->ep->fid, name, &name_len)) != 0) {
        st = stt_fi_fail("fi_getname", ret);
        goto err;
    }
    const char *prov = info->fabric_attr->prov_name;
    size_t prov_len = strlen(prov);
    size_t len = 6 + prov_len + name_len;
    uint8_t *addr = malloc(len);
    if (addr == NULL) {
        st = ST_ERR_NOMEM;
        goto err;
    }
    uint32_t fmt = info->addr_format;
    uint16_t pl = (uint16_t)prov_len;
    memcpy(addr, &fmt, 4);
    memcpy(addr + 4, &pl, 2);
    memcpy(addr + 6, prov, prov_len);
    memcpy(addr + 6 + prov_len, name, name_len);

    lg_info("transport ready backend=libfabric provider=%s domain=%s mr_mode=0x%llx "
            "virt_addr=%d prov_key=%d local=%d raw=%d delivery_complete=%d wait_fd=%d",
            prov, info->domain_attr->name, (unsigned long long)f->mr_mode,
            (f->mr_mode & FI_MR_VIRT_ADDR) != 0, (f->mr_mode & FI_MR_PROV_KEY) != 0,
            (f->mr_mode & FI_MR_LOCAL) != 0, (f->mr_mode & FI_MR_RAW) != 0, f->delivery_complete,
            f->has_wait_fd);
    *tp_p = &f->base;
    *addr_p = addr;
    *addr_len_p = len;
    return ST_OK;

err:
    stt_fi_teardown(f);
    return st;
}

static void stt_fi_destroy(tp_transport_t *tp)
{
    stt_fi_t *f = (stt_fi_t *)tp;
    while (!stt_list_empty(&f->peers)) {
        stt_fi_peer_t *peer = stt_container_of(f->peers.next, stt_fi_peer_t, link);
        stt_list_del(&peer->link);
        free(peer);
    }
    stt_fi_teardown(f);
}

static st_status_t stt_fi_mem_register(tp_transport_t *tp, void **addr_p, size_t len,
                                       unsigned access_in, tp_mem_t **mem_p, void **key_p,
                                       size_t *key_len_p)
{
    stt_fi_t *f = (stt_fi_t *)tp;
    stt_fi_mem_t *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return ST_ERR_NOMEM;
    }
    void *addr = *addr_p;
    if (addr == NULL) {
        addr = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (addr == MAP_FAILED) {
            free(m);
            lg_error("transport allocation failed backend=libfabric call=mmap len=%zu", len);
            return ST_ERR_NOMEM;
        }
        (void)madvise(addr, len, MADV_HUGEPAGE);
        m->allocated = addr;
        m->allocated_len = len;
    }
    uint64_t access = FI_READ | FI_WRITE | ((access_in & TP_REMOTE_READ) ? FI_REMOTE_READ : 0) |
                      ((access_in & TP_REMOTE_WRITE) ? FI_REMOTE_WRITE : 0);
    uint64_t requested = (f->mr_mode & FI_MR_PROV_KEY) ? 0 : f->next_key++;
    int ret = fi_mr_reg(f->domain, addr, len, access, 0, requested, 0, &m->mr, NULL);
    if (ret != 0) {
        if (m->allocated != NULL) {
            munmap(m->allocated, m->allocated_len);
        }
        free(m);
        lg_error("transport call failed backend=libfabric call=fi_mr_reg addr=%p len=%zu "
                 "error=%s",
                 addr, len, fi_strerror(-ret));
        return ST_ERR_TRANSPORT;
    }
    *addr_p = addr;
    st_status_t st;
    if (f->mr_mode & FI_MR_ENDPOINT) {
        if ((ret = fi_mr_bind(m->mr, &f->ep->fid, 0)) != 0) {
            st = stt_fi_fail("fi_mr_bind", ret);
            goto err;
        }
        if ((ret = fi_mr_enable(m->mr)) != 0) {
            st = stt_fi_fail("fi_mr_enable", ret);
            goto err;
        }
    }
    m->desc = fi_mr_desc(m->mr);

    uint32_t flags = (f->mr_mode & FI_MR_VIRT_ADDR) ? STT_FI_KEY_VIRT : 0;
    uint64_t raw_base = 0, key = 0;
    uint8_t raw[STT_FI_MAX_NAME];
    size_t raw_len = 0;
    if (f->mr_mode & FI_MR_RAW) {
        raw_len = sizeof(raw);
        if ((ret = fi_mr_raw_attr(m->mr, &raw_base, raw, &raw_len, 0)) != 0) {
            st = stt_fi_fail("fi_mr_raw_attr", ret);
            goto err;
        }
        flags |= STT_FI_KEY_RAW;
    } else {
        key = fi_mr_key(m->mr);
        if (key == FI_KEY_NOTAVAIL) {
            lg_error("transport call failed backend=libfabric call=fi_mr_key "
                     "error=key not available");
            st = ST_ERR_TRANSPORT;
            goto err;
        }
    }
    uint8_t *out = malloc(STT_FI_KEY_HDR + raw_len);
    if (out == NULL) {
        st = ST_ERR_NOMEM;
        goto err;
    }
    uint32_t rl = (uint32_t)raw_len;
    memcpy(out, &flags, 4);
    memcpy(out + 4, &rl, 4);
    memcpy(out + 8, &raw_base, 8);
    memcpy(out + 16, &key, 8);
    memcpy(out + STT_FI_KEY_HDR, raw, raw_len);
    *mem_p = &m->base;
    *key_p = out;
    *key_len_p = STT_FI_KEY_HDR + raw_len;
    return ST_OK;

err:
    stt_fi_close(&m->mr->fid, "mr");
    if (m->allocated != NULL) {
        munmap(m->allocated, m->allocated_len);
    }
    free(m);
    return st;
}

static void stt_fi_mem_deregister(tp_transport_t *tp, tp_mem_t *mem)
{
    stt_fi_mem_t *m = (stt_fi_mem_t *)mem;
    stt_fi_close(&m->mr->fid, "mr");
    if (m->allocated != NULL) {
        munmap(m->allocated, m->allocated_len);
    }
    free(m);
}

static st_status_t stt_fi_connect(tp_transport_t *tp, const void *addr_v, size_t len,
                                  tp_ep_t **ep_p)
{
    stt_fi_t *f = (stt_fi_t *)tp;
    const uint8_t *addr = addr_v;
    uint32_t fmt;
    uint16_t prov_len;
    if (len < 6) {
        lg_error("transport peer address refused backend=libfabric: too short len=%zu", len);
        return ST_ERR_INVALID;
    }
    memcpy(&fmt, addr, 4);
    memcpy(&prov_len, addr + 4, 2);
    const char *prov = f->info->fabric_attr->prov_name;
    if ((size_t)prov_len + 6 >= len || prov_len != strlen(prov) ||
        memcmp(addr + 6, prov, prov_len) != 0 || fmt != f->info->addr_format) {
        lg_error("transport peer address refused backend=libfabric: peer provider=%.*s "
                 "addr_format=%u, this provider=%s addr_format=%u; both sides must use the "
                 "same provider",
                 (int)((size_t)prov_len + 6 <= len ? prov_len : 0), (const char *)addr + 6, fmt,
                 prov, (unsigned)f->info->addr_format);
        return ST_ERR_INVALID;
    }
    const uint8_t *name = addr + 6 + prov_len;
    size_t name_len = len - 6 - prov_len;
    stt_fi_ep_t *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return ST_ERR_NOMEM;
    }
    for (stt_link_t *n = f->peers.next; n != &f->peers; n = n->next) {
        stt_fi_peer_t *peer = stt_container_of(n, stt_fi_peer_t, link);
        if (peer->name_len == name_len && memcmp(peer->name, name, name_len) == 0) {
            e->peer = peer;
            break;
        }
    }
    if (e->peer == NULL) {
        stt_fi_peer_t *peer = calloc(1, sizeof(*peer) + name_len);
        if (peer == NULL) {
            free(e);
            return ST_ERR_NOMEM;
        }
        int ret = fi_av_insert(f->av, name, 1, &peer->addr, 0, NULL);
        if (ret != 1) {
            free(peer);
            free(e);
            lg_error("transport call failed backend=libfabric call=fi_av_insert ret=%d error=%s",
                     ret, ret < 0 ? fi_strerror(-ret) : "address not inserted");
            return ST_ERR_TRANSPORT;
        }
        peer->name_len = name_len;
        memcpy(peer->name, name, name_len);
        stt_list_push(&f->peers, &peer->link);
        e->peer = peer;
    }
    e->peer->refs++;
    e->addr = e->peer->addr;
    *ep_p = &e->base;
    return ST_OK;
}

static st_status_t stt_fi_ep_flush(tp_ep_t *ep, int timeout_ms)
{
    /* Every op of ep has completed; with FI_DELIVERY_COMPLETE that means
     * puts are in the target's memory. */
    return ST_OK;
}

static void stt_fi_ep_close(tp_ep_t *ep, bool force)
{
    stt_fi_t *f = (stt_fi_t *)ep->tp;
    stt_fi_ep_t *e = (stt_fi_ep_t *)ep;
    stt_link_t *node = f->pending.next;
    while (node != &f->pending) {
        stt_op_t *op = stt_container_of(node, stt_op_t, pend);
        node = node->next;
        if (op->ep == ep) {
            stt_list_del(&op->pend);
            stt_op_complete(op, ST_ERR_CANCELLED);
        }
    }
    if (--e->peer->refs > 0) {
        return;
    }
    int ret = fi_av_remove(f->av, &e->peer->addr, 1, 0);
    if (ret != 0) {
        lg_warn("transport call failed backend=libfabric call=fi_av_remove error=%s",
                fi_strerror(-ret));
    }
    stt_list_del(&e->peer->link);
    free(e->peer);
}

static st_status_t stt_fi_rkey_unpack(tp_ep_t *ep, const void *key_v, size_t len,
                                      tp_rkey_t **rkey_p)
{
    stt_fi_t *f = (stt_fi_t *)ep->tp;
    const uint8_t *key = key_v;
    uint32_t flags, raw_len;
    uint64_t raw_base;
    if (len < STT_FI_KEY_HDR) {
        lg_error("transport remote key refused backend=libfabric: too short len=%zu", len);
        return ST_ERR_INVALID;
    }
    memcpy(&flags, key, 4);
    memcpy(&raw_len, key + 4, 4);
    memcpy(&raw_base, key + 8, 8);
    if ((flags & ~(uint32_t)(STT_FI_KEY_RAW | STT_FI_KEY_VIRT)) != 0 ||
        (size_t)raw_len != len - STT_FI_KEY_HDR ||
        ((flags & STT_FI_KEY_RAW) == 0) != (raw_len == 0)) {
        lg_error("transport remote key refused backend=libfabric: malformed flags=0x%x "
                 "raw_len=%u len=%zu",
                 flags, raw_len, len);
        return ST_ERR_INVALID;
    }
    stt_fi_rkey_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return ST_ERR_NOMEM;
    }
    r->virt = (flags & STT_FI_KEY_VIRT) != 0;
    if (flags & STT_FI_KEY_RAW) {
        int ret = fi_mr_map_raw(f->domain, raw_base, (uint8_t *)key + STT_FI_KEY_HDR, raw_len,
                                &r->key, 0);
        if (ret != 0) {
            free(r);
            return stt_fi_fail("fi_mr_map_raw", ret);
        }
        r->mapped = true;
    } else {
        memcpy(&r->key, key + 16, 8);
    }
    *rkey_p = &r->base;
    return ST_OK;
}

static void stt_fi_rkey_destroy(tp_rkey_t *rkey)
{
    stt_fi_rkey_t *r = (stt_fi_rkey_t *)rkey;
    if (r->mapped) {
        stt_fi_t *f = (stt_fi_t *)rkey->ep->tp;
        int ret = fi_mr_unmap_key(f->domain, r->key);
        if (ret != 0) {
            lg_warn("transport call failed backend=libfabric call=fi_mr_unmap_key error=%s",
                    fi_strerror(-ret));
        }
    }
    free(r);
}

/* Posts op once. Returns 0, -FI_EAGAIN, or another negative fi error. */
static ssize_t stt_fi_try_post(stt_fi_t *f, stt_op_t *op)
{
    stt_fi_ep_t *e = (stt_fi_ep_t *)op->ep;
    stt_fi_rkey_t *r = (stt_fi_rkey_t *)op->rkey;
    stt_fi_mem_t *m = (stt_fi_mem_t *)op->local_mem;
    uint64_t raddr = r->virt ? op->remote_addr : op->remote_addr - op->rkey->base;
    if (op->is_put) {
        return fi_write(f->ep, op->local, op->len, m->desc, e->addr, raddr, r->key,
                        (void *)op->backend_ctx);
    }
    return fi_read(f->ep, op->local, op->len, m->desc, e->addr, raddr, r->key,
                   (void *)op->backend_ctx);
}

static st_status_t stt_fi_post(stt_op_t *op)
{
    stt_fi_t *f = (stt_fi_t *)op->ep->tp;
    if (op->len > f->max_msg_size) {
        lg_error("transport %s refused backend=libfabric: len=%zu over max_msg_size=%zu",
                 op->is_put ? "put" : "get", op->len, f->max_msg_size);
        return ST_ERR_INVALID;
    }
    stt_list_init(&op->pend);
    if (stt_list_empty(&f->pending)) {
        ssize_t ret = stt_fi_try_post(f, op);
        if (ret == 0) {
            return ST_OK;
        }
        if (ret != -FI_EAGAIN) {
            return stt_fi_fail(op->is_put ? "fi_write" : "fi_read", (int)ret);
        }
    }
    stt_list_push(&f->pending, &op->pend);
    return ST_OK;
}

static int stt_fi_read_error(stt_fi_t *f)
{
    struct fi_cq_err_entry err = {0};
    ssize_t ret = fi_cq_readerr(f->cq, &err, 0);
    if (ret < 0) {
        if (ret == -FI_EAGAIN) {
            return 0;
        }
        return (int)stt_fi_fail("fi_cq_readerr", (int)ret);
    }
    char buf[256];
    const char *detail = fi_cq_strerror(f->cq, err.prov_errno, err.err_data, buf, sizeof(buf));
    if (err.err != FI_ECANCELED) {
        lg_warn_ratelimited("transport operation failed backend=libfabric error=%s "
                            "prov_errno=%d detail=%s",
                            fi_strerror(err.err), err.prov_errno, detail ? detail : "");
    }
    if (err.op_context != NULL) {
        stt_op_complete((stt_op_t *)err.op_context, stt_fi_status(err.err));
    }
    return 1;
}

static int stt_fi_progress(tp_transport_t *tp)
{
    stt_fi_t *f = (stt_fi_t *)tp;
    struct fi_cq_entry entries[STT_FI_CQ_BATCH];
    int n = 0;
    for (;;) {
        ssize_t ret = fi_cq_read(f->cq, entries, STT_FI_CQ_BATCH);
        if (ret > 0) {
            for (ssize_t i = 0; i < ret; i++) {
                stt_op_complete((stt_op_t *)entries[i].op_context, ST_OK);
            }
            n += (int)ret;
            if (ret < STT_FI_CQ_BATCH) {
                break;
            }
        } else if (ret == -FI_EAVAIL) {
            int r = stt_fi_read_error(f);
            if (r < 0) {
                return r;
            }
            n += r;
        } else if (ret == -FI_EAGAIN) {
            break;
        } else {
            return (int)stt_fi_fail("fi_cq_read", (int)ret);
        }
    }
    while (!stt_list_empty(&f->pending)) {
        stt_op_t *op = stt_container_of(f->pending.next, stt_op_t, pend);
        ssize_t ret = stt_fi_try_post(f, op);
        if (ret == -FI_EAGAIN) {
            break;
        }
        stt_list_del(&op->pend);
        n++;
        if (ret != 0) {
            (void)stt_fi_fail(op->is_put ? "fi_write" : "fi_read", (int)ret);
            stt_op_complete(op, ST_ERR_TRANSPORT);
        }
    }
    return n;
}

static st_status_t stt_fi_event_fd(tp_transport_t *tp, int *fd_p)
{
    stt_fi_t *f = (stt_fi_t *)tp;
    if (!f->has_wait_fd) {
        return ST_ERR_UNSUPPORTED;
    }
    int ret = fi_control(&f->cq->fid, FI_GETWAIT, fd_p);
    if (ret != 0) {
        lg_warn("transport has no event fd backend=libfabric call=fi_control(FI_GETWAIT) "
                "error=%s",
                fi_strerror(-ret));
        f->has_wait_fd = false;
        return ST_ERR_UNSUPPORTED;
    }
    return ST_OK;
}

static st_status_t stt_fi_arm(tp_transport_t *tp)
{
    stt_fi_t *f = (stt_fi_t *)tp;
    if (!f->has_wait_fd) {
        return ST_ERR_UNSUPPORTED;
    }
    if (!stt_list_empty(&f->pending)) {
        return ST_ERR_BUSY;
    }
    struct fid *fids[1] = {&f->cq->fid};
    int ret = fi_trywait(f->fabric, fids, 1);
    if (ret == 0) {
        return ST_OK;
    }
    if (ret == -FI_EAGAIN) {
        return ST_ERR_BUSY;
    }
    return stt_fi_fail("fi_trywait", ret);
}

/*
 * Whether the provider checks keys and access at the target. Measured on
 * libfabric 1.17 by test_transport's test_access_enforced (docs/transport.md,
 * "What each transport enforces"): tcp;ofi_rxm, shm, sockets and
 * udp;ofi_rxd refuse a write through a read-only key and through the key of
 * a deregistered region, and the bytes stay. A provider not measured
 * (verbs, efa, ...) counts as not enforcing, so its readers verify.
 */
static int stt_fi_enforces_access(const tp_transport_t *tp)
{
    static const char *const measured[] = {"tcp;ofi_rxm", "shm", "sockets", "udp;ofi_rxd"};
    const stt_fi_t *f = (const stt_fi_t *)tp;
    const char *prov = f->info->fabric_attr->prov_name;

    for (size_t i = 0; prov != NULL && i < sizeof(measured) / sizeof(measured[0]); i++) {
        if (strcmp(prov, measured[i]) == 0) {
            return 1;
        }
    }
    return 0;
}

const stt_ops_t stt_fabric_ops = {
    .name = "libfabric",
    .create = stt_fi_create,
    .destroy = stt_fi_destroy,
    .mem_register = stt_fi_mem_register,
    .mem_deregister = stt_fi_mem_deregister,
    .enforces_access = stt_fi_enforces_access,
    .connect = stt_fi_connect,
    .ep_flush = stt_fi_ep_flush,
    .ep_close = stt_fi_ep_close,
    .rkey_unpack = stt_fi_rkey_unpack,
    .rkey_destroy = stt_fi_rkey_destroy,
    .post = stt_fi_post,
    .progress = stt_fi_progress,
    .event_fd = stt_fi_event_fd,
    .arm = stt_fi_arm,
};
