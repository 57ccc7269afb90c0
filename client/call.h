/*
 * call.h - Locate, Release and Lookup over the data plane's transport, with
 * gRPC as the fallback (docs/protocol.md "Calls over the transport").
 * sc_fanout() (client_internal.h) is the whole call; the pieces below let a
 * get batch wait for the answers of its fan-out one wave at a time.
 */
#ifndef STRATA_CLIENT_CALL_H
#define STRATA_CLIENT_CALL_H

#include <stdatomic.h>

#include "client_internal.h"
#include "transport.h"

/* A call over the transport waiting for its answer (on its caller's stack). */
typedef struct sc_tc {
    struct sc_tc *next;
    uint64_t id;
    _Atomic int done;
    uint32_t code;
    uint32_t hint_ms; /* a refusal for load: the daemon's retry hint */
    char msg[256];
    uint8_t *body; /* malloc'd: the response message */
    size_t body_len;
} sc_tc_t;

/* How long a call over the transport waits before it is made again over
 * gRPC (a daemon that died answers nothing; gRPC finds that out at once). */
#define SC_TC_PATIENCE_MS 250
/* How long a waiter spins for its answer before it naps between polls. */
#define SC_TC_SPIN_NS     300000ull

/* A fan-out whose calls go over the transport where they can: started,
 * then waited for item by item range, then ended. */
struct sc_fan {
    st_client_t *c;
    const srpc_method_t *method;
    srpc_fanout_item_t *items;
    size_t n;
    int timeout_ms;
    uint64_t start;
    sc_tc_t *tc;
    uint8_t *via; /* 0: gRPC's; 1: sent over the transport; 2: its answer is in items */
};
typedef struct sc_fan sc_fan_t;

/* The transport's listener (dp->lock held): an answer to one of our calls. */
void sc_tc_on_msg(void *arg, tp_msg_t *msg, const void *data, size_t len);
/* Sends item's request to node over the transport as call t (NULL: its
 * answer is not wanted and will be dropped). 1: sent. */
int sc_tc_send(st_client_t *c, uint32_t node, uint32_t tcm, const srpc_fanout_item_t *item,
               sc_tc_t *t);
/* Sends what can go over the transport. Returns 0 when nothing was sent for
 * lack of memory (then every item is gRPC's). */
int sc_fan_start(sc_fan_t *f, st_client_t *c, const srpc_method_t *method, uint32_t tcm,
                 srpc_fanout_item_t *items, size_t n, int timeout_ms);
/* Makes the calls of f that did not go over the transport over gRPC, now
 * (their answers queue up meanwhile). Returns srpc_fanout()'s status. */
st_status_t sc_fan_grpc(sc_fan_t *f);
/* Waits for the answers of items [lo, hi) sent over the transport, makes
 * those not answered within SC_TC_PATIENCE_MS again over gRPC, and fills
 * the items as srpc_fanout() would. */
void sc_fan_wait(sc_fan_t *f, size_t lo, size_t hi);
/* Waits for whatever is left and frees f. */
void sc_fan_end(sc_fan_t *f);

#endif /* STRATA_CLIENT_CALL_H */
