/*
 * ucx.c - the UCX backend: one ucp context with RMA (and wakeup), one worker
 * in single-thread mode, endpoints from worker addresses with peer error
 * handling, ucp_mem_map regions, and ucp_get_nbx/ucp_put_nbx whose
 * callbacks free their requests; messages are active messages (id
 * STT_UCX_AM_ID) sent eagerly with a reply endpoint, received whole.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <unistd.h>

#include <ucp/api/ucp.h>
#include <xxhash.h>

#include "stt_internal.h"

#define STT_UCX_CLOSE_MS 10000
#define STT_UCX_AM_ID    7

/* The UCX address payload: a host id, then the worker address. Peers with
 * the same host id share a kernel (hostname and boot id). */
#define STT_UCX_HOST_ID_LEN 8

typedef struct stt_ucx {
    tp_transport_t base;
    uint8_t host_id[STT_UCX_HOST_ID_LEN];
    tp_peer_failure_t peer_failure;
    bool shm; /* the transports include shared memory that carries messages */
    ucp_context_h context;
    ucp_worker_h worker;
    int efd; /* -1: not asked yet or not available */
    bool efd_failed;
} stt_ucx_t;

typedef struct stt_ucx_mem {
    tp_mem_t base;
    ucp_mem_h memh;
} stt_ucx_mem_t;

typedef struct stt_ucx_ep {
    tp_ep_t base;
    ucp_ep_h ep;
} stt_ucx_ep_t;

typedef struct stt_ucx_rkey {
    tp_rkey_t base;
    ucp_rkey_h rkey;
    _Atomic int direct; /* 1: gets may copy through ucp_rkey_ptr (memory mapped here) */
} stt_ucx_rkey_t;

static st_status_t stt_ucx_fail(const char *call, ucs_status_t status)
{
    lg_error("transport call failed backend=ucx call=%s status=%s", call,
             ucs_status_string(status));
    return ST_ERR_TRANSPORT;
}

static st_status_t stt_ucx_status(ucs_status_t status)
{
    switch (status) {
    case UCS_OK: return ST_OK;
    case UCS_ERR_CANCELED: return ST_ERR_CANCELLED;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT: return ST_ERR_UNAVAILABLE;
    case UCS_ERR_NO_MEMORY: return ST_ERR_NOMEM;
    default: return ST_ERR_TRANSPORT;
    }
}

/* XXH3-64 of the hostname and the kernel's boot id. */
static void stt_ucx_host_id(uint8_t *id)
{
    char buf[256 + 64] = {0};
    (void)gethostname(buf, 255);
    size_t n = strlen(buf);
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t r = read(fd, buf + n, sizeof(buf) - n - 1);
        n += r > 0 ? (size_t)r : 0;
        close(fd);
    }
    uint64_t h = XXH3_64bits(buf, n);
    memcpy(id, &h, STT_UCX_HOST_ID_LEN);
}

/* A rendezvous message's data has landed (or failed). */
static void stt_ucx_am_data_done(void *request, ucs_status_t status, size_t length, void *user)
{
    tp_msg_t *m = user;
    ucp_request_free(request);
    if (status != UCS_OK || length != m->len) {
        lg_warn_ratelimited("transport message lost backend=ucx status=%s bytes=%zu",
                            ucs_status_string(status), m->len);
        free(m);
        return;
    }
    stt_msg_received(m->tp, m);
}

