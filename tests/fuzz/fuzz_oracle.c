/*
 * fuzz_oracle.c - what docs/protocol.md allows as the answer to a request of
 * test_fuzz_handlers: the codes a malformed request must get (fz_expect), the
 * codes a well-formed one may get from the daemon's state, and the checks of
 * an OK answer against its request (fz_check_ok), which also learn the ids
 * the daemons hand out (reservations, leases, sessions, namespaces).
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "fuzz_handlers.h"

/* ------------------------------------------------------------- oracle -- */

void fz_bad(fz_expect_t *e, int code, const char *fmt, ...)
{
    va_list ap;

    if (!e->must_fail) {
        va_start(ap, fmt);
        vsnprintf(e->why, sizeof(e->why), fmt, ap);
        va_end(ap);
    }
    e->must_fail = 1;
    e->fail_codes |= 1u << code;
}

/* Tenant and model names: UTF-8 without control characters. */
static int fz_name_ok(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;

    while (*p != '\0') {
        uint32_t c = *p;
        size_t n = c < 0x80             ? 0
                   : (c & 0xe0) == 0xc0 ? 1
                   : (c & 0xf0) == 0xe0 ? 2
                   : (c & 0xf8) == 0xf0 ? 3
                                        : 9;
        static const uint32_t min[] = {0, 0x80, 0x800, 0x10000};

        if (n == 9 || (n == 0 && (c < 0x20 || c == 0x7f))) {
            return 0;
        }
        c &= n == 0 ? 0x7f : 0x3f >> n;
        for (size_t i = 1; i <= n; i++) {
            if ((p[i] & 0xc0) != 0x80) {
                return 0;
            }
            c = (c << 6) | (p[i] & 0x3f);
        }
        if (c < min[n] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
            return 0;
        }
        p += n + 1;
    }
    return 1;
}

static int fz_kind_ok(int kind)
{
    return kind >= KIND_KV && kind <= KIND_VIS && kind != KIND_SESSION;
}

static int fz_key_ok(const Strata__V1__ObjectKey *k)
{
    return k != NULL && k->block_hash.len == ST_HASH_BYTES && fz_kind_ok((int)k->kind) &&
           k->layer < FZ_LAYERS_MAX;
}

/* Checks a grid; *cells gets its cell count (SIZE_MAX on overflow). */
static void fz_grid(fz_expect_t *e, const Strata__V1__KeyGrid *g, size_t *cells)
{
    size_t nb;

    *cells = 0;
    if (g == NULL || g->block_hashes.len == 0) {
        return;
    }
    if (g->block_hashes.len % ST_HASH_BYTES != 0 || g->n_kinds == 0 || g->n_layers == 0) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "grid: %zu hash bytes, %zu kinds, %zu layers",
               g->block_hashes.len, g->n_kinds, g->n_layers);
        return;
    }
    for (size_t k = 0; k < g->n_kinds; k++) {
        int kind = (int)g->kinds[k];

        if (!fz_kind_ok(kind) ||
            (kind != KIND_KV && kind != KIND_IDX && (g->n_layers != 1 || g->layers[0] != 0))) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "grid: kind %d with %zu layers", kind,
                   g->n_layers);
        }
    }
    for (size_t l = 0; l < g->n_layers; l++) {
        if (g->layers[l] >= FZ_LAYERS_MAX) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "grid: layer %u", g->layers[l]);
        }
    }
    nb = g->block_hashes.len / ST_HASH_BYTES;
    if (__builtin_mul_overflow(nb, g->n_kinds, cells) ||
        __builtin_mul_overflow(*cells, g->n_layers, cells)) {
        *cells = SIZE_MAX;
    }
}

static void fz_batch(fz_expect_t *e, size_t n, const char *what)
{
    if (n > F.lim.max_keys) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "%zu %s > max_keys_per_call=%u", n, what,
               F.lim.max_keys);
    }
}

static void fz_lease_ms(fz_expect_t *e, uint32_t lease_ms)
{
    if (lease_ms > F.lim.max_lease) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "lease_ms=%u > max_lease_ms=%u", lease_ms,
               F.lim.max_lease);
    }
}

static void fz_links(fz_expect_t *e, Strata__V1__BlockLink **links, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (links[i]->hash.len != 16 || links[i]->parent_hash.len != 16) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "links[%zu]: hash lengths %zu, %zu", i,
                   links[i]->hash.len, links[i]->parent_hash.len);
        }
        if (links[i]->placement.len != 0 && links[i]->placement.len != 16) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "links[%zu]: placement of %zu bytes", i,
                   links[i]->placement.len);
        }
    }
}

/* The compact segments of a Lookup (docs/protocol.md "Compact segments"):
 * parallel arrays of one length, one hash per offset, each segment's offsets
 * rising from 0 to its last block, no locations or lease; their blocks count
 * toward max_blocks_per_lookup. */
