/*
 * strata/strata.h - libstrata, the client of a strata cache cluster.
 *
 * An application or inference engine connects to a cluster (a list of
 * stratad nodes), hashes its token sequences into block-hash chains, looks up
 * how much of a chain is cached, and moves objects in and out: whole objects
 * or selected rows, asynchronously, so that transfers overlap with compute.
 * Segments of consecutive blocks are spread over the nodes by a
 * consistent-hash ring; KDA and SESSION objects are also written to replicas.
 *
 * Memory: the caller allocates the buffers it passes; libstrata never keeps a
 * pointer to a caller's buffer after the operation that used it completed.
 * Results (st_lookup_result_t, st_session_info_t, st_write_result_t, each
 * op's status and length) are written into memory the caller provides. What
 * libstrata allocates for the caller is the client, freed by
 * st_client_close(), and each handle, freed by st_handle_release(); nothing
 * else needs freeing.
 *
 * Threads: an st_client_t may be used from several threads at once; one
 * st_handle_t must be used by one thread at a time. Callbacks are not used:
 * completion is observed with st_handle_test / st_handle_wait /
 * st_client_poll.
 *
 * Status: every function that can fail returns st_status_t (strata/status.h).
 * The codes each may return are listed with it; st_client_last_error() gives
 * the message that came with the last error on this thread (which node, which
 * limit). The others cannot fail and return what they are named for:
 * st_handle_test() 1 or 0, st_client_poll() a count of handles, the accessors
 * (st_client_block_tokens(), st_client_replicas(), ...) their value,
 * st_client_close() and st_handle_release() nothing.
 */
#ifndef STRATA_STRATA_H
#define STRATA_STRATA_H

#include <stddef.h>
#include <stdint.h>

#include "strata/hash.h"
#include "strata/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct st_client st_client_t;
typedef struct st_handle st_handle_t;

/* Object kinds, as in docs/protocol.md. */
typedef enum st_kind {
    ST_KIND_KV = 0,      /* latent KV rows of one block, one DSA layer */
    ST_KIND_IDX = 1,     /* indexer key rows + block summary, one DSA layer */
    ST_KIND_KDA = 2,     /* KDA states of every KDA layer after a block */
    ST_KIND_SESSION = 3, /* a session record */
    ST_KIND_VIS = 4,     /* projected vision embeddings of an image */
    ST_KIND_COUNT_ = 5
} st_kind_t;

enum st_client_field {
    ST_CLIENT_FIELD_NODES = 1u << 0,
    ST_CLIENT_FIELD_CONFIG_FILE = 1u << 1,
    ST_CLIENT_FIELD_TENANT = 1u << 2,
    ST_CLIENT_FIELD_MODEL = 1u << 3,
    ST_CLIENT_FIELD_TOKEN = 1u << 4,
    ST_CLIENT_FIELD_REPLICAS = 1u << 5,
    ST_CLIENT_FIELD_VNODES = 1u << 6,
    ST_CLIENT_FIELD_TIMEOUT = 1u << 7,
    ST_CLIENT_FIELD_TRANSPORT = 1u << 8,
    ST_CLIENT_FIELD_HEALTH_INTERVAL = 1u << 9,
    ST_CLIENT_FIELD_VERIFY_READS = 1u << 10,
    ST_CLIENT_FIELD_CACHE_LOCATIONS = 1u << 11,
    ST_CLIENT_FIELD_TRANSPORT_CALLS = 1u << 12,
    ST_CLIENT_FIELD_COPY_THREADS = 1u << 13,
    ST_CLIENT_FIELD_WRITE_QUORUM = 1u << 14,
    ST_CLIENT_FIELD_TLS_CA = 1u << 15,
    ST_CLIENT_FIELD_TLS_CERT = 1u << 16,
    ST_CLIENT_FIELD_TLS_KEY = 1u << 17,
    ST_CLIENT_FIELD_ETCD = 1u << 18,
    ST_CLIENT_FIELD_ETCD_PREFIX = 1u << 19,
};

/*
 * Connection parameters. Only the fields named in field_mask are read, so
 * fields can be added without breaking callers; the others take defaults.
 */