/* Runs inside ucp_worker_progress(): copies the message out and queues it. */
static ucs_status_t stt_ucx_am_recv(void *arg, const void *header, size_t header_length, void *data,
                                    size_t length, const ucp_am_recv_param_t *param)
{
    stt_ucx_t *u = arg;
    (void)header;
    (void)header_length;
    if (length == 0 || length > TP_MSG_MAX) {
        lg_warn_ratelimited("transport message dropped backend=ucx: bytes=%zu (1..%u)", length,
                            TP_MSG_MAX);
        return UCS_OK;
    }
    tp_msg_t *m = malloc(sizeof(*m) + length);
    if (m == NULL) {
        lg_warn_ratelimited("transport message dropped backend=ucx: out of memory bytes=%zu",
                            length);
        return UCS_OK;
    }
    m->tp = &u->base;
    m->route = (param->recv_attr & UCP_AM_RECV_ATTR_FIELD_REPLY_EP) ? param->reply_ep : NULL;
    m->len = length;
    if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
        ucp_request_param_t p = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
            .cb = {.recv_am = stt_ucx_am_data_done},
            .user_data = m,
        };
        ucs_status_ptr_t r = ucp_am_recv_data_nbx(u->worker, data, m->data, length, &p);
        if (r == NULL) {
            stt_msg_received(&u->base, m);
        } else if (UCS_PTR_IS_ERR(r)) {
            lg_warn_ratelimited("transport message lost backend=ucx call=ucp_am_recv_data_nbx "
                                "status=%s",
                                ucs_status_string(UCS_PTR_STATUS(r)));
            free(m);
        }
        return UCS_INPROGRESS; /* UCX owns the descriptor now */
    }
    memcpy(m->data, data, length);
    stt_msg_received(&u->base, m);
    return UCS_OK;
}

/*
 * Whether UCX's TLS list (cfg, else UCX_TLS, else UCX's default "all") keeps a
 * shared-memory transport that carries active messages (posix, sysv, xpmem;
 * the aliases sm, shm, mm and all). Without one, peers on this host talk over
 * TCP, whose endpoints must ask for peer failure detection: UCX 1.13 crashed
 * in uct_tcp_iface_progress when a reply went to a peer that had closed an
 * endpoint made without it (test_fuzz_tcall_tcp).
 */
static bool stt_ucx_tls_shm(const char *tls)
{
    static const char *const shm[] = {"all", "sm", "shm", "mm", "posix", "sysv", "xpmem"};
    bool exclude, named[sizeof(shm) / sizeof(shm[0])] = {false};
    const char *p;

    if (tls == NULL || tls[0] == '\0') {
        return true;
    }
    exclude = tls[0] == '^';
    p = tls + (exclude ? 1 : 0);
    while (*p != '\0') {
        size_t n = strcspn(p, ",");

        for (size_t i = 0; i < sizeof(shm) / sizeof(shm[0]); i++) {
            if (n == strlen(shm[i]) && strncmp(p, shm[i], n) == 0) {
                named[i] = true;
            }
        }
        p += n + (p[n] == ',');
    }
    if (!exclude) {
        for (size_t i = 0; i < sizeof(shm) / sizeof(shm[0]); i++) {
            if (named[i]) {
                return true;
            }
        }
        return false;
    }
    /* "^list": everything but the list. */
    return !(named[1] || named[2] || named[3] || (named[4] && named[5] && named[6]));
}

/*
 * UCX settings strata applies unless the environment names them (docs/transport.md,
 * "UCX settings strata applies"). UCX 1.13's tcp transport has no put bcopy
 * nor get, so ucp_put_nbx and ucp_get_nbx over it are emulated with active
 * messages of at most TCP_TX_SEG_SIZE bytes (8K by default), each answered by
 * a completion message: 128 sends and 128 answers per MiB. Segments of 256K
 * made 1 MiB puts across namespaces about 5x faster (docs/performance.md,
 * "Across namespaces (issue #23)"); the receiver's segment must hold a whole
 * sender's segment plus its header, hence RX twice TX. These are transport
 * (uct) settings, which ucp_config_modify() does not reach in UCX 1.13: they
 * go into the environment (without overwriting), once, before the first
 * ucp_config_read(); both ends of a connection must agree, and strata's own
 * daemon and client do.
 */
static const char *const stt_ucx_defaults[][2] = {
    {"UCX_TCP_TX_SEG_SIZE", "256K"},
    {"UCX_TCP_RX_SEG_SIZE", "512K"},
};