static void fz_compact(fz_expect_t *e, const Strata__V1__LookupRequest *q, size_t *total)
{
    size_t n = q->n_compact_first, at = 0, len = q->compact_hashes.len;

    if (q->n_compact_blocks != n || q->n_compact_probes != n) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "compact arrays of different lengths");
        return;
    }
    if (n > 0 && (q->want_locations || q->lease)) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "compact segments with locations or lease");
    }
    if (len % 16 != 0 || len / 16 != q->n_compact_offsets) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "%zu compact hash bytes for %zu offsets", len,
               q->n_compact_offsets);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t blocks = q->compact_blocks[i], np = q->compact_probes[i];
        const uint32_t *off = q->compact_offsets + at;
        int ok = blocks > 0 && np > 0 && np <= q->n_compact_offsets - at;

        ok = ok && off[0] == 0 && off[np - 1] == blocks - 1;
        for (uint32_t j = 1; ok && j < np; j++) {
            ok = off[j] > off[j - 1];
        }
        if (!ok) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "compact segment %zu: bad offsets", i);
            return;
        }
        if (q->compact_first[i] > UINT64_MAX - (blocks - 1)) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "compact segment %zu: index overflows", i);
        }
        *total += blocks;
        at += np;
    }
    if (at != q->n_compact_offsets) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "compact offsets left over");
    }
}

/* The layers of a lookup: each < 128, none twice (so at most 128). */
static void fz_lookup_layers(fz_expect_t *e, const uint32_t *layers, size_t n, int want_loc,
                             uint32_t kinds_mask)
{
    uint64_t seen[2] = {0, 0};

    for (size_t i = 0; i < n; i++) {
        if (layers[i] >= FZ_LAYERS_MAX) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "layers[%zu]=%u", i, layers[i]);
        } else if (seen[layers[i] / 64] & (1ull << (layers[i] % 64))) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "layers[%zu]=%u repeats", i, layers[i]);
        } else {
            seen[layers[i] / 64] |= 1ull << (layers[i] % 64);
        }
    }
    if (want_loc && n == 0 && (kinds_mask & ((1u << KIND_KV) | (1u << KIND_IDX)))) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "want_locations without layers");
    }
}

static void fz_session_id_len(fz_expect_t *e, size_t len, int may_be_empty)
{
    if (len != 16 && !(may_be_empty && len == 0)) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "session_id of %zu bytes", len);
    }
}

/* The known length of a session this test opened on node; NULL if unknown. */
static uint64_t *fz_session_len(int node, const uint8_t *id)
{
    fz_node_t *nd = &F.node[node];
    size_t n = nd->n_sessions < FZ_RING ? nd->n_sessions : FZ_RING;

    for (size_t i = 0; i < n; i++) {
        if (memcmp(nd->sessions[i], id, 16) == 0) {
            return &nd->session_len[i];
        }
    }
    return NULL;
}

/* Which resv of the node has this id; NULL if none we know of. */
static fz_resv_t *fz_find_resv(int node, uint64_t id)
{
    for (size_t i = 0; i < F.node[node].n_resv; i++) {
        if (F.node[node].resv[i].id == id) {
            return &F.node[node].resv[i];
        }
    }
    return NULL;
}

void fz_forget_resv(int node, uint64_t id)
{
    fz_node_t *nd = &F.node[node];

    for (size_t i = 0; i < nd->n_resv; i++) {
        if (nd->resv[i].id == id) {
            nd->resv[i] = nd->resv[--nd->n_resv];
            return;
        }
    }
}

/* The expectations for one method's parsed request: the cases of fz_expect. */
static void fz_expect_hello(const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Strata__V1__HelloRequest *q = (const void *)pm;

    if (q->protocol_version > 1) {
        fz_bad(e, GRPC_STATUS_UNIMPLEMENTED, "protocol_version=%u", q->protocol_version);
    }
    if (strlen(q->tenant) > 128 || strlen(q->model) > 128) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "tenant or model over 128 bytes");
    }
    if (!fz_name_ok(q->tenant) || !fz_name_ok(q->model)) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "tenant or model not UTF-8 text");
    }
    if (q->block_tokens != 0 && (q->block_tokens % 16 != 0 || q->block_tokens > 4096)) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "block_tokens=%u", q->block_tokens);
    }
    if (q->auth_token[0] != '\0' && strcmp(q->auth_token, FZ_TOKEN) != 0) {
        fz_bad(e, GRPC_STATUS_PERMISSION_DENIED, "auth_token differs from the metadata's");
    }
    if (q->tenant[0] != '\0' && strcmp(q->tenant, "fuzz") != 0) {
        fz_bad(e, GRPC_STATUS_PERMISSION_DENIED, "tenant %.32s is not the token's", q->tenant);
    }
    /* An existing namespace of another block size; the namespace table full. */
    e->env_codes |= CODE(ALREADY_EXISTS) | CODE(RESOURCE_EXHAUSTED);
}

static void fz_expect_lookup(const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Strata__V1__LookupRequest *q = (const void *)pm;
    size_t total = 0;

    if (q->n_segments + q->n_compact_first == 0) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "no segments");
    }
    fz_batch(e, q->n_segments + q->n_compact_first, "segments");
    fz_lease_ms(e, q->lease_ms);
    for (size_t i = 0; i < q->n_segments; i++) {
        size_t len = q->segments[i]->block_hashes.len;

        if (len % 16 != 0 || len == 0) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "segments[%zu]: %zu hash bytes", i, len);
        } else if (q->segments[i]->first_block > UINT64_MAX - (len / 16 - 1)) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "segments[%zu]: chain index overflows", i);
        }
        total += len / 16;
    }
    fz_compact(e, q, &total);
    if (total > F.lim.max_hashes) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "%zu hashes > max_blocks_per_lookup", total);
    }
    fz_lookup_layers(e, q->layers, q->n_layers, q->want_locations || q->lease, q->kinds_mask);
}

