/*
 * transport.h - the data-plane transport: one-sided get and put between
 * registered memory regions, behind one small interface with two backends
 * (UCX and libfabric). Internal to strata: the daemon and the client library
 * link it; it is not part of include/strata/.
 *
 * The model, in the order things happen:
 *
 *   target (daemon)                          initiator (client)
 *   tp_create()                    tp_create()
 *   tp_mem_alloc(arena)            tp_mem_register(buffer)
 *   tp_address() ---- control plane ---->  tp_connect()
 *   tp_mem_rkey() ---- control plane --->  tp_rkey_unpack()
 *   loop: tp_progress()            tp_get()/put() ... callbacks
 *                                            from tp_progress()
 *
 * The target must keep progressing its transport (a loop of
 * tp_progress() and tp_wait()) while peers work on its
 * memory: with TCP (UCX's tcp, libfabric's tcp;ofi_rxm) and with some
 * shared-memory paths the target's CPU serves the remote operations.
 *
 * Address and remote-key blobs carry a small header (magic, backend, length,
 * XXH3-64 checksum), so bytes that were cut short, corrupted, or produced by
 * the other backend are refused with ST_ERR_INVALID and a log line saying what
 * was wrong, instead of reaching the library.
 *
 * Remote addresses are always virtual addresses in the target's address
 * space (base of the registered region + offset), whatever the backend does
 * underneath (libfabric providers without FI_MR_VIRT_ADDR get the offset).
 * The unpacked remote key knows its region's bounds, and an operation that
 * reaches outside them is refused with ST_ERR_INVALID before it is posted.
 *
 * Thread safety: a transport and every object made from it (regions,
 * endpoints, remote keys) belong to one thread at a time; the caller
 * serialises. Different transports are independent. Callbacks run only from
 * inside tp_progress() and the calls that progress internally
 * (tp_ep_flush(), tp_ep_close(), tp_destroy());
 * never from inside tp_get()/put() or tp_wait().
 *
 * Completion: a get's callback means the data is in the local buffer. A
 * put's callback means the local buffer may be reused; the data is in the
 * target's memory once tp_ep_flush() has returned ST_OK (UCX puts
 * complete locally; libfabric puts use FI_DELIVERY_COMPLETE where the
 * provider offers it). Flush before telling the target (commit).
 *
 * Errors: every function returns st_status_t; backend failures are
 * ST_ERR_TRANSPORT, logged once with the backend and the library call that
 * failed (backend=ucx call=ucp_ep_create status=...).
 */
#ifndef STRATA_TRANSPORT_H
#define STRATA_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

typedef enum tp_backend { TP_UCX = 1, TP_FABRIC = 2 } tp_backend_t;

/*
 * Configuration of one transport. Zero-initialise, then set what you need;
 * NULL strings mean the library's own default. The strings are copied by
 * tp_create().
 */
/* UCX peer failure detection (ucp error handling mode) of new endpoints. */
typedef enum tp_peer_failure {
    /* On for peers on other hosts; off for peers on this host, because
     * UCX 1.13's shared-memory transports cannot detect a failed peer and
     * asking for it would send same-host traffic over TCP; on for this host
     * too when the transports (ucx_tls, else UCX_TLS) hold no shared memory
     * that carries messages (no sm, shm, mm, posix, sysv, xpmem, all), so
     * that TCP carries same-host traffic anyway: a reply to a peer that had
     * closed an endpoint made without detection crashed the replying
     * process inside UCX. */
    TP_PEER_FAILURE_AUTO = 0,
    TP_PEER_FAILURE_ON = 1, /* always (falls back to off where unsupported) */
    TP_PEER_FAILURE_OFF = 2 /* never */
} tp_peer_failure_t;

