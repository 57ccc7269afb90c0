/*
 * stt_internal.h - what transport.c (dispatch and common parts) and the
 * backends (ucx.c, fabric.c) share: the base structs every backend embeds as
 * its first member, the operation record, and the backend vtable.
 */
#ifndef STRATA_STT_INTERNAL_H
#define STRATA_STT_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "log.h"
#include "transport.h"

/* An intrusive doubly-linked list node; a list is a node pointing at itself. */
typedef struct stt_link {
    struct stt_link *next;
    struct stt_link *prev;
} stt_link_t;

static inline void stt_list_init(stt_link_t *head)
{
    head->next = head;
    head->prev = head;
}

static inline bool stt_list_empty(const stt_link_t *head)
{
    return head->next == head;
}

static inline void stt_list_push(stt_link_t *head, stt_link_t *node)
{
    node->prev = head->prev;
    node->next = head;
    head->prev->next = node;
    head->prev = node;
}

static inline void stt_list_del(stt_link_t *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
    node->next = node;
    node->prev = node;
}

#define stt_container_of(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))

/*
 * One posted get or put. The first member is scratch space for the backend
 * (libfabric's struct fi_context2 lives there), so the record's address is
 * the context the library hands back.
 */
typedef struct stt_op {
    void *backend_ctx[8];
    tp_ep_t *ep; /* NULL once the endpoint closed before it */
    tp_cb_t cb;
    void *user;
    st_status_t status;
    bool is_put;
    bool orphaned; /* its callback already ran (cancelled); drop the late completion */
    void *local;
    size_t len;
    tp_mem_t *local_mem;
    uint64_t remote_addr;
    tp_rkey_t *rkey;
    stt_link_t link; /* in the transport's in-flight, done or free list */
    stt_link_t pend; /* backend use: waiting to be posted again */
} stt_op_t;

/* A received message, queued until tp_progress() hands it over. */
struct tp_msg {
    stt_link_t link;
    tp_transport_t *tp;
    void *route; /* backend: where a reply goes (UCX: the reply endpoint); NULL: none */
    bool kept;   /* tp_msg_keep(): the listener frees it */
    size_t len;
    uint8_t data[];
};

struct tp_transport {
    const struct stt_ops *ops;
    tp_backend_t backend;
    uint8_t *addr_blob; /* the wrapped address, as sent to peers */
    size_t addr_blob_len;
    stt_link_t eps;      /* open endpoints */
    stt_link_t mems;     /* registered regions */
    stt_link_t inflight; /* posted ops whose completion has not been seen */
    stt_link_t done;     /* completed ops whose callbacks have not run yet */
    stt_link_t free_ops;
    void **op_chunks; /* the pool's allocations, freed at destroy */
    size_t n_op_chunks;
    size_t n_inflight;
    size_t n_orphaned; /* ops cancelled at an endpoint's close that the library still holds */
    bool draining;     /* guards against tp_progress() re-entry from a callback */
    stt_link_t msgs;   /* received messages not handed over yet */
    tp_msg_fn msg_fn;
    void *msg_arg;
    bool msg_draining;
};

struct tp_mem {
    tp_transport_t *tp;
    void *addr;
    size_t len;
    unsigned access;    /* TP_REMOTE_* */
    uint8_t *rkey_blob; /* the wrapped packed key, as sent to peers */
    size_t rkey_blob_len;
    stt_link_t link;
};

struct tp_ep {
    tp_transport_t *tp;
    size_t n_inflight;
    stt_link_t rkeys;
    stt_link_t link;
    st_status_t error; /* set when the backend reported the peer failed */
    bool closing;      /* tp_ep_close() is under way: no new ops */
};

struct tp_rkey {
    tp_ep_t *ep;
    uint64_t base;
    size_t len;
    stt_link_t link;
};

/*
 * The backend vtable. Backends allocate their own structs with the base
 * struct first; transport.c fills the base fields it owns (lists, blobs).
 */