/* Checks the keys and the grid of a request; returns the grid's cell count
 * (SIZE_MAX on overflow). */
static size_t fz_keys_grid(fz_expect_t *e, Strata__V1__ObjectKey *const *keys, size_t n_keys,
                           const Strata__V1__KeyGrid *grid)
{
    size_t cells;

    for (size_t i = 0; i < n_keys; i++) {
        if (!fz_key_ok(keys[i])) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "keys[%zu] malformed", i);
        }
    }
    fz_grid(e, grid, &cells);
    return cells;
}

static void fz_expect_locate(const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Strata__V1__LocateRequest *q = (const void *)pm;
    size_t cells = fz_keys_grid(e, q->keys, q->n_keys, q->grid);

    if (q->n_keys + cells == 0 || cells == SIZE_MAX) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "no keys or too many cells");
    } else {
        fz_batch(e, q->n_keys + cells, "keys and cells");
    }
    fz_lease_ms(e, q->lease_ms);
}

static void fz_expect_reserve(const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Strata__V1__ReserveRequest *q = (const void *)pm;

    if (q->n_keys == 0 || q->n_lengths != q->n_keys ||
        (q->n_row_bytes != 0 && q->n_row_bytes != q->n_keys)) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "%zu keys, %zu lengths, %zu row_bytes", q->n_keys,
               q->n_lengths, q->n_row_bytes);
    }
    fz_batch(e, q->n_keys, "keys");
    fz_links(e, q->links, q->n_links);
    if (q->ttl_ms > F.lim.reservation_ms) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "ttl_ms=%u", q->ttl_ms);
    }
    for (size_t i = 0; i < q->n_row_bytes && q->n_row_bytes == q->n_keys; i++) {
        if (q->row_bytes[i] != 0 && q->row_bytes[i] < 32) { /* PR_ROW_BYTES_MIN */
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "row_bytes[%zu]=%u", i, q->row_bytes[i]);
        }
    }
    for (size_t i = 0; i < q->n_keys; i++) {
        uint64_t len = i < q->n_lengths ? q->lengths[i] : 1;

        if (!fz_key_ok(q->keys[i]) || len == 0 || len > F.lim.max_inline) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "keys[%zu] malformed or length %llu", i,
                   (unsigned long long)len);
        }
    }
    e->env_codes |= CODE(RESOURCE_EXHAUSTED);
}

static void fz_expect_commit(int node, const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Strata__V1__CommitRequest *q = (const void *)pm;
    const fz_resv_t *rv = fz_find_resv(node, q->reservation_id);

    if (rv != NULL && q->n_checksums != rv->n_keys) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "%zu checksums for %zu keys", q->n_checksums,
               rv->n_keys);
        e->fail_codes |= CODE(NOT_FOUND); /* it may have expired first */
    } else if (rv != NULL && q->durable) {
        fz_bad(e, GRPC_STATUS_UNIMPLEMENTED, "durable commit without an SSD tier");
        e->fail_codes |= CODE(NOT_FOUND);
    }
    /* An id we never saw (or one that expired) is NOT_FOUND; a small
     * mutated id may name a reservation of another iteration. */
    e->env_codes |= CODE(NOT_FOUND);
    if (rv == NULL) {
        e->env_codes |= CODE(INVALID_ARGUMENT) | CODE(UNIMPLEMENTED);
    }
}

static void fz_expect_put(const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Strata__V1__PutRequest *q = (const void *)pm;

    fz_batch(e, q->n_objects, "objects");
    fz_links(e, q->links, q->n_links);
    if (q->durable) {
        fz_bad(e, GRPC_STATUS_UNIMPLEMENTED, "durable put without an SSD tier");
    }
}

static void fz_expect_get(const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Strata__V1__GetRequest *q = (const void *)pm;

    fz_batch(e, q->n_keys, "keys");
    for (size_t i = 0; i < q->n_rows; i++) {
        if (q->rows[i]->key_index >= q->n_keys) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "rows[%zu].key_index=%u", i,
                   q->rows[i]->key_index);
        }
        for (size_t j = 0; j < i; j++) {
            if (q->rows[j]->key_index == q->rows[i]->key_index) {
                fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "rows[%zu]: a second selection", i);
            }
        }
    }
}

static void fz_expect_delete(const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Strata__V1__DeleteRequest *q = (const void *)pm;
    size_t cells = fz_keys_grid(e, q->keys, q->n_keys, q->grid);

    if (cells == SIZE_MAX) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "grid cells overflow");
    } else {
        fz_batch(e, q->n_keys + cells, "keys and cells");
    }
}