typedef struct tp_config {
    tp_backend_t backend;
    /* UCX: the transports to use ("sm,self", "tcp,self", "rc,sm,self");
     * NULL keeps UCX's default (and the UCX_TLS environment variable). */
    const char *ucx_tls;
    /* UCX: the network devices ("mlx5_0:1", "lo"); NULL keeps the default. */
    const char *ucx_devices;
    /* UCX: peer failure detection; zero (AUTO) is the default. */
    tp_peer_failure_t ucx_peer_failure;
    /* libfabric: the provider ("tcp;ofi_rxm", "shm", "verbs;ofi_rxm", "efa");
     * NULL takes the first provider that offers FI_RMA on an RDM endpoint. */
    const char *fabric_provider;
    /* libfabric: the domain (an interface such as "lo" or "eth0" for tcp, a
     * device such as "mlx5_0" for verbs); NULL takes the first one. */
    const char *fabric_domain;
} tp_config_t;

typedef struct tp_transport tp_transport_t; /* a context + worker */
typedef struct tp_mem tp_mem_t;             /* a registered region */
typedef struct tp_ep tp_ep_t;               /* a connection to a peer */
typedef struct tp_rkey tp_rkey_t;           /* a peer's region, unpacked */

/*
 * Completion callback of tp_get()/put(): status is ST_OK when the
 * data has arrived (get) or the local buffer may be reused (put; see
 * "Completion" above), or the error (ST_ERR_TRANSPORT, ST_ERR_UNAVAILABLE
 * when the peer is gone, ST_ERR_CANCELLED when the endpoint was closed
 * first). Called exactly once per accepted operation, from the calls that
 * progress. It may post new operations (on an endpoint that is closing they
 * are refused with ST_ERR_CANCELLED); it must not destroy the transport,
 * close an endpoint or call tp_ep_flush().
 */
typedef void (*tp_cb_t)(void *user, st_status_t status);

/*
 * Parses "ucx" or "libfabric" (also "fabric", "ofi") into *backend_p.
 * Returns ST_OK, or ST_ERR_INVALID naming the text (*backend_p untouched).
 */
st_status_t tp_parse_backend(const char *text, tp_backend_t *backend_p);

/* Returns "ucx" or "libfabric" ("unknown" otherwise). Never NULL. */
const char *tp_backend_name(tp_backend_t backend);

/*
 * Creates a transport (UCX: context with RMA + worker; libfabric: fabric,
 * domain, CQ, AV and one RDM endpoint) from cfg and writes it to *tp_p.
 * Returns ST_OK; ST_ERR_INVALID for a bad config; ST_ERR_UNSUPPORTED when the
 * backend or provider does not offer RMA here; ST_ERR_NOMEM; ST_ERR_TRANSPORT.
 */
st_status_t tp_create(const tp_config_t *cfg, tp_transport_t **tp_p);

/*
 * Destroys tp: closes remaining endpoints (cancelling their operations),
 * destroys remaining remote keys, deregisters remaining regions, then the
 * worker/endpoint and the context, in that order. NULL is ignored.
 */
void tp_destroy(tp_transport_t *tp);

/* Returns the backend of tp. */
tp_backend_t tp_backend(const tp_transport_t *tp);

/*
 * Returns, in *addr_p and *len_p, this transport's address as bytes for the
 * control plane to send to peers. The bytes are owned by tp and stay valid
 * until tp_destroy(). Returns ST_OK.
 */
st_status_t tp_address(tp_transport_t *tp, const void **addr_p, size_t *len_p);

/*
 * Registers [addr, addr + len) for local use and for remote access (read and
 * write: see tp_mem_map() for a read-only region) and writes the handle to *mem_p. len must be positive. Registration
 * is expensive: do it once per arena or buffer, never per operation.
 * Returns ST_OK, ST_ERR_INVALID, ST_ERR_NOMEM or ST_ERR_TRANSPORT.
 */
st_status_t tp_mem_register(tp_transport_t *tp, void *addr, size_t len, tp_mem_t **mem_p);

/*
 * Access a peer has to a region through its remote key. A region registered
 * without TP_REMOTE_WRITE is read-only for peers *where the
 * backend enforces it*: tp_enforces_access() says whether it does
 * (docs/transport.md, "What each transport enforces"). The owner's own
 * access (local read and write) is never restricted.
 */