typedef struct st_client_params {
    uint64_t field_mask;
    const char *nodes;           /* "host:port,host:port,..." */
    const char *config_file;     /* INI file with nodes = ..., and the other keys */
    const char *tenant;          /* default "default" */
    const char *model;           /* default "default" */
    const char *token;           /* auth token, if the cluster requires one */
    uint32_t replicas;           /* copies of KDA and SESSION objects, 0 to 16; default 0:
                                    the cluster's (the replicas of the first Hello's answer,
                                    2 if it names none) */
    uint32_t vnodes;             /* ring points per node, default 128 */
    uint32_t timeout_ms;         /* deadline of a whole call, default 5000 */
    const char *transport;       /* "inline" (default), "ucx", "libfabric" or
                                    "libfabric:<provider>" (e.g. "libfabric:tcp;ofi_rxm"):
                                    with a transport, get and put move object bytes with
                                    one-sided reads and writes (Reserve/Commit on the
                                    control plane, Locate there or over the transport: see
                                    transport_calls); nodes without one are served inline */
    uint32_t health_interval_ms; /* down-node recheck period, default 1000 */
    const char *verify_reads;    /* one-sided reads of whole objects: "lease" (default) trusts
                                    bytes that landed while the Locate's lease was alive
                                    (committed objects are immutable and leased extents are
                                    never reused) and checks the XXH3-64 of any that may have
                                    landed later, and of every object of a node whose
                                    transport does not keep committed bytes read-only
                                    (Hello's committed_read_only: UCX); "always" checks
                                    every object */
    const char *cache_locations; /* which one-sided reads keep their Locate's lease and reuse
                                    the location, without a Locate, while more than a
                                    second of it is left: "rows" (default: row reads) or
                                    "all" (whole objects too: a re-read skips the control
                                    plane, but every object read stays leased, so not
                                    evictable, for up to the lease) */
    int transport_calls;         /* with a transport: 1 (default) sends Locate, Release,
                                    Lookup and Score over it to daemons that serve them, saving gRPC's
                                    round trip (gRPC again for a call not answered within
                                    250 ms); 0 keeps every call on gRPC */
    uint32_t copy_threads;       /* 1 to 16, default 2: where the transport maps the daemons'
                                    memory into this process (UCX, daemons on this host), the
                                    threads that copy a large batch's whole objects, the
                                    batch's own thread included; copy_threads - 1 threads
                                    are started with the client and serve the shares of
                                    every batch that copies at once. 1: the batch's thread
                                    copies alone */
    uint32_t write_quorum;       /* W, 0 to R, default 0 (= R; R is replicas, or the number
                                    of nodes when there are fewer): a durable write
                                    (ST_PUT_DURABLE of a KDA object, ST_SESSION_DURABLE)
                                    succeeds only when W of its R replicas committed it to
                                    disk; with fewer it is ST_ERR_PARTIAL and says how many
                                    did (st_handle_replicas_written(), st_write_result_t) */
    const char *tls_ca;          /* PEM file of the CA that signed the daemons' certificates:
                                    set, the control plane (gRPC) speaks TLS and accepts only
                                    daemons whose certificate chains to it and names the node's
                                    host (SAN); NULL or "": plaintext */
    const char *tls_cert;        /* PEM file of a client certificate (mutual TLS; needs tls_ca) */
    const char *tls_key;         /* PEM file of tls_cert's private key (unencrypted) */
    const char *etcd;            /* etcd endpoints, "http://host:port,...": the cluster's
                                    members are read there (docs/membership.md) in place of
                                    nodes, which is then ignored; the client follows joins
                                    and leaves (checked every health_interval). NULL or "":
                                    the nodes list */
    const char *etcd_prefix;     /* the cluster's key prefix in etcd, default "/strata/" */
} st_client_params_t;

/*
 * Connects to a cluster: says Hello to every node (tenant, model, token),
 * learns the namespace seed and block size, and starts the health checker.
 * Nodes that do not answer start as down and are retried.
 *
 * Returns ST_OK with *client_p set; ST_ERR_INVALID (no nodes, malformed node
 * address, bad parameter, TLS files that do not parse or a key that does not
 * match its certificate); ST_ERR_IO (config file or TLS file unreadable);
 * ST_ERR_UNAVAILABLE (no node answered: also a failed TLS handshake, for
 * example a plaintext daemon or a certificate the CA did not sign);
 * ST_ERR_UNAUTHENTICATED (no token, or a token no tenant holds);
 * ST_ERR_PERMISSION (the tenant or model is not the token's); ST_ERR_NOMEM.
 */