static pthread_once_t stt_ucx_defaults_once = PTHREAD_ONCE_INIT;

static void stt_ucx_apply_defaults(void)
{
    for (size_t i = 0; i < sizeof(stt_ucx_defaults) / sizeof(stt_ucx_defaults[0]); i++) {
        if (setenv(stt_ucx_defaults[i][0], stt_ucx_defaults[i][1], 0) != 0) {
            lg_warn("transport: cannot set %s=%s errno=%d", stt_ucx_defaults[i][0],
                    stt_ucx_defaults[i][1], errno);
        }
    }
}

static st_status_t stt_ucx_create(const tp_config_t *cfg, tp_transport_t **tp_p, void **addr_p,
                                  size_t *addr_len_p)
{
    ucp_config_t *config;
    (void)pthread_once(&stt_ucx_defaults_once, stt_ucx_apply_defaults);
    ucs_status_t us = ucp_config_read(NULL, NULL, &config);
    if (us != UCS_OK) {
        return stt_ucx_fail("ucp_config_read", us);
    }
    if (cfg->ucx_tls != NULL && (us = ucp_config_modify(config, "TLS", cfg->ucx_tls)) != UCS_OK) {
        lg_error("transport config refused backend=ucx key=TLS value=%s status=%s", cfg->ucx_tls,
                 ucs_status_string(us));
        ucp_config_release(config);
        return ST_ERR_INVALID;
    }
    if (cfg->ucx_devices != NULL &&
        (us = ucp_config_modify(config, "NET_DEVICES", cfg->ucx_devices)) != UCS_OK) {
        lg_error("transport config refused backend=ucx key=NET_DEVICES value=%s status=%s",
                 cfg->ucx_devices, ucs_status_string(us));
        ucp_config_release(config);
        return ST_ERR_INVALID;
    }

    stt_ucx_t *u = calloc(1, sizeof(*u));
    if (u == NULL) {
        ucp_config_release(config);
        return ST_ERR_NOMEM;
    }
    u->efd = -1;
    u->peer_failure = cfg->ucx_peer_failure;
    u->shm = stt_ucx_tls_shm(cfg->ucx_tls != NULL ? cfg->ucx_tls : getenv("UCX_TLS"));
    stt_ucx_host_id(u->host_id);

    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES,
        .features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
    };
    us = ucp_init(&params, config, &u->context);
    ucp_config_release(config);
    if (us != UCS_OK) {
        free(u);
        if (us == UCS_ERR_NO_DEVICE || us == UCS_ERR_UNSUPPORTED) {
            lg_error("transport unavailable backend=ucx call=ucp_init status=%s tls=%s",
                     ucs_status_string(us), cfg->ucx_tls ? cfg->ucx_tls : "(default)");
            return ST_ERR_UNSUPPORTED;
        }
        return stt_ucx_fail("ucp_init", us);
    }

    ucp_worker_params_t wparams = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE,
        .thread_mode = UCS_THREAD_MODE_SINGLE,
    };
    st_status_t st;
    us = ucp_worker_create(u->context, &wparams, &u->worker);
    if (us != UCS_OK) {
        st = stt_ucx_fail("ucp_worker_create", us);
        goto err_cleanup;
    }

    ucp_am_handler_param_t am = {
        .field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_FLAGS |
                      UCP_AM_HANDLER_PARAM_FIELD_CB | UCP_AM_HANDLER_PARAM_FIELD_ARG,
        .id = STT_UCX_AM_ID,
        .flags = UCP_AM_FLAG_WHOLE_MSG,
        .cb = stt_ucx_am_recv,
        .arg = u,
    };
    us = ucp_worker_set_am_recv_handler(u->worker, &am);
    if (us != UCS_OK) {
        st = stt_ucx_fail("ucp_worker_set_am_recv_handler", us);
        goto err_worker_destroy;
    }

    /* The worker address is copied out and released at once, so nothing
     * depends on the lifetime of UCX's buffer. */
    ucp_address_t *addr;
    size_t addr_len;
    us = ucp_worker_get_address(u->worker, &addr, &addr_len);
    if (us != UCS_OK) {
        st = stt_ucx_fail("ucp_worker_get_address", us);
        goto err_worker_destroy;
    }
    uint8_t *copy = malloc(STT_UCX_HOST_ID_LEN + addr_len);
    if (copy == NULL) {
        ucp_worker_release_address(u->worker, addr);
        st = ST_ERR_NOMEM;
        goto err_worker_destroy;
    }
    memcpy(copy, u->host_id, STT_UCX_HOST_ID_LEN);
    memcpy(copy + STT_UCX_HOST_ID_LEN, addr, addr_len);
    ucp_worker_release_address(u->worker, addr);

    *tp_p = &u->base;
    *addr_p = copy;
    *addr_len_p = STT_UCX_HOST_ID_LEN + addr_len;
    return ST_OK;