#define TP_REMOTE_READ  1u
#define TP_REMOTE_WRITE 2u
#define TP_REMOTE_RW    (TP_REMOTE_READ | TP_REMOTE_WRITE)

/*
 * Registers [addr, addr + len) with the remote access in access (a non-empty
 * set of TP_REMOTE_READ and TP_REMOTE_WRITE) and writes
 * the handle to *mem_p; addr NULL allocates the region as
 * tp_mem_alloc() does. tp_mem_register() and
 * tp_mem_alloc() are this call with TP_REMOTE_RW.
 * Returns ST_OK, ST_ERR_INVALID (len 0, access empty or unknown bits),
 * ST_ERR_NOMEM or ST_ERR_TRANSPORT.
 */
st_status_t tp_mem_map(tp_transport_t *tp, void *addr, size_t len, unsigned access,
                       tp_mem_t **mem_p);

/*
 * Returns 1 when tp's backend and path refuse, at the target, a remote write
 * through the key of a region registered without TP_REMOTE_WRITE,
 * and a remote operation through the key of a region already deregistered
 * (both measured by tests/unit/test_transport.c: test_access_enforced);
 * 0 when a peer holding any key can change any registered byte (UCX 1.13
 * over tcp, sm/posix and cma: the target does not check keys, same-host
 * peers map the memory writable). With 0, readers must verify what they
 * read (checksums): nothing the transport does keeps committed bytes as
 * they were.
 */
int tp_enforces_access(const tp_transport_t *tp);

/*
 * Allocates len bytes of registered memory and writes the handle to *mem_p;
 * tp_mem_addr() gives its address. Prefer this for a region that
 * peers read (the daemon's arenas): UCX then places it in shared memory that
 * processes on the same host map and read directly, without the target's
 * CPU (registered user memory falls back to software emulation over shared
 * memory in UCX 1.13); libfabric gets anonymous memory (transparent huge
 * pages advised). Its contents are unspecified; it is freed by
 * tp_mem_deregister(). Returns ST_OK, ST_ERR_INVALID (len 0),
 * ST_ERR_NOMEM or ST_ERR_TRANSPORT.
 */
st_status_t tp_mem_alloc(tp_transport_t *tp, size_t len, tp_mem_t **mem_p);

/* Returns the address of mem's region. */
void *tp_mem_addr(const tp_mem_t *mem);

/* Returns the length of mem's region. */
size_t tp_mem_len(const tp_mem_t *mem);

/*
 * Deregisters mem (and frees it if tp_mem_alloc() made it). No
 * operation on it may be in flight. NULL is ignored.
 */
void tp_mem_deregister(tp_transport_t *tp, tp_mem_t *mem);

/*
 * Returns, in *buf_p and *len_p, the packed remote key of mem (the bytes a
 * peer passes to tp_rkey_unpack()). The bytes are owned by mem and
 * stay valid until it is deregistered. Returns ST_OK.
 */
st_status_t tp_mem_rkey(tp_mem_t *mem, const void **buf_p, size_t *len_p);

/*
 * Connects an endpoint to the peer whose tp_address() bytes are
 * [addr, addr + len) and writes it to *ep_p. Connection setup may finish
 * lazily on the first operation. Returns ST_OK; ST_ERR_INVALID when the bytes
 * are not a well-formed address of this backend and provider (the log line
 * says why); ST_ERR_NOMEM; ST_ERR_TRANSPORT.
 */
st_status_t tp_connect(tp_transport_t *tp, const void *addr, size_t len, tp_ep_t **ep_p);

/*
 * Waits until every operation posted on ep so far has completed (their
 * callbacks have run) or timeout_ms passed (negative: no limit). Progresses
 * tp meanwhile, so other callbacks may run. Returns ST_OK, ST_ERR_TIMEOUT,
 * or ST_ERR_TRANSPORT.
 */
st_status_t tp_ep_flush(tp_ep_t *ep, int timeout_ms);