ST_API st_status_t st_client_connect(const st_client_params_t *params, st_client_t **client_p);

/* Waits for the client's operations, stops its threads and frees it. */
ST_API void st_client_close(st_client_t *client);

/* The message of the last error returned on this thread ("" if none). */
ST_API const char *st_client_last_error(void);

/* Tokens per block of the namespace (from Hello). */
ST_API uint32_t st_client_block_tokens(const st_client_t *client);

/* Blocks per segment of the cluster (from Hello). */
ST_API uint32_t st_client_segment_blocks(const st_client_t *client);

/*
 * Hashes tokens (with optional non-text items) into the namespace's chain.
 * See st_hash_chain() in strata/hash.h for the parameters and statuses.
 */
ST_API st_status_t st_client_hash(const st_client_t *client, const uint32_t *tokens,
                                  size_t n_tokens, const st_hash_item_t *items, size_t n_items,
                                  st_hash_t *chain, size_t max_blocks, size_t *n_blocks_p);

/* What a lookup found. */
typedef struct st_lookup_result {
    uint64_t matched_blocks;   /* longest cached prefix, in blocks */
    uint64_t resumable_blocks; /* prefix that ends at a KDA checkpoint */
    uint32_t nodes_asked;
    uint32_t nodes_down; /* owners that did not answer (treated as misses) */
} st_lookup_result_t;

/*
 * Looks up a chain: asks every owner, in parallel, for its segments and
 * composes the longest prefix and the resumable prefix. layers is the number
 * of DSA layers that must all hold KV and IDX for a block to count (0: any
 * object of the block counts).
 *
 * An owner that fails during the call is marked down and the lookup is
 * made once more, its segments going to the next nodes on the ring (which
 * hold the replicas of KDA and SESSION objects), so the call that finds a
 * node dead answers as the next one will.
 *
 * Returns ST_OK (also when owners were down: they count as misses);
 * ST_ERR_INVALID (n_blocks above the limit); ST_ERR_UNAVAILABLE (every node
 * is down).
 */
ST_API st_status_t st_client_lookup(st_client_t *client, const st_hash_t *chain, size_t n_blocks,
                                    uint32_t layers, st_lookup_result_t *result);

/* Near-data scoring (docs/protocol.md "Score"): the DSA indexer run on the
 * nodes that hold a history's IDX objects. */
#define ST_SCORE_K_MAX 2048 /* the most candidates one Score call answers */

/* One token's indexer query for one DSA layer. */
typedef struct st_score_query {
    uint32_t layer; /* DSA layer, numbered among DSA layers (the IDX object's layer) */
    uint32_t heads; /* indexer heads */
    uint32_t dim;   /* indexer key width */
    const float *q; /* heads x dim: one token's indexer query, as the model computes it */
    const float *w; /* heads: the head weights */
    uint32_t k;     /* candidates wanted, 1..ST_SCORE_K_MAX */
} st_score_query_t;

/* What a Score call did. */
typedef struct st_score_stats {
    uint64_t blocks;                     /* blocks of the range */
    uint64_t blocks_scored;              /* scored row by row on the nodes (both rounds, with
                                            STRATA_SCORE_ROUNDS=2) */
    uint64_t bytes_sent, bytes_received; /* requests and answers, packed, all calls */
    uint32_t nodes;                      /* nodes asked (calls made, a second attempt's included) */
} st_score_stats_t;

/*
 * Scores the rows of blocks [first, first + n) of the chain (chain[i] names
 * block i; the client's block_tokens) by the IDX objects (layer
 * query->layer) the cluster holds, and answers the global top-k: positions
 * (block * block_tokens + row) and scores, ordered by score descending, ties
 * by the lower position: exactly what st_cpu_indexer_topk over the same keys
 * would pick. *n_out = min(k, rows). positions and scores: room for
 * query->k each, owned by the caller. The scores are bit for bit those of
 * a process whose kernels run the nodes' SIMD path (both choose the best
 * the CPU has by default). IDX objects written with row_bytes = dim x 4
 * let a node read a block's two summary rows alone for its bound.
 * STRATA_SCORE_ROUNDS=2 in the environment scores in two rounds (a floor
 * from every node's top k / nodes first; docs/protocol.md "Score"): the
 * same answer, more pruning where few blocks hold the strong rows.
 *
 * Returns ST_OK; ST_ERR_NOT_FOUND when some block's IDX object is held by
 * none of its reachable owners; ST_ERR_UNAVAILABLE when an owner cannot be
 * reached (the caller then fetches the keys and scores locally);
 * ST_ERR_INVALID for a bad query; ST_ERR_CORRUPT when a node holds an
 * object whose size does not match the layout. stats may be NULL.
 * Thread-safe like every st_client_ call.
 */
