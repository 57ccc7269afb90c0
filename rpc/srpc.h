/*
 * srpc.h - strata's control-plane RPC framework on the gRPC C core.
 *
 * The daemon serves strata.v1.Cache (and grpc.health.v1.Health) with an
 * srpc_server_t; the client library, the CLI and the daemon's peer fan-out
 * call it through srpc_channel_t. Messages are protobuf-c messages; a method
 * is named by its gRPC path and its two message descriptors (srpc_method_t).
 *
 * Server model. srpc_server_start() binds one address, registers every method
 * of a table with gRPC and starts n_threads worker threads that poll n_cqs
 * completion queues (threads are spread over the queues). For every method
 * each queue keeps several calls requested from gRPC at all times, so calls
 * are served concurrently, up to one per worker thread. A worker that takes a
 * call reads and unpacks the request, runs the handler synchronously, packs
 * the response and sends it with the status; a handler may block (a peer
 * fan-out, a durable write) without stalling the other workers.
 *
 * Lifetime of memory in a handler: the request is valid until the handler
 * returns AND the response has been packed, so a response may point into the
 * request. The response message is allocated and initialised by the
 * framework; anything the handler hangs off it should come from
 * srpc_ctx_alloc(), which is freed once the response has been packed.
 *
 * Status: a handler returns an st_status_t; ST_OK sends the response, any
 * other code sends st_status_to_grpc(code) with the message set by
 * srpc_ctx_set_error() (or st_strerror(code)) and no response.
 * With an authenticate callback (srpc_server_config_t), a call it refuses is
 * answered with its status before the request is read, so an unauthenticated
 * caller costs no parse.
 * The framework itself answers INVALID_ARGUMENT for bytes that do not unpack,
 * RESOURCE_EXHAUSTED for a request over the method's size limit,
 * DEADLINE_EXCEEDED for a call whose deadline passed before its handler ran,
 * UNIMPLEMENTED for a method that is not in the table, and gRPC answers
 * UNAVAILABLE once the server is stopping.
 *
 * Thread safety: srpc_server_* functions may be called from any thread, except
 * that srpc_server_stop()/destroy() must not be called from a handler.
 * srpc_channel_t is thread-safe: any number of threads may call through one
 * channel at once. Every function that creates something calls grpc_init()
 * and the matching destroy calls grpc_shutdown(), so no global set-up is
 * needed; the first one also takes a reference for the life of the process
 * (see srpc_library_shutdown()).
 */
#ifndef STRATA_SRPC_H
#define STRATA_SRPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Drops the process-wide gRPC reference that the first server or channel
 * took, so that gRPC cleans up once the last server and channel are gone.
 * For programs that want a clean exit under leak checkers; optional, and
 * the clean-up may block for seconds. Call it once, at the end of main().
 */
void srpc_library_shutdown(void);

/* ------------------------------------------------------------- methods -- */

/* One unary RPC method: its gRPC path and its message types. */
typedef struct srpc_method {
    const char *path; /* "/strata.v1.Cache/Lookup" */
    const ProtobufCMessageDescriptor *req_desc;
    const ProtobufCMessageDescriptor *resp_desc;
} srpc_method_t;

/* The methods of strata.v1.Cache, in the order of the service in strata.proto. */
typedef enum srpc_cache_method_id {
    SRPC_CACHE_HELLO,
    SRPC_CACHE_LOOKUP,
    SRPC_CACHE_LOCATE,
    SRPC_CACHE_RESERVE,
    SRPC_CACHE_COMMIT,
    SRPC_CACHE_ABORT,
    SRPC_CACHE_RELEASE,
    SRPC_CACHE_PUT,
    SRPC_CACHE_GET,
    SRPC_CACHE_DELETE,
    SRPC_CACHE_PIN,
    SRPC_CACHE_UNPIN,
    SRPC_CACHE_OPEN_SESSION,
    SRPC_CACHE_APPEND_SESSION,
    SRPC_CACHE_GET_SESSION,
    SRPC_CACHE_CLOSE_SESSION,
    SRPC_CACHE_STATS,
    SRPC_CACHE_CLUSTER_LOOKUP,
    SRPC_CACHE_SCORE,
    SRPC_CACHE_REPLICATE,
    SRPC_CACHE_DRAIN,
    SRPC_CACHE_N_METHODS
} srpc_cache_method_id_t;