/*
 * Flushes (up to a few seconds) and closes ep; operations still in flight
 * complete with ST_ERR_CANCELLED. Remote keys unpacked on ep are destroyed.
 * NULL is ignored.
 */
void tp_ep_close(tp_ep_t *ep);

/*
 * Closes ep at once, without a flush: operations still in flight are
 * cancelled (their callbacks run with ST_ERR_CANCELLED before it returns;
 * UCX: the endpoint is force-closed and its close completed; libfabric:
 * the peer's connection is removed from the address vector). An operation
 * the library had not completed by then stays held by it (tp_orphaned)
 * and may still write its local buffer until released. For a caller whose
 * deadline passed. NULL is ignored.
 */
void tp_ep_abort(tp_ep_t *ep);

/*
 * Unpacks a peer's packed remote key [buf, buf + len) for use on ep and
 * writes it to *rkey_p. Returns ST_OK; ST_ERR_INVALID when the bytes are not
 * a well-formed key of this backend (the log line says why); ST_ERR_NOMEM;
 * ST_ERR_TRANSPORT.
 */
st_status_t tp_rkey_unpack(tp_ep_t *ep, const void *buf, size_t len, tp_rkey_t **rkey_p);

/* Destroys rkey. No operation using it may be in flight. NULL is ignored. */
void tp_rkey_destroy(tp_rkey_t *rkey);

/* Returns the base address and length of the remote region rkey describes. */
void tp_rkey_bounds(const tp_rkey_t *rkey, uint64_t *base_p, size_t *len_p);

/*
 * Posts a one-sided read of len bytes from remote_addr (a virtual address in
 * the peer's region described by rkey) into local, which must lie inside
 * local_mem. Non-blocking: many may be in flight. On ST_OK, cb(user, status)
 * runs exactly once later, from tp_progress(); local must stay
 * valid until then. On any other return cb never runs: ST_ERR_INVALID (len 0,
 * local outside local_mem, remote range outside rkey's region, or over the
 * provider's message limit; logged), ST_ERR_NOMEM, ST_ERR_TRANSPORT.
 */
st_status_t tp_get(tp_ep_t *ep, void *local, size_t len, tp_mem_t *local_mem, uint64_t remote_addr,
                   tp_rkey_t *rkey, tp_cb_t cb, void *user);

/*
 * Serves a get at once, on this thread, when the backend can do it by a plain
 * copy (UCX: the peer's region is mapped into this process, ucp_rkey_ptr);
 * nothing is posted and no callback runs. The same checks as
 * tp_get(). Returns ST_OK when the bytes are in local;
 * ST_ERR_UNSUPPORTED when it cannot (post it with tp_get());
 * ST_ERR_INVALID and the others as tp_get(). For many small
 * objects this saves the operation record, its completion and its callback.
 * Unlike the rest of the transport it may run on several threads at once
 * (it reads the key and copies; the worker is not touched), while the
 * endpoint and the key stay open.
 */
st_status_t tp_get_now(tp_ep_t *ep, void *local, size_t len, tp_mem_t *local_mem,
                       uint64_t remote_addr, tp_rkey_t *rkey);

/* Posts a one-sided write; the mirror of tp_get(). */
st_status_t tp_put(tp_ep_t *ep, const void *local, size_t len, tp_mem_t *local_mem,
                   uint64_t remote_addr, tp_rkey_t *rkey, tp_cb_t cb, void *user);

/*
 * Makes progress without blocking: drives the library, runs the callbacks of
 * completed operations, and retries operations the provider had refused for
 * lack of resources. Returns the number of events handled (0: nothing to do),
 * or a negative st_status_t when progressing itself failed.
 */
int tp_progress(tp_transport_t *tp);

/*
 * Returns in *fd_p a file descriptor that becomes readable when tp may have
 * work, for epoll. Before sleeping on it call tp_arm(). Returns
 * ST_OK, or ST_ERR_UNSUPPORTED when the backend/provider has none (then
 * poll tp_progress(), or use tp_wait()).
 */
st_status_t tp_event_fd(tp_transport_t *tp, int *fd_p);