err_worker_destroy:
    ucp_worker_destroy(u->worker);
err_cleanup:
    ucp_cleanup(u->context);
    free(u);
    return st;
}

static void stt_ucx_destroy(tp_transport_t *tp)
{
    stt_ucx_t *u = (stt_ucx_t *)tp;
    ucp_worker_destroy(u->worker);
    ucp_cleanup(u->context);
    free(u);
}

static st_status_t stt_ucx_mem_register(tp_transport_t *tp, void **addr_p, size_t len,
                                        unsigned access, tp_mem_t **mem_p, void **key_p,
                                        size_t *key_len_p)
{
    stt_ucx_t *u = (stt_ucx_t *)tp;
    stt_ucx_mem_t *m = calloc(1, sizeof(*m));
    if (m == NULL) {
        return ST_ERR_NOMEM;
    }
    /* Allocated by UCX, the region lives in memory that peers on the same
     * host map directly (posix/sysv), so their gets need no CPU here. */
    ucp_mem_map_params_t mp = {
        .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_FLAGS | UCP_MEM_MAP_PARAM_FIELD_PROT,
        .address = *addr_p,
        .length = len,
        .flags = *addr_p == NULL ? UCP_MEM_MAP_ALLOCATE : 0,
        /* Asked for, not enforced by tcp, sm or cma (stt_ucx_enforces_access()). */
        .prot = UCP_MEM_MAP_PROT_LOCAL_READ | UCP_MEM_MAP_PROT_LOCAL_WRITE |
                ((access & TP_REMOTE_READ) ? UCP_MEM_MAP_PROT_REMOTE_READ : 0) |
                ((access & TP_REMOTE_WRITE) ? UCP_MEM_MAP_PROT_REMOTE_WRITE : 0),
    };
    ucs_status_t us = ucp_mem_map(u->context, &mp, &m->memh);
    if (us != UCS_OK) {
        free(m);
        lg_error("transport call failed backend=ucx call=ucp_mem_map addr=%p len=%zu "
                 "allocate=%d status=%s",
                 *addr_p, len, *addr_p == NULL, ucs_status_string(us));
        return us == UCS_ERR_NO_MEMORY ? ST_ERR_NOMEM : ST_ERR_TRANSPORT;
    }
    if (*addr_p == NULL) {
        ucp_mem_attr_t attr = {.field_mask =
                                   UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH};
        us = ucp_mem_query(m->memh, &attr);
        if (us != UCS_OK || attr.length < len) {
            ucp_mem_unmap(u->context, m->memh);
            free(m);
            return stt_ucx_fail("ucp_mem_query", us != UCS_OK ? us : UCS_ERR_NO_MEMORY);
        }
        *addr_p = attr.address;
    }
    void *packed;
    size_t packed_len;
    us = ucp_rkey_pack(u->context, m->memh, &packed, &packed_len);
    if (us != UCS_OK) {
        ucp_mem_unmap(u->context, m->memh);
        free(m);
        return stt_ucx_fail("ucp_rkey_pack", us);
    }
    void *copy = malloc(packed_len);
    if (copy == NULL) {
        ucp_rkey_buffer_release(packed);
        ucp_mem_unmap(u->context, m->memh);
        free(m);
        return ST_ERR_NOMEM;
    }
    memcpy(copy, packed, packed_len);
    ucp_rkey_buffer_release(packed);
    *mem_p = &m->base;
    *key_p = copy;
    *key_len_p = packed_len;
    return ST_OK;
}