static void fz_expect_pin(int m, const ProtobufCMessage *pm, fz_expect_t *e)
{
    const ProtobufCBinaryData *h =
        m == SRPC_CACHE_PIN ? &((const Strata__V1__PinRequest *)(const void *)pm)->block_hashes
                            : &((const Strata__V1__UnpinRequest *)(const void *)pm)->block_hashes;

    if (m == SRPC_CACHE_PIN &&
        ((const Strata__V1__PinRequest *)(const void *)pm)->ttl_ms > FZ_PIN_TTL_MAX) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "pin ttl above max_pin");
    }
    if (h->len % 16 != 0) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "%zu hash bytes", h->len);
    }
    fz_batch(e, h->len / 16, "hashes");
    if (m == SRPC_CACHE_PIN) {
        e->env_codes |= CODE(RESOURCE_EXHAUSTED); /* a tenant's pins quota, or memory */
    }
}

static void fz_expect_open_session(const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Strata__V1__OpenSessionRequest *q = (const void *)pm;

    fz_session_id_len(e, q->session_id.len, 1);
    if (q->ttl_ms != 0 && (q->ttl_ms < 1000 || q->ttl_ms > FZ_SESSION_TTL_MAX)) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "ttl_ms=%u", q->ttl_ms);
    }
    if (q->durable) {
        fz_bad(e, GRPC_STATUS_UNIMPLEMENTED, "durable session without an SSD tier");
    }
    e->env_codes |= CODE(RESOURCE_EXHAUSTED);
}

static void fz_expect_append_session(int node, const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Strata__V1__AppendSessionRequest *q = (const void *)pm;

    fz_session_id_len(e, q->session_id.len, 0);
    if (q->head_hash.len != 16) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "head_hash of %zu bytes", q->head_hash.len);
    }
    if (q->durable) {
        fz_bad(e, GRPC_STATUS_UNIMPLEMENTED, "durable session without an SSD tier");
    }
    /* A session never shrinks (INVALID_ARGUMENT): known for the ones
     * this test opened, possible for any other. */
    if (q->session_id.len == 16 && q->head_hash.len == 16 && !q->durable) {
        const uint64_t *len = fz_session_len(node, q->session_id.data);

        if (len == NULL) {
            e->env_codes |= CODE(INVALID_ARGUMENT);
        } else if (q->length < *len) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "length %llu < %llu: shrinks",
                   (unsigned long long)q->length, (unsigned long long)*len);
            e->fail_codes |= CODE(NOT_FOUND); /* unless it expired */
        }
    }
    e->env_codes |= CODE(NOT_FOUND) | CODE(FAILED_PRECONDITION);
}

static void fz_expect_cluster_lookup(const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Strata__V1__ClusterLookupRequest *q = (const void *)pm;
    size_t n = q->block_hashes.len / 16;

    if (q->block_hashes.len % 16 != 0 || n == 0 || n > F.lim.max_hashes) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "%zu hash bytes", q->block_hashes.len);
    }
    if (n > 0 && q->first_block > UINT64_MAX - (n - 1)) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "first_block + %zu overflows", n);
    }
    if (q->first_block % F.segment_blocks != 0) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "first_block=%llu",
               (unsigned long long)q->first_block);
    }
    fz_lease_ms(e, q->lease_ms);
    fz_lookup_layers(e, q->layers, q->n_layers, q->want_locations || q->lease, q->kinds_mask);
}

static void fz_expect_health(const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Grpc__Health__V1__HealthCheckRequest *q = (const void *)pm;

    if (strcmp(q->service, "") != 0 && strcmp(q->service, SRPC_CACHE_SERVICE) != 0 &&
        strcmp(q->service, SRPC_HEALTH_SERVICE) != 0) {
        fz_bad(e, GRPC_STATUS_NOT_FOUND, "unknown service");
    }
}