/*
 * Arms the event fd. Returns ST_OK when it is safe to sleep on it, ST_ERR_BUSY
 * when there is work now (progress first, then arm again), ST_ERR_UNSUPPORTED,
 * or ST_ERR_TRANSPORT.
 */
st_status_t tp_arm(tp_transport_t *tp);

/*
 * Blocks until tp may have work or timeout_ms passed (0: do not block,
 * negative: no limit). Runs no callbacks: call tp_progress() after.
 * Without an event fd it waits in short sleeps. Returns ST_OK (possibly
 * early) or ST_ERR_TRANSPORT.
 */
st_status_t tp_wait(tp_transport_t *tp, int timeout_ms);

/*
 * Messages: small requests and answers over the transport's own connection,
 * for calls that cannot afford the control plane's round trip (libstrata
 * sends Locate, Release and Lookup to daemons this way: docs/protocol.md,
 * "Calls over the transport"). UCX only: active messages, always sent eagerly
 * and delivered whole; libfabric returns ST_ERR_UNSUPPORTED and its users stay
 * on the control plane. Delivery is not guaranteed to outlive a peer that
 * fails: a caller waits for its answer with a deadline.
 */
#define TP_MSG_MAX (64u << 20) /* larger messages are refused (sent or received) */

typedef struct tp_msg tp_msg_t;

/*
 * Called from tp_progress() for every message received (never from
 * inside the library's own callbacks): data[0..len) and msg are valid until
 * it returns, unless it calls tp_msg_keep(msg). It may send
 * (tp_msg_send(), tp_msg_reply(), gets and puts) but
 * must not progress, close or destroy.
 */
typedef void (*tp_msg_fn)(void *arg, tp_msg_t *msg, const void *data, size_t len);

/*
 * Sets the function that receives tp's messages (NULL: messages are dropped).
 * Returns ST_OK, or ST_ERR_UNSUPPORTED when the backend has no messages.
 */
st_status_t tp_msg_listen(tp_transport_t *tp, tp_msg_fn fn, void *arg);

/*
 * Sends [data, +len) as one message to ep's peer, which may answer it with
 * tp_msg_reply(). The bytes are copied: data may be reused at once.
 * Returns ST_OK (sent or queued: no delivery report), ST_ERR_INVALID (len 0
 * or over TP_MSG_MAX), ST_ERR_UNSUPPORTED (no messages on this
 * backend), ST_ERR_UNAVAILABLE (the peer is known to have failed),
 * ST_ERR_NOMEM or ST_ERR_TRANSPORT.
 */
st_status_t tp_msg_send(tp_ep_t *ep, const void *data, size_t len);

/*
 * Answers msg (inside its tp_msg_fn) with [data, +len), copied.
 * Returns as tp_msg_send(); ST_ERR_INVALID also when msg carries no
 * reply route.
 */
st_status_t tp_msg_reply(tp_msg_t *msg, const void *data, size_t len);

/*
 * In the listener: keeps msg and its data (valid until tp_msg_free())
 * so that it can be answered later, by whoever holds tp then (the daemon
 * serves a call without holding its transport, then answers).
 */
void tp_msg_keep(tp_msg_t *msg);

/* A kept message's bytes and length. */
const void *tp_msg_data(const tp_msg_t *msg);
size_t tp_msg_len(const tp_msg_t *msg);

/* Frees a kept message. Serialised with the transport like every call. */
void tp_msg_free(tp_msg_t *msg);

/* Returns the number of operations of tp in flight (posted, callback not yet run). */
size_t tp_inflight(const tp_transport_t *tp);

/*
 * Returns the number of operations whose endpoint was closed while the
 * library still held them: their callbacks ran (cancelled), but until the
 * library lets go of them (a later tp_progress) a read may still land in
 * its local buffer. A caller that frees or reuses such buffers after an
 * abort waits, progressing, until this is 0.
 */
size_t tp_orphaned(const tp_transport_t *tp);

#endif /* STRATA_TRANSPORT_H */