/* srpc_cache_methods[id] describes method id of strata.v1.Cache. */
extern const srpc_method_t srpc_cache_methods[SRPC_CACHE_N_METHODS];

/* grpc.health.v1.Health/Check. */
extern const srpc_method_t srpc_health_check_method;

/* The service names known to the health service. */
#define SRPC_CACHE_SERVICE  "strata.v1.Cache"
#define SRPC_HEALTH_SERVICE "grpc.health.v1.Health"

/* ------------------------------------------------------- server: calls -- */

typedef struct srpc_server srpc_server_t;

/* The context of one call, valid during the handler only. */
typedef struct srpc_ctx srpc_ctx_t;

/*
 * A method handler. req is the unpacked request (read-only); resp is an
 * initialised response message of the method's resp_desc to fill. arg is the
 * method's handler_arg. Returns ST_OK to send resp, or an error status (see
 * the file comment). Runs on a worker thread; may block.
 */
typedef st_status_t (*srpc_handler_fn)(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                       ProtobufCMessage *resp, void *arg);

/* One entry of a server's method table. */
typedef struct srpc_method_def {
    const srpc_method_t *method;
    srpc_handler_fn handler;
    void *handler_arg;
    uint32_t max_request_bytes; /* 0: the server's max_message_bytes */
} srpc_method_def_t;

/*
 * Returns the bearer token of the call (the value of the metadata
 * "authorization: Bearer <token>"), NUL-terminated, or NULL when the call
 * carried none. A token longer than SRPC_MAX_TOKEN bytes counts as none.
 * Valid until the handler returns. Checking it is the handler's job.
 */
#define SRPC_MAX_TOKEN 1024
const char *srpc_ctx_token(const srpc_ctx_t *ctx);

/*
 * Returns the principal the server's authenticate callback filled for this
 * call (SRPC_PRINCIPAL_MAX bytes, 16-byte aligned), or NULL when the server
 * has no authenticate callback. Valid until the handler returns.
 */
#define SRPC_PRINCIPAL_MAX 64
void *srpc_ctx_principal(srpc_ctx_t *ctx);

/*
 * Copies the value of the call's metadata key (lower case) into
 * buf[0..cap), NUL-terminated. Returns 1 when found and it fits, 0 otherwise
 * (and always for srpc_server_invoke() calls, which carry no metadata).
 */
int srpc_ctx_metadata(const srpc_ctx_t *ctx, const char *key, char *buf, size_t cap);

/* Returns the call's method path ("/strata.v1.Cache/Lookup"). */
const char *srpc_ctx_method(const srpc_ctx_t *ctx);

/* Returns the peer address as gRPC reports it ("ipv4:127.0.0.1:52344"). Never NULL. */
const char *srpc_ctx_peer(srpc_ctx_t *ctx);

/*
 * Returns the identity of the client's TLS certificate: the subject common
 * name (gRPC's auth property "x509_common_name"), NUL-terminated, or NULL
 * when the call has none: a plaintext server, a server with
 * tls_client_auth NONE, a client that sent no certificate under REQUEST,
 * a CN of more than SRPC_MAX_IDENTITY bytes, or a call run by
 * srpc_server_invoke(). A non-NULL value always comes from a certificate
 * that gRPC verified against the server's tls_ca_pem during the handshake,
 * so a handler may take it as proof of who the client is (for example the
 * tenant a certificate names); what it is allowed to do is the handler's
 * decision. Valid until the handler returns. Not thread-safe (the handler's
 * thread only).
 */
#define SRPC_MAX_IDENTITY 255
const char *srpc_ctx_peer_identity(srpc_ctx_t *ctx);