ST_API st_status_t st_client_score(st_client_t *client, const st_hash_t *chain, size_t first,
                                   size_t n, const st_score_query_t *query, uint64_t *positions,
                                   float *scores, size_t *n_out, st_score_stats_t *stats);

/*
 * Objects of a chain are named by the block's index in the chain, its kind
 * and its layer: the block's hash and its parent come from the chain, and the
 * chain's segment decides which node holds it. KV and IDX objects live on
 * the segment's owner; KDA objects also on the next replicas - 1 nodes.
 * A VIS object (an image's projected embeddings) is named by the image's
 * hash (st_hash_image): pass a chain of that one hash and block 0; it has no
 * parent and lives on the owner of that hash.
 */

/* One object to read: whole (n_rows = 0) or selected rows. */
typedef struct st_get_op {
    uint64_t block;       /* index of the block in the chain */
    uint8_t kind;         /* ST_KIND_KV, ST_KIND_IDX, ST_KIND_KDA or ST_KIND_VIS */
    uint16_t layer;       /* DSA layer for KV and IDX; 0 for KDA and VIS */
    void *dst;            /* caller's buffer */
    size_t dst_len;       /* its size in bytes */
    uint32_t row_bytes;   /* row size for row reads */
    const uint32_t *rows; /* row indices; rows land in dst in this order */
    uint32_t n_rows;      /* 0: the whole object */
    /* Filled at completion: */
    st_status_t status; /* ST_OK; ST_ERR_NOT_FOUND (a miss); ST_ERR_INVALID (dst too
                             small, row out of range); ST_ERR_UNAVAILABLE (owner down) */
    size_t length;      /* bytes written to dst */
} st_get_op_t;

/* One object to write. */
typedef struct st_put_op {
    uint64_t block; /* index of the block in the chain */
    uint8_t kind;
    uint16_t layer;
    const void *src; /* not read after the handle completes */
    size_t len;
    st_status_t status; /* filled at completion: ST_OK (stored, or already there
                             with the same bytes), ST_ERR_EXHAUSTED (no room),
                             ST_ERR_UNAVAILABLE (owner down), ST_ERR_EXISTS;
                             ST_ERR_PARTIAL (a durable KDA object committed to disk on
                             fewer than write_quorum replicas: st_handle_replicas_written()
                             says how many; it is readable from those); ST_ERR_UNSUPPORTED
                             (durable, and no replica has an SSD tier) */
    uint32_t row_bytes; /* KV and IDX: bytes per row (at least 32), so that the daemon
                           keeps a checksum per row and row reads (st_get_op_t.rows) can
                           be verified one-sided; 0: none (row reads of the object are
                           then read inline, whole, and cut here) */
} st_put_op_t;

enum st_put_flags {
    /* KDA objects: complete only after write_quorum (W) of their R replicas committed
     * them to their SSD tier (a node without data_dir refuses a durable write and does
     * not count); fewer is ST_ERR_PARTIAL. KV, IDX and VIS objects live in DRAM only
     * (a cache), so the flag changes nothing for them. */
    ST_PUT_DURABLE = 1u << 0,
};

/*
 * Starts reading n objects of the chain chain[0..n_chain). The chain, the
 * ops array and the dst buffers must stay valid until the handle completes;
 * each op's status and length are filled then. A miss is not an error of
 * the batch: that op's status is ST_ERR_NOT_FOUND. Wrong bytes are never
 * delivered: an object whose checksum does not match is reported as a miss.
 * Over a transport, objects and rows are read under a lease (a leased extent
 * is never evicted nor reused, and committed objects are immutable): each
 * row counts only if it matches the checksum the daemon computed for it at
 * commit (objects put with st_put_op_t.row_bytes; rows of an object without
 * are read inline, whole, and checked); whole objects that landed under the
 * lease count as they are, and those that may have landed after it are
 * checked against their checksum (with verify_reads = "always", or from a
 * node whose transport does not enforce read-only keys, every whole object
 * is). The bytes in dst of an op that missed are unspecified.
 *
 * Returns ST_OK with *handle_p set; ST_ERR_INVALID (an op names a block
 * outside the chain, a bad kind, a NULL buffer); ST_ERR_NOMEM.
 */