static void stt_ucx_mem_deregister(tp_transport_t *tp, tp_mem_t *mem)
{
    stt_ucx_t *u = (stt_ucx_t *)tp;
    stt_ucx_mem_t *m = (stt_ucx_mem_t *)mem;
    ucs_status_t us = ucp_mem_unmap(u->context, m->memh);
    if (us != UCS_OK) {
        (void)stt_ucx_fail("ucp_mem_unmap", us);
    }
    free(m);
}

static void stt_ucx_ep_error(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    stt_ucx_ep_t *e = arg;
    lg_warn("transport peer failed backend=ucx status=%s", ucs_status_string(status));
    e->base.error =
        stt_ucx_status(status) == ST_ERR_TRANSPORT ? ST_ERR_TRANSPORT : ST_ERR_UNAVAILABLE;
}

static st_status_t stt_ucx_connect(tp_transport_t *tp, const void *addr, size_t len, tp_ep_t **ep_p)
{
    stt_ucx_t *u = (stt_ucx_t *)tp;
    if (len <= STT_UCX_HOST_ID_LEN) {
        lg_error("transport peer address refused backend=ucx: too short len=%zu", len);
        return ST_ERR_INVALID;
    }
    bool same_host = memcmp(addr, u->host_id, STT_UCX_HOST_ID_LEN) == 0;
    bool detect = u->peer_failure == TP_PEER_FAILURE_ON ||
                  (u->peer_failure == TP_PEER_FAILURE_AUTO && (!same_host || !u->shm));
    stt_ucx_ep_t *e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return ST_ERR_NOMEM;
    }
    ucp_ep_params_t ep_params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)((const uint8_t *)addr + STT_UCX_HOST_ID_LEN),
        .err_mode = detect ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE,
        .err_handler = {.cb = stt_ucx_ep_error, .arg = e},
    };
    ucs_status_t us = ucp_ep_create(u->worker, &ep_params, &e->ep);
    if (us == UCS_ERR_UNREACHABLE && detect) {
        /* No transport to this peer detects failures (UCX 1.13's shared
         * memory does not); connect without. */
        ep_params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
        us = ucp_ep_create(u->worker, &ep_params, &e->ep);
        if (us == UCS_OK) {
            lg_info("transport endpoint without peer failure detection backend=ucx "
                    "(the selected transports do not offer it)");
        }
    }
    if (us != UCS_OK) {
        free(e);
        lg_error("transport call failed backend=ucx call=ucp_ep_create status=%s "
                 "address_bytes=%zu",
                 ucs_status_string(us), len);
        return us == UCS_ERR_UNREACHABLE ? ST_ERR_UNAVAILABLE : ST_ERR_TRANSPORT;
    }
    lg_debug("transport endpoint created backend=ucx same_host=%d peer_failure_detection=%d",
             same_host, ep_params.err_mode == UCP_ERR_HANDLING_MODE_PEER);
    *ep_p = &e->base;
    return ST_OK;
}