/*
 * Returns the milliseconds left before the call's deadline: 0 once it has
 * passed, INT64_MAX when the client set none. A handler that waits passes
 * this on (for example as a fan-out timeout).
 */
int64_t srpc_ctx_remaining_ms(const srpc_ctx_t *ctx);

/* Returns the server's user_arg (srpc_server_config_t.user_arg). */
void *srpc_ctx_server_arg(const srpc_ctx_t *ctx);

/* True when the call is run by srpc_server_invoke() (it did not come over gRPC). */
bool srpc_ctx_invoked(const srpc_ctx_t *ctx);

/*
 * A slice boundary of a long call (docs/daemon.md, "Fairness and admission"): where the
 * server queues calls (srpc_admission_t.max_serving) and a call of another flow is
 * waiting, serves the next such call, round robin over the flows, on this thread with this
 * call's serving slot, then returns 1; else returns 0 at once. A handler calls it between
 * bounded pieces of its work, holding no lock, so that a call queued behind a large one
 * waits for one piece, not the whole. Does nothing (0) inside a call it serves this way
 * (one level: a lent slot is not lent again), for srpc_server_invoke() calls, and in FIFO
 * mode. Not thread-safe: call it from the handler's thread only.
 */
int srpc_ctx_yield(srpc_ctx_t *ctx);

/*
 * Allocates size bytes (16-byte aligned, zeroed) that live until the
 * response has been packed. Returns NULL on allocation failure (return ST_ERR_NOMEM then).
 * Not thread-safe: call it from the handler's thread only.
 */
void *srpc_ctx_alloc(srpc_ctx_t *ctx, size_t size);

/*
 * Sets the error message sent with a non-OK status (printf format; truncated
 * to 255 bytes). The message goes to the client: name what was wrong and the
 * limit or value, never a secret.
 */