ST_API st_status_t st_client_get(st_client_t *client, const st_hash_t *chain, size_t n_chain,
                                 st_get_op_t *ops, size_t n, st_handle_t **handle_p);

/*
 * Starts writing n objects of the chain to their owners (and replicas for
 * KDA). Same rules as st_client_get; flags are st_put_flags.
 */
ST_API st_status_t st_client_put(st_client_t *client, const st_hash_t *chain, size_t n_chain,
                                 st_put_op_t *ops, size_t n, unsigned flags,
                                 st_handle_t **handle_p);

/*
 * Registers [ptr, ptr + len) with the client's transport once, so gets into
 * it and puts from it go straight between this memory and the daemons'
 * arenas. Buffers that are not registered still work: they are registered
 * for the duration of each batch, which costs more than a small read.
 * Without a transport (inline) this does nothing and returns ST_OK. The
 * memory must stay valid until st_client_deregister() or st_client_close().
 * Thread-safe. Returns ST_OK; ST_ERR_INVALID (NULL, length 0); ST_ERR_NOMEM;
 * ST_ERR_TRANSPORT (the transport refused the memory).
 */
ST_API st_status_t st_client_register(st_client_t *client, void *ptr, size_t len);

/*
 * Deregisters a buffer registered with st_client_register() (ptr as given
 * there). No operation using it may be in flight. Thread-safe. Returns ST_OK
 * (also without a transport), ST_ERR_INVALID (NULL), ST_ERR_NOT_FOUND.
 */
ST_API st_status_t st_client_deregister(st_client_t *client, void *ptr);

/* Returns 1 when the handle has completed, 0 otherwise. Never blocks. */
ST_API int st_handle_test(st_handle_t *handle);

/*
 * Waits up to timeout_ms (-1: forever) for the handle. Returns ST_OK when
 * every op completed (look at each op's status), ST_ERR_TIMEOUT otherwise.
 * With -1, a batch that no client worker has started yet is run on the
 * calling thread (the same work, without two thread hand-offs).
 */
ST_API st_status_t st_handle_wait(st_handle_t *handle, int timeout_ms);

/*
 * For a completed put handle: how many replicas stored op i (for a KDA object
 * put with ST_PUT_DURABLE: committed it to disk), the count behind an
 * ST_ERR_PARTIAL. A KV, IDX or VIS object has one copy (1 or 0). Returns 0
 * for an op that no replica took, for a get handle, for i out of range, or
 * before the handle completed. Valid until st_handle_release().
 */
ST_API uint32_t st_handle_replicas_written(st_handle_t *handle, size_t i);

/* Frees a completed handle (waits for it first if needed). */
ST_API void st_handle_release(st_handle_t *handle);

/*
 * Drives the client's transfers (for engines that poll instead of waiting)
 * and returns the number of handles that completed since the last call.
 */
ST_API int st_client_poll(st_client_t *client);

/*
 * Pins blocks [0, n_blocks) of the chain on their owners (no eviction, no
 * expiry) until unpinned; pinning a block holds its ancestors too. Blocks
 * that are not cached are skipped. Returns ST_OK, or the first node's error.
 */
ST_API st_status_t st_client_pin(st_client_t *client, const st_hash_t *chain, size_t n_blocks);
ST_API st_status_t st_client_unpin(st_client_t *client, const st_hash_t *chain, size_t n_blocks);

/*
 * Deletes every object of kinds (a mask of 1 << st_kind_t) and layers
 * [0, n_layers) of blocks [0, n_blocks) of the chain, replicas included.
 * Missing objects are not an error. Returns ST_OK or the first node's error.
 */
ST_API st_status_t st_client_delete(st_client_t *client, const st_hash_t *chain, size_t n_blocks,
                                    unsigned kinds, uint32_t n_layers);