/* Progresses until request (from a call without a callback) is done. */
static ucs_status_t stt_ucx_wait_request(stt_ucx_t *u, ucs_status_ptr_t request, int timeout_ms,
                                         bool *gave_up_p)
{
    *gave_up_p = false;
    if (request == NULL) {
        return UCS_OK;
    }
    if (UCS_PTR_IS_ERR(request)) {
        return UCS_PTR_STATUS(request);
    }
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : stt_now_ms() + (uint64_t)timeout_ms;
    ucs_status_t us;
    while ((us = ucp_request_check_status(request)) == UCS_INPROGRESS) {
        /* The deadline holds whether or not the worker made progress: other
         * endpoints' events (or a peer's retries) can keep progress nonzero
         * while this request never completes. */
        (void)stt_progress_all(&u->base);
        if (ucp_request_check_status(request) == UCS_INPROGRESS && stt_now_ms() >= deadline) {
            /* Freed now, UCX releases it when it finishes. */
            ucp_request_free(request);
            *gave_up_p = true;
            return UCS_ERR_TIMED_OUT;
        }
    }
    ucp_request_free(request);
    return us;
}

static st_status_t stt_ucx_ep_flush(tp_ep_t *ep, int timeout_ms)
{
    stt_ucx_t *u = (stt_ucx_t *)ep->tp;
    stt_ucx_ep_t *e = (stt_ucx_ep_t *)ep;
    ucp_request_param_t param = {.op_attr_mask = 0};
    bool gave_up;
    ucs_status_t us =
        stt_ucx_wait_request(u, ucp_ep_flush_nbx(e->ep, &param), timeout_ms, &gave_up);
    if (gave_up) {
        lg_warn("transport flush timed out backend=ucx timeout_ms=%d", timeout_ms);
        return ST_ERR_TIMEOUT;
    }
    if (us != UCS_OK) {
        lg_error("transport call failed backend=ucx call=ucp_ep_flush_nbx status=%s",
                 ucs_status_string(us));
        return stt_ucx_status(us);
    }
    return ST_OK;
}

static void stt_ucx_ep_close(tp_ep_t *ep, bool force)
{
    stt_ucx_t *u = (stt_ucx_t *)ep->tp;
    stt_ucx_ep_t *e = (stt_ucx_ep_t *)ep;
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
        .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0,
    };
    bool gave_up;
    ucs_status_t us =
        stt_ucx_wait_request(u, ucp_ep_close_nbx(e->ep, &param), STT_UCX_CLOSE_MS, &gave_up);
    if (gave_up) {
        lg_warn("transport endpoint close timed out backend=ucx timeout_ms=%d", STT_UCX_CLOSE_MS);
    } else if (us != UCS_OK && us != UCS_ERR_CANCELED && !force) {
        lg_warn("transport endpoint close failed backend=ucx call=ucp_ep_close_nbx status=%s",
                ucs_status_string(us));
    }
}

static st_status_t stt_ucx_rkey_unpack(tp_ep_t *ep, const void *key, size_t len, tp_rkey_t **rkey_p)
{
    stt_ucx_ep_t *e = (stt_ucx_ep_t *)ep;
    stt_ucx_rkey_t *r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return ST_ERR_NOMEM;
    }
    ucs_status_t us = ucp_ep_rkey_unpack(e->ep, key, &r->rkey);
    if (us != UCS_OK) {
        free(r);
        lg_error("transport call failed backend=ucx call=ucp_ep_rkey_unpack status=%s "
                 "key_bytes=%zu",
                 ucs_status_string(us), len);
        return us == UCS_ERR_INVALID_PARAM ? ST_ERR_INVALID : ST_ERR_TRANSPORT;
    }
    /*
     * Same host: when UCX maps the remote region into this process (its
     * shared-memory transports), a get is a plain copy through
     * ucp_rkey_ptr on the calling thread, without UCX's per-operation
     * path. STRATA_UCX_RKEY_PTR=0 turns this off (for measurements).
     */
    const char *env = getenv("STRATA_UCX_RKEY_PTR");
    atomic_init(&r->direct, !(env != NULL && strcmp(env, "0") == 0));
    *rkey_p = &r->base;
    return ST_OK;
}

static void stt_ucx_rkey_destroy(tp_rkey_t *rkey)
{
    stt_ucx_rkey_t *r = (stt_ucx_rkey_t *)rkey;
    ucp_rkey_destroy(r->rkey);
    free(r);
}