void srpc_ctx_set_error(srpc_ctx_t *ctx, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/*
 * Sets the trailing metadata of the call's answer (OK or not) to key (a
 * static, lower-case string) and value; one a call, a second replaces the
 * first. Calls made with srpc_server_invoke() carry none (ignored).
 */
void srpc_ctx_set_trailer(srpc_ctx_t *ctx, const char *key, const char *value);

/* The trailing metadata key of the ring epoch a node places by (decimal). */
#define SRPC_RING_EPOCH_KEY "strata-ring-epoch"

/* Parses a ring epoch's value (len bytes, not NUL-terminated): 1 to 19 decimal digits.
 * Returns 1 and sets *epoch_p, or 0 (anything else: the trailer is ignored). */
int srpc_ring_epoch_parse(const char *value, size_t len, uint64_t *epoch_p);

/* ------------------------------------------------------ server: config -- */

/*
 * Authenticates a call before its request is read or unpacked. arg is the
 * server's user_arg; path the method; token the call's bearer token (NULL:
 * none; for srpc_server_invoke() the token it was given); peer as
 * srpc_ctx_peer() says; identity as srpc_ctx_peer_identity() says (the
 * subject CN of a client certificate that the TLS handshake verified, NULL
 * when there is none), so a certificate can authenticate. On ST_OK the callback may have filled principal
 * (SRPC_PRINCIPAL_MAX zeroed bytes, see srpc_ctx_principal()). Any other
 * status refuses the call with st_status_to_grpc(status) and msg (the
 * callback writes it; never a secret): ST_ERR_UNAUTHENTICATED for a missing
 * or unknown credential, ST_ERR_PERMISSION for one that may not call path.
 * Health checks are never authenticated. Runs on a worker thread.
 */
typedef st_status_t (*srpc_auth_fn)(void *arg, const char *path, const char *token,
                                    const char *peer, const char *identity, void *principal,
                                    char *msg, size_t msg_cap);
/*
 * Names the flow (fair-queueing class) of an authenticated call into
 * name[0..cap): the tenant, or the connection where there is none. arg is
 * the server's user_arg; principal as the authenticate callback filled it;
 * peer as srpc_ctx_peer() says. Runs on a worker thread; must not block.
 */
typedef void (*srpc_flow_fn)(void *arg, const void *principal, const char *peer, char *name,
                             size_t cap);

/*
 * Fair queueing and admission control (server_sched.c; docs/daemon.md,
 * "Fairness and admission"). With max_serving 0 it is off: a worker serves
 * every call it takes, in the order gRPC hands them over, and nothing is
 * refused for load. Otherwise a worker that takes an authenticated call puts
 * it on its flow's queue, and at most max_serving calls run handlers at once;
 * a worker whose handler returns takes the next call round robin over the
 * flows that have calls queued (one call per flow per turn). A call that would
 * take the queued calls or request bytes past a limit (the server's or its
 * flow's; 0: no limit) is refused at once with RESOURCE_EXHAUSTED and the
 * trailing metadata strata-retry-after-ms (srpc_retry_after_key). Calls that
 * fail authentication and health checks are never queued.
 */
typedef struct srpc_admission {
    unsigned max_serving;      /* handlers running at once; 0: off; at most n_threads - 1 */
    uint32_t max_queued_calls; /* calls waiting, all flows */
    uint64_t max_queued_bytes; /* request bytes waiting, all flows */
    uint32_t flow_max_calls;   /* calls waiting, one flow */
    uint64_t flow_max_bytes;   /* request bytes waiting, one flow */
    bool fifo;                 /* one queue in arrival order (for comparison), not round robin */
    srpc_flow_fn flow;         /* NULL: every call is one flow */
    /* Called with each served call's time in the queue (user_arg; NULL: none). Runs
     * under the scheduler's lock: must not block or call into the server. */
    void (*on_wait)(void *arg, uint64_t wait_ns);
} srpc_admission_t;

/* The trailing metadata key of a refusal's retry hint (milliseconds, decimal). */
#define SRPC_RETRY_AFTER_KEY "strata-retry-after-ms"

/*
 * Parses a retry hint's value (len bytes, not NUL-terminated): 1 to 9 decimal
 * digits, nothing else, at least 1. Returns 1 with *ms_p set, 0 for anything
 * else (*ms_p untouched).
 */
int srpc_retry_hint_parse(const char *value, size_t len, uint32_t *ms_p);

/* Whether a TLS server asks clients for a certificate (mutual TLS). */
typedef enum srpc_tls_client_auth {
    SRPC_TLS_CLIENT_AUTH_NONE,    /* not asked; srpc_ctx_peer_identity() is NULL */
    SRPC_TLS_CLIENT_AUTH_REQUEST, /* asked; one that is sent must verify against the CA */
    SRPC_TLS_CLIENT_AUTH_REQUIRE  /* a verified certificate is required to connect */
} srpc_tls_client_auth_t;

typedef struct srpc_server_config {
    const char *address;        /* "127.0.0.1:0" (port 0: any free port) */
    unsigned n_threads;         /* worker threads; 0: 4 */
    unsigned n_cqs;             /* completion queues; 0: 1; at most n_threads */
    uint32_t max_message_bytes; /* largest request accepted; 0: 16 MiB */
    void *user_arg;             /* returned by srpc_ctx_server_arg() */
    /*
     * TLS: PEM strings, copied by srpc_server_start(). tls_cert_pem (the
     * server's certificate chain) and tls_key_pem (its unencrypted key) both
     * NULL: plaintext; both set: the port speaks TLS only, and a plaintext
     * client cannot connect. tls_ca_pem: the CA bundle that client
     * certificates must chain to; tls_client_auth says whether the server
     * asks for one (see srpc_tls_client_auth_t; REQUEST and REQUIRE need
     * tls_ca_pem). Replace them while serving with srpc_server_reload_tls().
     */
    const char *tls_cert_pem;
    const char *tls_key_pem;
    srpc_auth_fn authenticate; /* NULL: every call goes to its handler */
    const char *tls_ca_pem;
    srpc_tls_client_auth_t tls_client_auth;
    srpc_admission_t admission; /* fair queueing and admission control; zero: off */
} srpc_server_config_t;

/*
 * Creates a server for the n methods of table, binds cfg->address and starts
 * serving. The table (and the srpc_method_t it points to) must outlive the
 * server. The health service is always served; every service starts
 * SERVING ("" and the service of every method path). On success *server_p
 * is set.
 * Returns ST_OK; ST_ERR_INVALID for a NULL or malformed config or table (the
 * log names the field), or TLS material that does not parse, a key that does
 * not match its certificate, client certificates without a CA; ST_ERR_NOMEM;
 * ST_ERR_IO when the address cannot be bound (in use, bad host);
 * ST_ERR_INTERNAL when gRPC refuses a method or a thread cannot start.
 */
st_status_t srpc_server_start(const srpc_server_config_t *cfg, const srpc_method_def_t *table,
                              size_t n, srpc_server_t **server_p);

/* Returns the bound TCP port (the real one when the address asked for 0). */
int srpc_server_port(const srpc_server_t *server);

/* Returns true when the server speaks TLS. */
bool srpc_server_tls(const srpc_server_t *server);

/*
 * Replaces the TLS certificate, key and CA bundle of a TLS server while it
 * serves (for SIGHUP): the PEM strings are checked and copied; connections
 * made from then on get the new certificate (and are verified against the
 * new CA), connections already open keep theirs. ca_pem may be NULL only
 * when the server does not ask for client certificates.
 * Returns ST_OK; ST_ERR_INVALID for a plaintext server or bad PEM material
 * (logged; the old certificate stays in use); ST_ERR_NOMEM. Thread-safe.
 */
st_status_t srpc_server_reload_tls(srpc_server_t *server, const char *cert_pem, const char *key_pem,
                                   const char *ca_pem);

/*
 * Reads a PEM file (a certificate chain, a key, a CA bundle) into *pem_p,
 * malloc'd and NUL-terminated (free() it). Returns ST_OK; ST_ERR_IO when it
 * cannot be opened or read; ST_ERR_INVALID for a name that is empty, not a
 * regular file or over 1 MiB; ST_ERR_NOMEM. The log names the file.
 */
st_status_t srpc_pem_load(const char *path, char **pem_p);

/*
 * Sets the health status of service ("" is the server as a whole) to SERVING
 * or NOT_SERVING; an unknown name is added. Returns ST_OK, ST_ERR_INVALID for
 * a NULL or over-long (> 127 bytes) name, ST_ERR_EXHAUSTED past 32 names.
 */
st_status_t srpc_server_set_serving(srpc_server_t *server, const char *service, bool serving);

/* Returns true once srpc_server_stop() has started gRPC's shutdown. */
bool srpc_server_stopping(const srpc_server_t *server);

/*
 * Stops the server gracefully: health turns NOT_SERVING, the listener
 * closes, new calls get UNAVAILABLE, and the calls in flight run to their end.
 * After grace_ms (< 0: wait for ever) calls still running are cancelled (their
 * clients see UNAVAILABLE) and the function waits for their handlers to return
 * (a handler that may run long should watch srpc_ctx_remaining_ms() or
 * srpc_server_stopping()).
 * Then the queues are drained and the threads joined. Idempotent. Must not be
 * called from a handler.
 */
void srpc_server_stop(srpc_server_t *server, int grace_ms);

/*
 * Serves one call that reached the process by another route than gRPC (the
 * daemon's calls over the data-plane transport): finds the method by path,
 * passes token to the authenticate callback (peer "transport"), unpacks
 * req[0..len) as its request, runs its handler on this thread with
 * token as the call's bearer token (NULL: none) and no deadline, and counts
 * it in the method's stats. srpc_ctx_peer() says "transport".
 * On return *code_p is the gRPC status code; on GRPC_STATUS_OK (0) *resp_p
 * is the packed response (malloc'd, free() it; NULL when it is empty) and
 * *resp_len_p its length, otherwise msg[0..msg_cap) holds the details, as a
 * gRPC client would have seen them: UNIMPLEMENTED for an unknown path,
 * UNAVAILABLE once the server is stopping, RESOURCE_EXHAUSTED over the
 * method's request limit, INVALID_ARGUMENT when the bytes do not parse.
 * Thread-safe; the caller must not run it after srpc_server_stop() began
 * tearing the server down (srpc_server_stopping() is true from then on).
 */
void srpc_server_invoke(srpc_server_t *server, const char *path, const char *token, const void *req,
                        size_t len, void **resp_p, size_t *resp_len_p, int *code_p, char *msg,
                        size_t msg_cap);

/* Stops the server (grace 0 if still running) and frees it. NULL is a no-op. */
void srpc_server_destroy(srpc_server_t *server);

/* ------------------------------------------------------- server: stats -- */

/* Latency bucket upper bounds in microseconds; the last bucket is +Inf. */
#define SRPC_LATENCY_BUCKETS 19
extern const uint64_t srpc_latency_bounds_us[SRPC_LATENCY_BUCKETS - 1];

#define SRPC_GRPC_CODES 17

/* A snapshot of one method's counters. */
typedef struct srpc_method_stats {
    const char *path;
    uint64_t calls;                         /* calls answered (counted before sending) */
    uint64_t by_code[SRPC_GRPC_CODES];      /* calls per gRPC status code sent */
    uint64_t latency[SRPC_LATENCY_BUCKETS]; /* call taken to answer handed to gRPC */
    uint64_t latency_sum_us;
    uint64_t overloaded; /* refused by admission control (also in by_code[8]) */
} srpc_method_stats_t;

/*
 * Copies the counters of every served method (the table, then the health
 * check) into out[0..max), returns how many methods there are (may exceed
 * max). Counters are updated with atomics; a snapshot is consistent per
 * counter, not across counters. Thread-safe.
 */
size_t srpc_server_stats(const srpc_server_t *server, srpc_method_stats_t *out, size_t max);

#define SRPC_MAX_FLOWS    64 /* flows tracked at once; later ones share the last */
#define SRPC_FLOW_NAME    63
#define SRPC_WAIT_BUCKETS SRPC_LATENCY_BUCKETS /* bounds: srpc_latency_bounds_us */

/* A snapshot of one flow's fair-queueing counters. */
typedef struct srpc_flow_stats {
    char name[SRPC_FLOW_NAME + 1];
    uint64_t queued;     /* calls waiting now */
    uint64_t served;     /* calls taken off the queue to run */
    uint64_t refused;    /* calls refused by admission control */
    uint64_t max_passed; /* most calls of other flows that ran while one of its calls waited */
} srpc_flow_stats_t;

/* A snapshot of the server's admission control (all zero when it is off). */
typedef struct srpc_sched_stats {
    bool enabled;
    uint64_t queued_calls; /* waiting now */
    uint64_t queued_bytes;
    uint64_t serving;                 /* handlers running now */
    uint64_t refused;                 /* all flows */
    uint64_t wait[SRPC_WAIT_BUCKETS]; /* queueing time of the calls served, microseconds */
    uint64_t wait_sum_us;
    uint64_t lent;  /* calls served in a slot lent by srpc_ctx_yield() */
    size_t n_flows; /* flows in flows[] */
    srpc_flow_stats_t flows[SRPC_MAX_FLOWS];
} srpc_sched_stats_t;

/* Fills *out (a consistent snapshot, taken under the scheduler's lock). Thread-safe. */
void srpc_server_sched_stats(const srpc_server_t *server, srpc_sched_stats_t *out);

/*
 * The admission settings the server was started with (max_serving as used: 0 when fair
 * queueing is off), for the daemon's calls over its transport, which follow the same
 * limits (docs/daemon.md, "Fairness and admission"). Thread-safe.
 */
void srpc_server_admission(const srpc_server_t *server, srpc_admission_t *out);

/* Counts a call of method path refused for load outside the gRPC queue (a call over the
 * transport): in the method's overloaded count, as the scheduler's refusals. Thread-safe. */
void srpc_server_count_refused(srpc_server_t *server, const char *path);

/* ------------------------------------------------------------- client -- */

typedef struct srpc_channel srpc_channel_t;

typedef struct srpc_channel_config {
    const char *token;          /* sent as "authorization: Bearer <token>"; NULL: none */
    uint32_t max_receive_bytes; /* largest response accepted; 0: 64 MiB */
    const char *client_id; /* sent as "strata-client: <client_id>" (Hello's, 16 hex); NULL: none */
    /*
     * TLS: PEM strings, copied by srpc_channel_open(). tls_ca_pem set: the
     * channel speaks TLS and accepts only a server whose certificate chains
     * to it and names the target's host (SAN); NULL: plaintext.
     * tls_cert_pem + tls_key_pem: the client certificate for mutual TLS
     * (needs tls_ca_pem).
     */
    const char *tls_ca_pem;
    const char *tls_cert_pem;
    const char *tls_key_pem;
} srpc_channel_config_t;

#define SRPC_MAX_CLIENT_ID 32 /* bytes of strata-client metadata kept */

/* The error of a failed call, as the server (or gRPC) reported it. */
typedef struct srpc_error {
    int grpc_code;           /* gRPC status code; 0 on success */
    char message[256];       /* the status details, NUL-terminated; "" on success */
    uint32_t retry_after_ms; /* ST_ERR_OVERLOADED: the server's hint; else 0 */
    uint64_t ring_epoch;     /* the answer's strata-ring-epoch (OK or not); 0 when none */
} srpc_error_t;

/*
 * Opens a channel to target ("host:port", any gRPC target string). cfg may be
 * NULL. Connecting is lazy: the first call connects, and a call to a peer
 * that is down fails with ST_ERR_UNAVAILABLE (no waiting for it to come up);
 * so does a call whose TLS handshake fails (a plaintext server, a
 * certificate that does not verify).
 * Returns ST_OK and sets *ch_p; ST_ERR_INVALID for a NULL target or TLS
 * material that does not parse (logged); ST_ERR_NOMEM.
 */
st_status_t srpc_channel_open(const char *target, const srpc_channel_config_t *cfg,
                              srpc_channel_t **ch_p);

/*
 * Sets the strata-client metadata that every later call on ch sends (the
 * client_id of the last Hello on it, 16 hex; NULL or "": none; longer than
 * SRPC_MAX_CLIENT_ID is cut). Thread-safe: calls in flight keep what they sent.
 */
void srpc_channel_set_client(srpc_channel_t *ch, const char *client_id);

/* Returns the target the channel was opened with. */
const char *srpc_channel_target(const srpc_channel_t *ch);

/* Closes the channel. No call may be running on it. NULL: no-op. */
void srpc_channel_close(srpc_channel_t *ch);

/*
 * Calls method on ch with req and waits for the answer, at most timeout_ms
 * (<= 0: no deadline). On ST_OK *resp_p is the unpacked response, to free with
 * protobuf_c_message_free_unpacked(*resp_p, NULL). On failure *resp_p is
 * untouched and err (if not NULL) holds the gRPC code and the server's message.
 * Returns ST_OK or st_status_from_grpc() of the call's status (for example
 * ST_ERR_UNAVAILABLE: server down or stopping; ST_ERR_TIMEOUT: deadline;
 * ST_ERR_INVALID: the server rejected the request); ST_ERR_OVERLOADED for
 * RESOURCE_EXHAUSTED that carries a valid strata-retry-after-ms (the hint is in
 * err->retry_after_ms; nothing of the call ran); ST_ERR_PROTOCOL when the
 * response does not unpack; ST_ERR_NOMEM. Thread-safe.
 */
st_status_t srpc_call(srpc_channel_t *ch, const srpc_method_t *method, const ProtobufCMessage *req,
                      int timeout_ms, ProtobufCMessage **resp_p, srpc_error_t *err);

/*
 * Like srpc_call() with raw bytes: sends req[0..req_len) as the request
 * message and returns the response bytes in *resp_p (malloc'd, free() them)
 * and *resp_len_p. For tools and tests. Thread-safe.
 */
st_status_t srpc_call_raw(srpc_channel_t *ch, const char *path, const void *req, size_t req_len,
                          int timeout_ms, void **resp_p, size_t *resp_len_p, srpc_error_t *err);

/* One call of a fan-out. */
typedef struct srpc_fanout_item {
    srpc_channel_t *ch;          /* in */
    const ProtobufCMessage *req; /* in */
    ProtobufCMessage *resp;      /* out on ST_OK: free with protobuf_c_message_free_unpacked */
    st_status_t status;          /* out: as srpc_call() returns */
    srpc_error_t err;            /* out */
} srpc_fanout_item_t;

/*
 * Issues method to every item at once and waits until all have answered or
 * failed, at most timeout_ms (<= 0: no deadline) in total. Each item gets its
 * own status; one down peer fails its item with ST_ERR_UNAVAILABLE and does
 * not delay the others beyond their own answers.
 * Returns ST_OK when every item has its outcome (look at the items);
 * ST_ERR_INVALID for NULL arguments; ST_ERR_NOMEM (no item was issued then).
 * Thread-safe (each fan-out waits on its calling thread's own completion queue).
 */
st_status_t srpc_fanout(const srpc_method_t *method, srpc_fanout_item_t *items, size_t n,
                        int timeout_ms);

/* Frees the responses of items (sets them NULL). */
void srpc_fanout_free(srpc_fanout_item_t *items, size_t n);

/* ------------------------------------------------- client: streams -- */

/* One streaming call (stream.c): one request, then answers as they come. */
typedef struct srpc_stream srpc_stream_t;

/*
 * Opens a call of method on ch (a streaming method: etcd's Watch,
 * LeaseKeepAlive) with no deadline and sends req as its first message,
 * leaving the sending side open. The stream has its own completion queue,
 * so it may be read from any one thread at a time.
 * Returns ST_OK and sets *s_p; ST_ERR_INVALID for NULL arguments or a
 * request of the wrong type; ST_ERR_NOMEM; ST_ERR_INTERNAL when gRPC refuses
 * the call. A server that is down shows up at the first srpc_stream_recv().
 */
st_status_t srpc_stream_open(srpc_channel_t *ch, const srpc_method_t *method,
                             const ProtobufCMessage *req, srpc_stream_t **s_p);

/*
 * Waits at most timeout_ms (<= 0: for ever) for the next answer. On ST_OK
 * *resp_p is the unpacked answer (free with protobuf_c_message_free_unpacked).
 * ST_ERR_TIMEOUT: nothing came in time, the stream is still open (call again);
 * any other status: the stream has ended (st_status_from_grpc() of the
 * server's status, ST_ERR_UNAVAILABLE when it ended without an error;
 * ST_ERR_PROTOCOL when an answer does not unpack); err, when not NULL, holds
 * the gRPC code and message then. Not thread-safe per stream.
 */
st_status_t srpc_stream_recv(srpc_stream_t *s, int timeout_ms, ProtobufCMessage **resp_p,
                             srpc_error_t *err);

/* Cancels the call and frees the stream. NULL: no-op. */
void srpc_stream_close(srpc_stream_t *s);

/* Health status values, as in grpc.health.v1.HealthCheckResponse. */
#define SRPC_HEALTH_UNKNOWN     0
#define SRPC_HEALTH_SERVING     1
#define SRPC_HEALTH_NOT_SERVING 2

/*
 * Calls grpc.health.v1.Health/Check for service ("" for the server) and sets
 * *status_p to SRPC_HEALTH_*. Returns as srpc_call(); ST_ERR_NOT_FOUND for a
 * service the server does not know.
 */
st_status_t srpc_health_check(srpc_channel_t *ch, const char *service, int timeout_ms,
                              int *status_p, srpc_error_t *err);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_SRPC_H */