/* A session: a multi-turn conversation whose prefix grows in the cache. */
typedef struct st_session_info {
    char id[64];
    st_hash_t head;      /* hash of the last full block of the session */
    uint64_t length;     /* tokens in the session */
    uint64_t created_ms; /* wall clock, ms since the epoch */
    uint64_t updated_ms;
    uint64_t ttl_ms;
} st_session_info_t;

enum st_session_flags {
    /* Acknowledged only when write_quorum (W) of the session's R replicas committed the
     * record to their SSD tier; a node without data_dir refuses it (ST_ERR_UNSUPPORTED)
     * and does not count. */
    ST_SESSION_DURABLE = 1u << 0,
};

/* What a write to a session's replicas achieved. */
typedef struct st_write_result {
    uint32_t replicas; /* R: the replicas the record belongs on */
    uint32_t quorum;   /* W asked for: write_quorum for a durable write, 1 otherwise */
    uint32_t written;  /* replicas that took it (durable: committed it to disk) */
} st_write_result_t;

/*
 * Opens (creates or reopens) the session id with a time to live, on every
 * live replica (a write: it succeeds when at least one replica took it).
 * Returns ST_OK with the current record in *info; ST_ERR_INVALID (id empty or
 * longer than 63 bytes); ST_ERR_UNAVAILABLE (no replica reachable).
 * st_session_open_ex(client, id, ttl_ms, 0, info, NULL) is the same call.
 */
ST_API st_status_t st_session_open(st_client_t *client, const char *id, uint64_t ttl_ms,
                                   st_session_info_t *info);

/*
 * Records that the session now has length tokens ending in block head, on
 * every live replica, in DRAM (and queued for the SSD tier where there is
 * one): ST_OK when at least one replica took it. For an append that must
 * survive a crash, use st_session_append_ex() with ST_SESSION_DURABLE.
 * Statuses as st_session_append_ex() without flags.
 */
ST_API st_status_t st_session_append(st_client_t *client, const char *id, const st_hash_t *head,
                                     uint64_t length);

/*
 * st_session_open() and st_session_append() with flags (st_session_flags) and
 * the outcome per replica in *result (may be NULL; filled whenever the call
 * reached the replicas, also on an error). Without ST_SESSION_DURABLE the
 * write succeeds when one replica took it; with it, when write_quorum (W)
 * replicas committed it to disk.
 *
 * Returns ST_OK; ST_ERR_PARTIAL (durable: 1 to W - 1 replicas committed it,
 * result->written says how many; the record is there and readable, but it
 * survives fewer failures than asked: retry, or accept the weaker guarantee);
 * ST_ERR_INVALID (bad id, NULL head, ttl too long); ST_ERR_UNAVAILABLE (no
 * replica reachable); ST_ERR_UNSUPPORTED (durable, and no replica has an SSD
 * tier); ST_ERR_NOT_FOUND (append: no such session); the first replica's error
 * otherwise. The message of st_client_last_error() names the replicas that
 * failed. Thread-safe.
 */
ST_API st_status_t st_session_open_ex(st_client_t *client, const char *id, uint64_t ttl_ms,
                                      unsigned flags, st_session_info_t *info,
                                      st_write_result_t *result);
ST_API st_status_t st_session_append_ex(st_client_t *client, const char *id, const st_hash_t *head,
                                        uint64_t length, unsigned flags, st_write_result_t *result);

/* The write quorum W the client uses for durable writes (write_quorum, or R). */
ST_API uint32_t st_client_write_quorum(const st_client_t *client);

/* R: the replicas of a KDA or SESSION object the client writes (replicas, at
 * most the number of nodes it was given). */
ST_API uint32_t st_client_replicas(const st_client_t *client);

/*
 * The ring epoch this client places by: with etcd, etcd's revision of the
 * last membership change it applied (the daemons' Hello and Stats give
 * theirs: equal once everyone has caught up); without etcd, the largest
 * ring_epoch the nodes' Hello gave at connect. Thread-safe.
 */
ST_API uint64_t st_client_ring_epoch(const st_client_t *client);

/* Reads the session record, from any live replica. ST_ERR_NOT_FOUND if none. */
ST_API st_status_t st_session_get(st_client_t *client, const char *id, st_session_info_t *info);

/* Closes and deletes the session record. */
ST_API st_status_t st_session_close(st_client_t *client, const char *id);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_STRATA_H */