typedef struct stt_ops {
    const char *name;
    /* Creates the backend; writes the raw address into *addr_p and its length into *addr_len_p
     * (malloc'd, the caller frees it). */
    st_status_t (*create)(const tp_config_t *cfg, tp_transport_t **tp_p, void **addr_p,
                          size_t *addr_len_p);
    void (*destroy)(tp_transport_t *tp);
    /* Registers [*addr_p, +len), or, when *addr_p is NULL, allocates len
     * bytes of registered memory and writes their address to *addr_p;
     * writes the region's raw packed key (malloc'd) to *key_p. */
    st_status_t (*mem_register)(tp_transport_t *tp, void **addr_p, size_t len, unsigned access,
                                tp_mem_t **mem_p, void **key_p, size_t *key_len_p);
    /* Whether the target refuses writes without write access and keys of
     * deregistered regions (tp_enforces_access()). */
    int (*enforces_access)(const tp_transport_t *tp);
    void (*mem_deregister)(tp_transport_t *tp, tp_mem_t *mem);
    st_status_t (*connect)(tp_transport_t *tp, const void *addr, size_t len, tp_ep_t **ep_p);
    /* Called once every op of ep completed: makes puts remotely visible. */
    st_status_t (*ep_flush)(tp_ep_t *ep, int timeout_ms);
    /* Closes ep; force when ops are still in flight. Does not free ep's rkeys. */
    void (*ep_close)(tp_ep_t *ep, bool force);
    st_status_t (*rkey_unpack)(tp_ep_t *ep, const void *key, size_t len, tp_rkey_t **rkey_p);
    void (*rkey_destroy)(tp_rkey_t *rkey);
    /* Posts op; on ST_OK it completes later through stt_op_complete(). */
    st_status_t (*post)(stt_op_t *op);
    /* Drives the library; returns events handled or a negative status. */
    int (*progress)(tp_transport_t *tp);
    st_status_t (*event_fd)(tp_transport_t *tp, int *fd_p);
    st_status_t (*arm)(tp_transport_t *tp);
    /* Sends [data, +len) as one message on ep, or (ep NULL) along route, a
     * received message's reply route; copies data. NULL: no messages. */
    st_status_t (*msg_send)(tp_transport_t *tp, tp_ep_t *ep, void *route, const void *data,
                            size_t len);
    /* Serves a checked get at once by a plain copy, or ST_ERR_UNSUPPORTED. NULL: never. */
    st_status_t (*get_now)(tp_rkey_t *rkey, void *local, uint64_t remote_addr, size_t len);
} stt_ops_t;

extern const stt_ops_t stt_ucx_ops;
extern const stt_ops_t stt_fabric_ops;

/* Records that op finished with status; its callback runs at the next drain. */
void stt_op_complete(stt_op_t *op, st_status_t status);

/*
 * Copies len bytes for a get served by a plain copy (UCX's mapped regions).
 * From STT_STREAM_MIN bytes up the stores are non-temporal (as glibc does for
 * copies larger than the cache): the destination is not read for ownership
 * first, which is what keeps object-by-object copies of a large read at the
 * speed of one large memcpy. Smaller copies (rows) use memcpy.
 */
#define STT_STREAM_MIN 4096
void stt_copy(void *dst, const void *src, size_t len);

/* Queues m (malloc'd, filled) for the next tp_progress(). */
void stt_msg_received(tp_transport_t *tp, tp_msg_t *m);

/* Progresses the transport from inside a backend (flush and close loops). */
int stt_progress_all(tp_transport_t *tp);

/* Runs the callbacks of completed ops (op.c). Returns how many ran. */
int stt_drain(tp_transport_t *tp);

/* Hands the received messages to the listener (msg.c). Returns how many. */
int stt_msg_drain(tp_transport_t *tp);

/* Monotonic milliseconds. */
uint64_t stt_now_ms(void);

#endif /* STRATA_STT_INTERNAL_H */