/* The expectations for a parsed request of method m on node. */
void fz_expect(int m, int node, const ProtobufCMessage *pm, fz_expect_t *e)
{
    memset(e, 0, sizeof(*e));
    if (m == SRPC_CACHE_REPLICATE || m == SRPC_CACHE_DRAIN) {
        /* The peers' calls (and an admin's Drain): never a tenant's. */
        fz_bad(e, GRPC_STATUS_PERMISSION_DENIED, "%s with a tenant's token",
               m == SRPC_CACHE_DRAIN ? "Drain" : "Replicate");
        return;
    }
    /* Every call but Hello, Stats (0: the node) and Health names a namespace. */
    if (m < SRPC_CACHE_N_METHODS && m != SRPC_CACHE_HELLO) {
        uint64_t ns =
            *(const uint64_t *)(const void *)((const char *)pm + pm->descriptor->fields[0].offset);

        if (!(m == SRPC_CACHE_STATS && ns == 0) && !fz_known(node, ns)) {
            fz_bad(e, GRPC_STATUS_NOT_FOUND, "namespace_id=%llu unknown on the node",
                   (unsigned long long)ns);
        }
        if (m == SRPC_CACHE_STATS && ns == 0) {
            fz_bad(e, GRPC_STATUS_PERMISSION_DENIED, "node-wide Stats with a tenant's token");
        }
    }
    switch (m) {
    case SRPC_CACHE_HELLO: fz_expect_hello(pm, e); break;
    case SRPC_CACHE_LOOKUP: fz_expect_lookup(pm, e); break;
    case SRPC_CACHE_LOCATE: fz_expect_locate(pm, e); break;
    case SRPC_CACHE_RESERVE: fz_expect_reserve(pm, e); break;
    case SRPC_CACHE_COMMIT: fz_expect_commit(node, pm, e); break;
    case SRPC_CACHE_ABORT: e->env_codes |= CODE(NOT_FOUND); break;
    case SRPC_CACHE_RELEASE: {
        const Strata__V1__ReleaseRequest *q = (const void *)pm;

        fz_batch(e, q->n_lease_ids, "lease ids");
        break;
    }
    case SRPC_CACHE_PUT: fz_expect_put(pm, e); break;
    case SRPC_CACHE_GET: fz_expect_get(pm, e); break;
    case SRPC_CACHE_DELETE: fz_expect_delete(pm, e); break;
    case SRPC_CACHE_PIN:
    case SRPC_CACHE_UNPIN: fz_expect_pin(m, pm, e); break;
    case SRPC_CACHE_OPEN_SESSION: fz_expect_open_session(pm, e); break;
    case SRPC_CACHE_APPEND_SESSION: fz_expect_append_session(node, pm, e); break;
    case SRPC_CACHE_GET_SESSION:
        fz_session_id_len(
            e, ((const Strata__V1__GetSessionRequest *)(const void *)pm)->session_id.len, 0);
        e->env_codes |= CODE(NOT_FOUND);
        break;
    case SRPC_CACHE_CLOSE_SESSION:
        fz_session_id_len(
            e, ((const Strata__V1__CloseSessionRequest *)(const void *)pm)->session_id.len, 0);
        e->env_codes |= CODE(NOT_FOUND);
        break;
    case SRPC_CACHE_STATS: break;
    case SRPC_CACHE_CLUSTER_LOOKUP: fz_expect_cluster_lookup(pm, e); break;
    case SRPC_CACHE_SCORE: fz_expect_score(pm, e); break;
    case FZ_M_HEALTH: fz_expect_health(pm, e); break;
    default: break;
    }
}

/* --------------------------------------------------- OK-answer checks -- */

void fz_check_locations(const Strata__V1__Locations *l, size_t n, const char *what)
{
    FZ_CHECK(l != NULL || n == 0, "%s: no Locations for %zu objects", what, n);
    if (l == NULL) {
        return;
    }
    FZ_CHECK(l->n_state == n && l->n_region_id == n && l->n_offset == n && l->n_length == n &&
                 l->n_checksum == n && l->n_generation == n && l->n_row_bytes == n,
             "%s: Locations columns %zu/%zu/%zu/%zu/%zu/%zu/%zu, expected %zu each", what,
             l->n_state, l->n_region_id, l->n_offset, l->n_length, l->n_checksum, l->n_generation,
             l->n_row_bytes, n);
    for (size_t i = 0; i < n; i++) {
        FZ_CHECK(l->state[i] == STRATA__V1__OBJECT_STATE__OBJECT_MISSING ||
                     (l->state[i] == STRATA__V1__OBJECT_STATE__OBJECT_PRESENT && l->length[i] > 0),
                 "%s: object %zu has state %d, length %llu", what, i, (int)l->state[i],
                 (unsigned long long)l->length[i]);
    }
}

static void fz_check_match(const Strata__V1__SegmentMatch *sm, uint64_t first, size_t n_blocks,
                           size_t per_block, int want_loc)
{
    FZ_CHECK(sm != NULL, "segment without a match");
    FZ_CHECK(sm->matched_blocks <= n_blocks, "matched_blocks=%u of a %zu-block segment",
             sm->matched_blocks, n_blocks);
    FZ_CHECK(sm->n_kda_checkpoints <= sm->matched_blocks, "%zu KDA checkpoints in %u blocks",
             sm->n_kda_checkpoints, sm->matched_blocks);
    for (size_t k = 0; k < sm->n_kda_checkpoints; k++) {
        FZ_CHECK(sm->kda_checkpoints[k] - first < sm->matched_blocks &&
                     (k == 0 || sm->kda_checkpoints[k] > sm->kda_checkpoints[k - 1]),
                 "KDA checkpoint %llu outside the match [%llu, +%u) or out of order",
                 (unsigned long long)sm->kda_checkpoints[k], (unsigned long long)first,
                 sm->matched_blocks);
    }
    if (want_loc) {
        fz_check_locations(sm->locations, (size_t)sm->matched_blocks * per_block, "locations");
        fz_check_locations(sm->kda_locations, sm->n_kda_checkpoints, "kda_locations");
    }
}

static size_t fz_popcount_kinds(uint32_t mask)
{
    return (size_t)(((mask >> KIND_KV) & 1) + ((mask >> KIND_IDX) & 1));
}

static void fz_remember(uint64_t *ring, size_t *n, uint64_t v)
{
    ring[*n % FZ_RING] = v;
    (*n)++;
}

