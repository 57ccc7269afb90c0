/*
 * tcall_raw.h - a raw client of the calls over the transport (docs/protocol.md
 * "Calls over the transport", proto/tcall.h) for tests, fuzzers and the
 * attack suite: a Hello over gRPC (with the token and tenant the test
 * chooses), then this process's own UCX transport connected to the daemon's,
 * frames sent as the test builds them (any key, any method, any body, or
 * bytes that are no frame at all), and the answers collected by call id.
 *
 * The key a frame presents is always the caller's parameter: tr_hello()
 * records what Hello handed out (tr_client_t.key), but nothing sends it on its
 * own, so that a test can present another client's key, a cut one or none.
 *
 * Single-threaded: one tr_client_t belongs to one thread. Test code: a
 * failure is an st_status_t and a line on stderr, never an abort.
 */
#ifndef STRATA_TEST_TCALL_RAW_H
#define STRATA_TEST_TCALL_RAW_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "srpc.h"
#include "transport.h"
#include "strata/status.h"
#include "strata.pb-c.h"
#include "tcall.h"

#define TR_KEY_MAX 64 /* the longest key tr_hello() keeps */

/* One answer, as it came: code, call id, error message, response bytes. */
typedef struct tr_answer {
    uint64_t id;
    uint32_t code;               /* the gRPC code */
    char msg[TCALL_MSG_MAX + 1]; /* the error message, NUL-terminated */
    uint8_t *body;               /* the packed response (code 0), malloc'd; NULL when empty */
    size_t body_len;
} tr_answer_t;

typedef struct tr_client {
    srpc_channel_t *ch; /* the gRPC channel Hello went over (open while the client is) */
    /* What Hello answered. */
    uint64_t ns;
    int serves; /* the daemon serves calls over its transport */
    uint8_t key[TR_KEY_MAX];
    size_t key_len;
    Strata__V1__HelloResponse *hello; /* the whole answer, freed by tr_close() */
    /* The transport. */
    tp_transport_t *tp;
    tp_ep_t *ep;
    /* The answers received so far, in arrival order. */
    tr_answer_t *ans;
    size_t n_ans, cap_ans;
    size_t n_bad;      /* messages that did not parse as responses (none should) */
    char bad_why[160]; /* why the last one did not */
} tr_client_t;

/*
 * Opens c: a gRPC channel to addr ("127.0.0.1:port") that sends token as its
 * bearer token (NULL: none), a Hello for tenant and model, and, when the
 * daemon's Hello names a UCX transport, a UCX transport of this process
 * connected to the daemon's address (the environment's UCX_TLS applies).
 * Returns ST_OK; the status of Hello when it failed (its message on stderr);
 * ST_ERR_UNSUPPORTED when the daemon has no UCX transport; ST_ERR_NOMEM;
 * the transport's status. On failure c holds nothing to close.
 */
st_status_t tr_open(tr_client_t *c, const char *addr, const char *token, const char *tenant,
                    const char *model);

/*
 * tr_open() with the caller's transport configuration (NULL: UCX's
 * defaults), for a client that chooses its UCX transports or its peer
 * failure detection (cfg->ucx_peer_failure), or libfabric and its provider
 * (cfg->backend TP_FABRIC): then Hello asks for libfabric, the
 * daemon must name it, and the client has one-sided operations only (no
 * messages; c->serves is 0: stratad serves calls over UCX alone).
 */
st_status_t tr_open_cfg(tr_client_t *c, const char *addr, const char *token, const char *tenant,
                        const char *model, const tp_config_t *cfg);

/* Closes c: the transport (answers still coming are dropped), the channel, the answers. */
void tr_close(tr_client_t *c);

/* Sends len bytes as one message, as they are (any bytes). Returns tp_msg_send()'s status. */
st_status_t tr_send(tr_client_t *c, const void *bytes, size_t len);

/*
 * Builds and sends a request frame: method (any number), call id, key[0..key_len)
 * (NULL/0: none; more than TCALL_TOKEN_MAX is cut there, as the codec does),
 * then body[0..body_len). Returns as tr_send(); ST_ERR_NOMEM.
 */
st_status_t tr_call(tr_client_t *c, uint32_t method, uint64_t id, const void *key, size_t key_len,
                    const void *body, size_t body_len);

/* tr_call() with msg packed as the body. */
st_status_t tr_call_msg(tr_client_t *c, uint32_t method, uint64_t id, const void *key,
                        size_t key_len, const ProtobufCMessage *msg);

/*
 * Progresses c's transport until it has received `want` messages in all
 * (answers and n_bad together) or timeout_ms passed. Returns how many it has.
 */
size_t tr_wait(tr_client_t *c, size_t want, int timeout_ms);

/* Progresses c's transport for ms milliseconds (to see that nothing comes). */
void tr_idle(tr_client_t *c, int ms);

/* The first answer with call id `id` (NULL: none yet). Valid until tr_forget(). */
tr_answer_t *tr_find(tr_client_t *c, uint64_t id);

/* Frees and forgets every answer received so far (n_ans and n_bad go to 0). */
void tr_forget(tr_client_t *c);

#endif /* STRATA_TEST_TCALL_RAW_H */