/* Runs inside ucp_worker_progress(): records the completion, frees the request. */
static void stt_ucx_op_done(void *request, ucs_status_t status, void *user_data)
{
    stt_op_t *op = user_data;
    if (status != UCS_OK && status != UCS_ERR_CANCELED) {
        lg_warn_ratelimited("transport operation failed backend=ucx status=%s",
                            ucs_status_string(status));
    }
    ucp_request_free(request);
    stt_op_complete(op, stt_ucx_status(status));
}

static st_status_t stt_ucx_get_now(tp_rkey_t *rkey, void *local, uint64_t remote_addr, size_t len)
{
    stt_ucx_rkey_t *r = (stt_ucx_rkey_t *)rkey;
    void *src;
    if (!atomic_load_explicit(&r->direct, memory_order_relaxed)) {
        return ST_ERR_UNSUPPORTED;
    }
    if (ucp_rkey_ptr(r->rkey, remote_addr, &src) != UCS_OK) {
        /* Not mapped here (another host, or a TCP/CMA-only transport): UCX's path from now on. */
        atomic_store_explicit(&r->direct, 0, memory_order_relaxed);
        return ST_ERR_UNSUPPORTED;
    }
    stt_copy(local, src, len);
    return ST_OK;
}

static st_status_t stt_ucx_post(stt_op_t *op)
{
    stt_ucx_ep_t *e = (stt_ucx_ep_t *)op->ep;
    stt_ucx_rkey_t *r = (stt_ucx_rkey_t *)op->rkey;
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb = {.send = stt_ucx_op_done},
        .user_data = op,
    };
    ucs_status_ptr_t request;
    /* tp_get() has checked the range against the key's region. */
    if (!op->is_put && stt_ucx_get_now(op->rkey, op->local, op->remote_addr, op->len) == ST_OK) {
        stt_op_complete(op, ST_OK);
        return ST_OK;
    }
    if (op->is_put) {
        request = ucp_put_nbx(e->ep, op->local, op->len, op->remote_addr, r->rkey, &param);
    } else {
        request = ucp_get_nbx(e->ep, op->local, op->len, op->remote_addr, r->rkey, &param);
    }
    if (request == NULL) {
        /* Completed in place; the callback will not be called. */
        stt_op_complete(op, ST_OK);
        return ST_OK;
    }
    if (UCS_PTR_IS_ERR(request)) {
        ucs_status_t us = UCS_PTR_STATUS(request);
        lg_error("transport call failed backend=ucx call=%s status=%s len=%zu",
                 op->is_put ? "ucp_put_nbx" : "ucp_get_nbx", ucs_status_string(us), op->len);
        return stt_ucx_status(us) == ST_ERR_UNAVAILABLE ? ST_ERR_UNAVAILABLE : ST_ERR_TRANSPORT;
    }
    return ST_OK;
}

/* A message has left (or failed): its copy goes. */
static void stt_ucx_msg_done(void *request, ucs_status_t status, void *user_data)
{
    if (status != UCS_OK && status != UCS_ERR_CANCELED) {
        lg_warn_ratelimited("transport message failed backend=ucx status=%s",
                            ucs_status_string(status));
    }
    ucp_request_free(request);
    free(user_data);
}