/* Checks of one method's OK answer, learning ids: the cases of fz_check_ok. */
static void fz_ok_hello(int node, const ProtobufCMessage *pm, const ProtobufCMessage *pa)
{
    const Strata__V1__HelloRequest *q = (const void *)pm;
    const Strata__V1__HelloResponse *a = (const void *)pa;

    FZ_CHECK(a->namespace_seed.len == 16 && a->limits != NULL && a->namespace_id != 0,
             "hello: no seed, limits or namespace");
    FZ_CHECK(q->block_tokens == 0 || a->block_tokens == q->block_tokens,
             "hello: block_tokens %u asked, %u answered", q->block_tokens, a->block_tokens);
    fz_known_add(node, a->namespace_id);
}

static void fz_ok_lookup(fz_node_t *nd, const ProtobufCMessage *pm, const ProtobufCMessage *pa)
{
    const Strata__V1__LookupRequest *q = (const void *)pm;
    const Strata__V1__LookupResponse *a = (const void *)pa;
    int want = q->want_locations || q->lease;

    size_t n_kda = 0, nc = q->n_compact_first;

    FZ_CHECK(a->n_segments == q->n_segments, "lookup: %zu answers for %zu segments", a->n_segments,
             q->n_segments);
    for (size_t i = 0; i < a->n_segments; i++) {
        fz_check_match(a->segments[i], q->segments[i]->first_block,
                       q->segments[i]->block_hashes.len / 16,
                       fz_popcount_kinds(q->kinds_mask) * q->n_layers, want);
    }
    FZ_CHECK(a->compact == (nc > 0), "lookup: compact=%d answered for %zu compact segments",
             (int)a->compact, nc);
    FZ_CHECK(a->n_compact_matched == nc && a->n_compact_unresolved == nc &&
                 a->n_compact_kda_counts == nc,
             "lookup: %zu/%zu/%zu compact answers for %zu compact segments", a->n_compact_matched,
             a->n_compact_unresolved, a->n_compact_kda_counts, nc);
    for (size_t i = 0; i < nc; i++) {
        uint64_t first = q->compact_first[i];

        FZ_CHECK((uint64_t)a->compact_matched[i] + a->compact_unresolved[i] <= q->compact_blocks[i],
                 "lookup: compact segment %zu: %u + %u undecided of %u blocks", i,
                 a->compact_matched[i], a->compact_unresolved[i], q->compact_blocks[i]);
        FZ_CHECK(n_kda + a->compact_kda_counts[i] <= a->n_compact_kda &&
                     a->compact_kda_counts[i] <= a->compact_matched[i],
                 "lookup: compact segment %zu: %u checkpoints", i, a->compact_kda_counts[i]);
        for (uint32_t k = 0; k < a->compact_kda_counts[i]; k++) {
            uint64_t b = a->compact_kda[n_kda + k];

            FZ_CHECK(b - first < a->compact_matched[i] &&
                         (k == 0 || b > a->compact_kda[n_kda + k - 1]),
                     "lookup: compact segment %zu: checkpoint %llu outside its match or out "
                     "of order",
                     i, (unsigned long long)b);
        }
        n_kda += a->compact_kda_counts[i];
    }
    FZ_CHECK(n_kda == a->n_compact_kda, "lookup: %zu compact checkpoints, counts sum to %zu",
             a->n_compact_kda, n_kda);
    if (a->lease_id != 0) {
        fz_remember(nd->leases, &nd->n_leases, a->lease_id);
    }
}

static void fz_ok_locate(fz_node_t *nd, const ProtobufCMessage *pm, const ProtobufCMessage *pa)
{
    const Strata__V1__LocateRequest *q = (const void *)pm;
    const Strata__V1__LocateResponse *a = (const void *)pa;
    fz_expect_t e;
    size_t cells;

    memset(&e, 0, sizeof(e));
    fz_grid(&e, q->grid, &cells);
    fz_check_locations(a->locations, q->n_keys + cells, "locate");
    if (a->lease_id != 0) {
        fz_remember(nd->leases, &nd->n_leases, a->lease_id);
    }
}

static void fz_ok_reserve(fz_node_t *nd, const ProtobufCMessage *pm, const ProtobufCMessage *pa)
{
    const Strata__V1__ReserveRequest *q = (const void *)pm;
    const Strata__V1__ReserveResponse *a = (const void *)pa;

    FZ_CHECK(a->n_status == q->n_keys, "reserve: %zu statuses for %zu keys", a->n_status,
             q->n_keys);
    fz_check_locations(a->extents, q->n_keys, "reserve extents");
    for (size_t i = 0; i < a->n_status; i++) {
        FZ_CHECK((a->status[i] == STRATA__V1__KEY_STATUS__KEY_OK) ==
                     (a->extents->state[i] == STRATA__V1__OBJECT_STATE__OBJECT_PRESENT),
                 "reserve: key %zu status %d with extent state %d", i, (int)a->status[i],
                 (int)a->extents->state[i]);
    }
    FZ_CHECK(a->reservation_id != 0, "reserve: no reservation_id");
    if (nd->n_resv == FZ_RING) {
        nd->resv[0] = nd->resv[--nd->n_resv];
    }
    nd->resv[nd->n_resv].id = a->reservation_id;
    nd->resv[nd->n_resv].n_keys = q->n_keys;
    nd->n_resv++;
}

static void fz_ok_commit(int node, const ProtobufCMessage *pm, const ProtobufCMessage *pa)
{
    const Strata__V1__CommitRequest *q = (const void *)pm;
    const Strata__V1__CommitResponse *a = (const void *)pa;
    const fz_resv_t *rv = fz_find_resv(node, q->reservation_id);

    FZ_CHECK(rv == NULL || a->n_status == rv->n_keys, "commit: %zu statuses for %zu keys",
             a->n_status, rv ? rv->n_keys : 0);
    FZ_CHECK(a->n_status == q->n_checksums, "commit: %zu statuses for %zu checksums", a->n_status,
             q->n_checksums);
    fz_forget_resv(node, q->reservation_id);
}

static void fz_ok_put(const ProtobufCMessage *pm, const ProtobufCMessage *pa)
{
    const Strata__V1__PutRequest *q = (const void *)pm;
    const Strata__V1__PutResponse *a = (const void *)pa;

    FZ_CHECK(a->n_status == q->n_objects, "put: %zu statuses for %zu objects", a->n_status,
             q->n_objects);
    for (size_t i = 0; i < q->n_objects; i++) {
        const Strata__V1__InlineObject *o = q->objects[i];
        int invalid = !fz_key_ok(o->key) || o->data.len == 0 || o->data.len > F.lim.max_inline;
        int corrupt = !invalid && XXH3_64bits(o->data.data, o->data.len) != o->checksum;
        int rows_bad = o->row_bytes != 0 && o->row_bytes < 32; /* PR_ROW_BYTES_MIN */

        FZ_CHECK(!invalid || a->status[i] == STRATA__V1__KEY_STATUS__KEY_INVALID,
                 "put: malformed object %zu (key or %zu bytes) has status %d, not KEY_INVALID", i,
                 o->data.len, (int)a->status[i]);
        FZ_CHECK(!corrupt || a->status[i] == STRATA__V1__KEY_STATUS__KEY_CORRUPT,
                 "put: object %zu with a wrong checksum has status %d, not KEY_CORRUPT", i,
                 (int)a->status[i]);
        FZ_CHECK(invalid || corrupt || rows_bad ||
                     a->status[i] != STRATA__V1__KEY_STATUS__KEY_INVALID,
                 "put: well-formed object %zu refused as KEY_INVALID", i);
    }
}

static void fz_ok_get(const ProtobufCMessage *pm, const ProtobufCMessage *pa)
{
    const Strata__V1__GetRequest *q = (const void *)pm;
    const Strata__V1__GetResponse *a = (const void *)pa;

    FZ_CHECK(a->n_objects == q->n_keys && a->n_status == q->n_keys,
             "get: %zu objects, %zu statuses for %zu keys", a->n_objects, a->n_status, q->n_keys);
    for (size_t i = 0; i < q->n_keys; i++) {
        const Strata__V1__InlineObject *o = a->objects[i];

        FZ_CHECK(fz_key_ok(q->keys[i]) || a->status[i] == STRATA__V1__KEY_STATUS__KEY_INVALID,
                 "get: malformed key %zu has status %d, not KEY_INVALID", i, (int)a->status[i]);
        if (a->status[i] == STRATA__V1__KEY_STATUS__KEY_OK) {
            FZ_CHECK(o->data.len > 0 && XXH3_64bits(o->data.data, o->data.len) == o->checksum,
                     "get: key %zu is KEY_OK with %zu bytes that do not match the checksum", i,
                     o->data.len);
        } else {
            FZ_CHECK(o->data.len == 0, "get: key %zu has status %d and %zu bytes", i,
                     (int)a->status[i], o->data.len);
        }
    }
}

static void fz_ok_delete(const ProtobufCMessage *pm, const ProtobufCMessage *pa)
{
    const Strata__V1__DeleteRequest *q = (const void *)pm;
    fz_expect_t e;
    size_t cells;

    memset(&e, 0, sizeof(e));
    fz_grid(&e, q->grid, &cells);
    FZ_CHECK(((const Strata__V1__DeleteResponse *)(const void *)pa)->n_status == q->n_keys + cells,
             "delete: one status per key and cell expected");
}

static void fz_ok_session(int m, int node, fz_node_t *nd, const ProtobufCMessage *pm,
                          const ProtobufCMessage *pa)
{
    const Strata__V1__SessionResponse *a = (const void *)pa;
    /* session_id is field 2 of all three requests. */
    const ProtobufCBinaryData *sid =
        (const void *)((const char *)pm + pm->descriptor->fields[1].offset);

    FZ_CHECK(a->session != NULL && a->session->session_id.len == 16 &&
                 a->session->head_hash.len == 16,
             "session answer without a record, or with ids not 16 bytes");
    FZ_CHECK(sid->len == 0 || memcmp(sid->data, a->session->session_id.data, 16) == 0,
             "session answer for another id");
    if (m == SRPC_CACHE_APPEND_SESSION) {
        const Strata__V1__AppendSessionRequest *q = (const void *)pm;

        FZ_CHECK(memcmp(a->session->head_hash.data, q->head_hash.data, 16) == 0 &&
                     a->session->length == q->length,
                 "append: the record does not hold the appended head and length");
    }
    if (m == SRPC_CACHE_OPEN_SESSION && fz_session_len(node, a->session->session_id.data) == NULL) {
        memcpy(nd->sessions[nd->n_sessions % FZ_RING], a->session->session_id.data, 16);
        nd->n_sessions++;
    }
    if (fz_session_len(node, a->session->session_id.data) != NULL) {
        *fz_session_len(node, a->session->session_id.data) = a->session->length;
    }
}