static st_status_t stt_ucx_msg_send(tp_transport_t *tp, tp_ep_t *ep, void *route, const void *data,
                                    size_t len)
{
    (void)tp;
    ucp_ep_h to = ep != NULL ? ((stt_ucx_ep_t *)ep)->ep : (ucp_ep_h)route;
    void *copy = malloc(len);
    if (copy == NULL) {
        return ST_ERR_NOMEM;
    }
    memcpy(copy, data, len);
    ucp_request_param_t param = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FIELD_FLAGS,
        .cb = {.send = stt_ucx_msg_done},
        .user_data = copy,
        /* A reply endpoint for the peer; eager, so that the peer gets it whole
         * in one callback without a rendezvous round trip. */
        .flags = UCP_AM_SEND_FLAG_REPLY | UCP_AM_SEND_FLAG_EAGER,
    };
    ucs_status_ptr_t request = ucp_am_send_nbx(to, STT_UCX_AM_ID, NULL, 0, copy, len, &param);
    if (request == NULL) {
        free(copy);
        return ST_OK;
    }
    if (UCS_PTR_IS_ERR(request)) {
        ucs_status_t us = UCS_PTR_STATUS(request);
        free(copy);
        lg_warn_ratelimited("transport call failed backend=ucx call=ucp_am_send_nbx status=%s "
                            "bytes=%zu",
                            ucs_status_string(us), len);
        return stt_ucx_status(us) == ST_ERR_UNAVAILABLE ? ST_ERR_UNAVAILABLE : ST_ERR_TRANSPORT;
    }
    return ST_OK;
}

static int stt_ucx_progress(tp_transport_t *tp)
{
    stt_ucx_t *u = (stt_ucx_t *)tp;
    return (int)ucp_worker_progress(u->worker);
}

static st_status_t stt_ucx_event_fd(tp_transport_t *tp, int *fd_p)
{
    stt_ucx_t *u = (stt_ucx_t *)tp;
    if (u->efd < 0 && !u->efd_failed) {
        ucs_status_t us = ucp_worker_get_efd(u->worker, &u->efd);
        if (us != UCS_OK) {
            lg_warn("transport has no event fd backend=ucx call=ucp_worker_get_efd status=%s",
                    ucs_status_string(us));
            u->efd = -1;
            u->efd_failed = true;
        }
    }
    if (u->efd < 0) {
        return ST_ERR_UNSUPPORTED;
    }
    *fd_p = u->efd;
    return ST_OK;
}

static st_status_t stt_ucx_arm(tp_transport_t *tp)
{
    stt_ucx_t *u = (stt_ucx_t *)tp;
    int fd;
    if (stt_ucx_event_fd(tp, &fd) != ST_OK) {
        return ST_ERR_UNSUPPORTED;
    }
    ucs_status_t us = ucp_worker_arm(u->worker);
    if (us == UCS_OK) {
        return ST_OK;
    }
    if (us == UCS_ERR_BUSY) {
        return ST_ERR_BUSY;
    }
    return stt_ucx_fail("ucp_worker_arm", us);
}

/*
 * UCX 1.13 over the transports this machine has does not refuse a write
 * through a read-only key or a key whose region was unmapped: tcp emulates
 * RMA with active messages that the target applies to the address given,
 * cma writes with process_vm_writev, and sm peers map the region writable
 * (measured by test_transport's test_access_enforced; docs/transport.md).
 * InfiniBand (rc, dc) would check keys in the adapter, but the transports a
 * worker selects are known only per endpoint, so UCX reports 0 throughout.
 */
static int stt_ucx_enforces_access(const tp_transport_t *tp)
{
    (void)tp;
    return 0;
}

const stt_ops_t stt_ucx_ops = {
    .name = "ucx",
    .create = stt_ucx_create,
    .destroy = stt_ucx_destroy,
    .mem_register = stt_ucx_mem_register,
    .mem_deregister = stt_ucx_mem_deregister,
    .enforces_access = stt_ucx_enforces_access,
    .connect = stt_ucx_connect,
    .ep_flush = stt_ucx_ep_flush,
    .ep_close = stt_ucx_ep_close,
    .rkey_unpack = stt_ucx_rkey_unpack,
    .rkey_destroy = stt_ucx_rkey_destroy,
    .post = stt_ucx_post,
    .progress = stt_ucx_progress,
    .event_fd = stt_ucx_event_fd,
    .arm = stt_ucx_arm,
    .msg_send = stt_ucx_msg_send,
    .get_now = stt_ucx_get_now,
};