static void fz_ok_cluster_lookup(const ProtobufCMessage *pm, const ProtobufCMessage *pa)
{
    const Strata__V1__ClusterLookupRequest *q = (const void *)pm;
    const Strata__V1__ClusterLookupResponse *a = (const void *)pa;
    size_t n = q->block_hashes.len / 16, S = F.segment_blocks, covered = 0;

    FZ_CHECK(a->n_segments == (n + S - 1) / S, "cluster lookup: %zu segments for %zu hashes",
             a->n_segments, n);
    FZ_CHECK(a->matched_blocks <= n && a->resumable_blocks <= a->matched_blocks,
             "cluster lookup: matched %llu, resumable %llu of %zu",
             (unsigned long long)a->matched_blocks, (unsigned long long)a->resumable_blocks, n);
    for (size_t k = 0; k < a->n_segments; k++) {
        const Strata__V1__SegmentAnswer *sa = a->segments[k];

        FZ_CHECK(sa != NULL && sa->first_block == q->first_block + covered,
                 "cluster lookup: segment %zu missing or misplaced", k);
        FZ_CHECK(sa->grpc_status == 0,
                 "cluster lookup: segment %zu failed at its owner %s (code %u: %s) for a "
                 "request the owner accepts",
                 k, sa->node_id, sa->grpc_status, sa->error);
        fz_check_match(sa->match, sa->first_block, sa->n_blocks,
                       fz_popcount_kinds(q->kinds_mask) * q->n_layers,
                       q->want_locations || q->lease);
        covered += sa->n_blocks;
    }
    FZ_CHECK(covered == n, "cluster lookup: segments cover %zu of %zu blocks", covered, n);
}

/* Checks an OK answer against the request, and learns ids from it. */
void fz_check_ok(int m, int node, const ProtobufCMessage *pm, const ProtobufCMessage *pa)
{
    fz_node_t *nd = &F.node[node];

    switch (m) {
    case SRPC_CACHE_HELLO: fz_ok_hello(node, pm, pa); break;
    case SRPC_CACHE_LOOKUP: fz_ok_lookup(nd, pm, pa); break;
    case SRPC_CACHE_LOCATE: fz_ok_locate(nd, pm, pa); break;
    case SRPC_CACHE_RESERVE: fz_ok_reserve(nd, pm, pa); break;
    case SRPC_CACHE_COMMIT: fz_ok_commit(node, pm, pa); break;
    case SRPC_CACHE_ABORT:
        fz_forget_resv(node, ((const Strata__V1__AbortRequest *)(const void *)pm)->reservation_id);
        break;
    case SRPC_CACHE_RELEASE:
        FZ_CHECK(((const Strata__V1__ReleaseResponse *)(const void *)pa)->n_status ==
                     ((const Strata__V1__ReleaseRequest *)(const void *)pm)->n_lease_ids,
                 "release: one status per lease expected");
        break;
    case SRPC_CACHE_PUT: fz_ok_put(pm, pa); break;
    case SRPC_CACHE_GET: fz_ok_get(pm, pa); break;
    case SRPC_CACHE_DELETE: fz_ok_delete(pm, pa); break;
    case SRPC_CACHE_PIN:
        FZ_CHECK(((const Strata__V1__PinResponse *)(const void *)pa)->n_status ==
                     ((const Strata__V1__PinRequest *)(const void *)pm)->block_hashes.len / 16,
                 "pin: one status per hash expected");
        break;
    case SRPC_CACHE_UNPIN:
        FZ_CHECK(((const Strata__V1__UnpinResponse *)(const void *)pa)->n_status ==
                     ((const Strata__V1__UnpinRequest *)(const void *)pm)->block_hashes.len / 16,
                 "unpin: one status per hash expected");
        break;
    case SRPC_CACHE_OPEN_SESSION:
    case SRPC_CACHE_APPEND_SESSION:
    case SRPC_CACHE_GET_SESSION: fz_ok_session(m, node, nd, pm, pa); break;
    case SRPC_CACHE_STATS: {
        const Strata__V1__StatsResponse *a = (const void *)pa;

        FZ_CHECK(a->node_id != NULL && a->node_id[0] != '\0' &&
                     a->n_methods <= SRPC_CACHE_N_METHODS + 1,
                 "stats: no node_id, or %zu methods", a->n_methods);
        break;
    }
    case SRPC_CACHE_CLUSTER_LOOKUP: fz_ok_cluster_lookup(pm, pa); break;
    case SRPC_CACHE_SCORE: fz_ok_score(pm, pa); break;
    case FZ_M_HEALTH:
        FZ_CHECK(((const Grpc__Health__V1__HealthCheckResponse *)(const void *)pa)->status ==
                     GRPC__HEALTH__V1__HEALTH_CHECK_RESPONSE__SERVING_STATUS__SERVING,
                 "health: not SERVING");
        break;
    default: break;
    }
}
