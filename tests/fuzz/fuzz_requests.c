/*
 * fuzz_requests.c - test_fuzz_handlers' data and valid requests: the pool
 * chain stored on both nodes, object bytes, Hello and the namespaces known,
 * the mutator's domain hooks (real namespace ids, block hashes, live
 * reservation, lease and session ids) and one builder of a valid request
 * per method.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "fuzz_handlers.h"

/* ----------------------------------------------------------- test data -- */

/* Object bytes for a key: a function of the key alone. */
void fz_obj_bytes(uint8_t *buf, size_t len, const st_hash_t *h, int kind, uint32_t layer)
{
    uint64_t x = XXH3_64bits_withSeed(h->b, 16, ((uint64_t)kind << 32) | layer);

    for (size_t i = 0; i < len; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(x >> 56);
    }
}

void fz_chain(uint64_t stream, st_hash_t *out, size_t n)
{
    uint32_t *tok = malloc(sizeof(uint32_t) * n * F.block_tokens);
    size_t nb = 0;

    FZ_CHECK(tok != NULL, "out of memory");
    for (size_t i = 0; i < n * F.block_tokens; i++) {
        tok[i] = (uint32_t)(XXH3_64bits_withSeed(&i, sizeof(i), stream) % 150000);
    }
    FZ_CHECK(st_hash_chain(&F.ns_seed, tok, n * F.block_tokens, F.block_tokens, NULL, 0, out, n,
                           &nb) == ST_OK &&
                 nb == n,
             "st_hash_chain failed");
    free(tok);
}

ProtobufCBinaryData fz_hb(const st_hash_t *h)
{
    ProtobufCBinaryData b = {ST_HASH_BYTES, (uint8_t *)h->b};

    return b;
}

Strata__V1__ObjectKey *fz_key(const st_hash_t *h, int kind, uint32_t layer)
{
    Strata__V1__ObjectKey *k = fz_alloc(sizeof(*k));

    strata__v1__object_key__init(k);
    k->block_hash = fz_hb(h);
    k->kind = (Strata__V1__ObjectKind)kind;
    k->layer = layer;
    return k;
}

Strata__V1__InlineObject *fz_obj(const st_hash_t *h, int kind, uint32_t layer, size_t len)
{
    Strata__V1__InlineObject *o = fz_alloc(sizeof(*o));
    uint8_t *d = fz_alloc(len);

    strata__v1__inline_object__init(o);
    fz_obj_bytes(d, len, h, kind, layer);
    o->key = fz_key(h, kind, layer);
    o->data.data = d;
    o->data.len = len;
    o->checksum = XXH3_64bits(d, len);
    return o;
}

Strata__V1__BlockLink *fz_link(const st_hash_t *chain, size_t i)
{
    Strata__V1__BlockLink *l = fz_alloc(sizeof(*l));

    strata__v1__block_link__init(l);
    l->hash = fz_hb(&chain[i]);
    l->parent_hash = fz_hb(i == 0 ? &F.ns_seed : &chain[i - 1]);
    l->block_index = i;
    return l;
}

/* Puts n blocks of chain (KV layers 0-1, IDX layer 0, KDA at each
 * kda_interval - 1) on node; every answer must be KEY_OK or KEY_EXISTS
 * (when strict) or anything per key (a refill after fuzzing). */
void fz_put_chain(int node, const st_hash_t *chain, size_t n, size_t obj_len, int strict)
{
    Strata__V1__PutRequest q = STRATA__V1__PUT_REQUEST__INIT;
    Strata__V1__PutResponse *a;
    size_t no = 0;

    q.objects = fz_alloc(sizeof(*q.objects) * n * 4);
    q.links = fz_alloc(sizeof(*q.links) * n);
    for (size_t i = 0; i < n; i++) {
        q.objects[no++] = fz_obj(&chain[i], KIND_KV, 0, obj_len);
        q.objects[no++] = fz_obj(&chain[i], KIND_KV, 1, obj_len);
        q.objects[no++] = fz_obj(&chain[i], KIND_IDX, 0, obj_len);
        if (i % 16 == 15 || i + 1 == n) {
            q.objects[no++] = fz_obj(&chain[i], KIND_KDA, 0, obj_len);
        }
        q.links[i] = fz_link(chain, i);
    }
    q.n_objects = no;
    q.n_links = n;
    q.namespace_id = F.ns;
    a = fz_call_ok(node, SRPC_CACHE_PUT, &q);
    FZ_CHECK(a->n_status == no, "put: %zu statuses for %zu objects", a->n_status, no);
    for (size_t i = 0; i < no && strict; i++) {
        FZ_CHECK(a->status[i] == STRATA__V1__KEY_STATUS__KEY_OK ||
                     a->status[i] == STRATA__V1__KEY_STATUS__KEY_EXISTS,
                 "put of the set-up chain: object %zu has status %d", i, (int)a->status[i]);
    }
    protobuf_c_message_free_unpacked(&a->base, NULL);
}

void fz_hello(int node, const char *tenant, const char *model)
{
    Strata__V1__HelloRequest q = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *a;

    q.protocol_version = 1;
    q.tenant = (char *)tenant;
    q.model = (char *)model;
    q.client_name = "fuzz_handlers";
    a = fz_call_ok(node, SRPC_CACHE_HELLO, &q);
    FZ_CHECK(a->namespace_seed.len == 16 && a->limits != NULL && a->namespace_id != 0,
             "hello: answer without seed, limits or namespace");
    if (F.ns == 0) {
        F.ns = a->namespace_id;
        memcpy(F.ns_seed.b, a->namespace_seed.data, 16);
        F.block_tokens = a->block_tokens;
        F.segment_blocks = a->segment_blocks;
        F.lim.max_message = a->limits->max_message_bytes;
        F.lim.max_keys = a->limits->max_keys_per_call;
        F.lim.max_hashes = a->limits->max_blocks_per_lookup;
        F.lim.max_inline = a->limits->max_inline_bytes;
        F.lim.lease_ms = a->limits->lease_ms;
        F.lim.max_lease = a->limits->max_lease_ms;
        F.lim.reservation_ms = a->limits->reservation_ms;
    }
    FZ_CHECK(a->namespace_id == F.ns && memcmp(a->namespace_seed.data, F.ns_seed.b, 16) == 0,
             "node %d: hello answers namespace %llu, expected %llu (or another seed)", node,
             (unsigned long long)a->namespace_id, (unsigned long long)F.ns);
    FZ_CHECK(a->limits->max_keys_per_call == F.lim.max_keys &&
                 a->limits->max_blocks_per_lookup == F.lim.max_hashes &&
                 a->limits->max_lease_ms == F.lim.max_lease,
             "node %d: hello answers other limits", node);
    protobuf_c_message_free_unpacked(&a->base, NULL);
}

void fz_known_add(int node, uint64_t ns)
{
    fz_node_t *nd = &F.node[node];

    for (size_t i = 0; i < nd->n_known; i++) {
        if (nd->known_ns[i] == ns) {
            return;
        }
    }
    FZ_CHECK(nd->n_known < sizeof(nd->known_ns) / sizeof(nd->known_ns[0]),
             "node %d: more namespaces than the daemon's limit", node);
    nd->known_ns[nd->n_known++] = ns;
}

int fz_known(int node, uint64_t ns)
{
    for (size_t i = 0; i < F.node[node].n_known; i++) {
        if (F.node[node].known_ns[i] == ns) {
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------- domain hooks -- */

static int fz_name_is(const ProtobufCFieldDescriptor *fd, const char *name)
{
    return strcmp(fd->name, name) == 0;
}

int fz_dom_u64(void *user, fz_rng_t *r, const ProtobufCFieldDescriptor *fd, uint64_t *out)
{
    fz_node_t *nd = &F.node[F.cur_node];

    (void)user;
    if (fz_name_is(fd, "namespace_id")) {
        switch (fz_below(r, 4)) {
        case 0: *out = F.ns; return 1;
        case 1: *out = 0; return 1;
        case 2: *out = F.ns ^ (1ull << fz_below(r, 64)); return 1;
        default: return 0;
        }
    }
    if (fz_name_is(fd, "reservation_id") && nd->n_resv > 0 && fz_chance(r, 50)) {
        *out = nd->resv[fz_below(r, nd->n_resv)].id + fz_below(r, 3) - 1;
        return 1;
    }
    if (fz_name_is(fd, "lease_ids") && nd->n_leases > 0 && fz_chance(r, 50)) {
        *out = nd->leases[fz_below(r, nd->n_leases < FZ_RING ? nd->n_leases : FZ_RING)];
        return 1;
    }
    if ((fz_name_is(fd, "lease_ms") || fz_name_is(fd, "ttl_ms")) && fz_chance(r, 60)) {
        static const uint64_t v[] = {0, 1, 999, 1000, 1001};
        uint64_t lim = fz_chance(r, 50) ? F.lim.max_lease : F.lim.reservation_ms;

        *out = fz_chance(r, 50) ? lim + fz_below(r, 3) - 1 : v[fz_below(r, 5)];
        return 1;
    }
    if (fz_name_is(fd, "first_block") || fz_name_is(fd, "block_index")) {
        *out = (uint64_t)F.segment_blocks * fz_below(r, 8) + (fz_chance(r, 70) ? 0 : 1);
        return fz_chance(r, 60);
    }
    if (fz_name_is(fd, "layer") || fz_name_is(fd, "layers")) {
        static const uint64_t v[] = {0, 1, 2, 127, 128, 129, UINT32_MAX};

        *out = v[fz_below(r, sizeof(v) / sizeof(v[0]))];
        return fz_chance(r, 60);
    }
    return 0;
}

/* n hashes of the pool from a random start (wrapping), packed. */
static void fz_pool_hashes(fz_rng_t *r, size_t n, ProtobufCBinaryData *out)
{
    size_t start = fz_below(r, FZ_POOL);

    out->len = n * ST_HASH_BYTES;
    out->data = fz_alloc(out->len + 1);
    for (size_t i = 0; i < n; i++) {
        memcpy(out->data + i * ST_HASH_BYTES, F.pool[(start + i) % FZ_POOL].b, ST_HASH_BYTES);
    }
}

int fz_dom_bytes(void *user, fz_rng_t *r, const ProtobufCFieldDescriptor *fd,
                 ProtobufCBinaryData *out)
{
    fz_node_t *nd = &F.node[F.cur_node];

    (void)user;
    if (fz_name_is(fd, "session_id") && nd->n_sessions > 0 && fz_chance(r, 50)) {
        out->len = 16;
        out->data = fz_dup(
            nd->sessions[fz_below(r, nd->n_sessions < FZ_RING ? nd->n_sessions : FZ_RING)], 16);
        return 1;
    }
    if (fz_name_is(fd, "block_hash") || fz_name_is(fd, "hash") || fz_name_is(fd, "parent_hash") ||
        fz_name_is(fd, "head_hash") || fz_name_is(fd, "session_id")) {
        *out = fz_hb(fz_chance(r, 10) ? &F.ns_seed : &F.pool[fz_below(r, FZ_POOL)]);
        return 1;
    }
    if (fz_name_is(fd, "block_hashes")) {
        static const size_t v[] = {1, 2, 15, 16, 17, 64, 4095, 4096, 4097, 5000};
        size_t n = fz_chance(r, 50) ? 1 + fz_below(r, FZ_POOL) : v[fz_below(r, 10)];

        fz_pool_hashes(r, n, out);
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------- builders -- */

/* Valid requests, one builder per method. */

ProtobufCMessage *fz_b_hello(fz_rng_t *r)
{
    Strata__V1__HelloRequest *q = fz_alloc(sizeof(*q));

    strata__v1__hello_request__init(q);
    q->protocol_version = 1;
    q->tenant = "fuzz";
    q->model = "m";
    q->client_name = "fuzz_handlers";
    q->block_tokens = fz_chance(r, 50) ? 0 : F.block_tokens;
    q->transport = (Strata__V1__TransportKind)fz_below(r, 3);
    return &q->base;
}

static uint32_t *fz_layers(fz_rng_t *r, size_t *n)
{
    uint32_t *l = fz_alloc(sizeof(uint32_t) * 2);

    *n = 1 + fz_below(r, 2);
    l[0] = 0;
    l[1] = 1;
    return l;
}

ProtobufCMessage *fz_b_lookup(fz_rng_t *r)
{
    Strata__V1__LookupRequest *q = fz_alloc(sizeof(*q));
    size_t S = F.segment_blocks, nseg_pool = FZ_POOL / S, k0 = fz_below(r, nseg_pool);
    size_t nseg = 1 + fz_below(r, nseg_pool - k0);

    strata__v1__lookup_request__init(q);
    q->namespace_id = F.ns;
    q->segments = fz_alloc(sizeof(*q->segments) * nseg);
    for (size_t i = 0; i < nseg; i++) {
        Strata__V1__Segment *s = fz_alloc(sizeof(*s));

        strata__v1__segment__init(s);
        s->first_block = (k0 + i) * S;
        s->block_hashes.data = F.pool[(k0 + i) * S].b;
        s->block_hashes.len = S * ST_HASH_BYTES;
        q->segments[i] = s;
    }
    q->n_segments = nseg;
    q->kinds_mask = (uint32_t)(fz_below(r, 4) << 1); /* KV and/or IDX, or none */
    q->layers = fz_layers(r, &q->n_layers);
    q->want_locations = fz_chance(r, 50);
    q->lease = fz_chance(r, 30);
    q->lease_ms = fz_chance(r, 50) ? 0 : (uint32_t)(1 + fz_below(r, F.lim.max_lease));
    if (fz_chance(r, 40)) {
        /* Compact segments (docs/protocol.md "Compact segments"), in bulk: the
         * same segments (all of them, or after a few full ones), each covering
         * its S blocks with the hashes of block 0, a few between and the last;
         * no locations, no lease. */
        size_t keep = fz_chance(r, 50) ? 0 : fz_below(r, nseg), nc = nseg - keep, at = 0;

        q->want_locations = 0;
        q->lease = 0;
        q->compact_first = fz_alloc(sizeof(uint64_t) * nc);
        q->compact_blocks = fz_alloc(sizeof(uint32_t) * nc);
        q->compact_probes = fz_alloc(sizeof(uint32_t) * nc);
        q->compact_offsets = fz_alloc(sizeof(uint32_t) * nc * S);
        q->compact_hashes.data = fz_alloc(ST_HASH_BYTES * nc * S);
        for (size_t i = 0; i < nc; i++) {
            uint64_t first = q->segments[keep + i]->first_block;
            uint32_t np = 0;

            for (size_t o = 0; o < S; o++) {
                if (o == 0 || o == S - 1 || fz_chance(r, 15)) {
                    q->compact_offsets[at + np] = (uint32_t)o;
                    memcpy(q->compact_hashes.data + (at + np) * ST_HASH_BYTES, F.pool[first + o].b,
                           ST_HASH_BYTES);
                    np++;
                }
            }
            q->compact_first[i] = first;
            q->compact_blocks[i] = (uint32_t)S;
            q->compact_probes[i] = np;
            at += np;
        }
        q->n_compact_first = q->n_compact_blocks = q->n_compact_probes = nc;
        q->n_compact_offsets = at;
        q->compact_hashes.len = at * ST_HASH_BYTES;
        q->n_segments = keep;
    }
    return &q->base;
}

static Strata__V1__ObjectKey *fz_pool_key(fz_rng_t *r)
{
    static const int kinds[] = {KIND_KV, KIND_KV, KIND_IDX, KIND_KDA, KIND_VIS};
    int kind = kinds[fz_below(r, 5)];

    return fz_key(&F.pool[fz_below(r, FZ_POOL)], kind,
                  kind == KIND_KV ? (uint32_t)fz_below(r, 2) : 0);
}

ProtobufCMessage *fz_b_locate(fz_rng_t *r)
{
    Strata__V1__LocateRequest *q = fz_alloc(sizeof(*q));

    strata__v1__locate_request__init(q);
    q->namespace_id = F.ns;
    q->n_keys = fz_below(r, 8);
    q->keys = fz_alloc(sizeof(*q->keys) * (q->n_keys + 1));
    for (size_t i = 0; i < q->n_keys; i++) {
        q->keys[i] = fz_pool_key(r);
    }
    if (q->n_keys == 0 || fz_chance(r, 50)) {
        Strata__V1__KeyGrid *g = fz_alloc(sizeof(*g));

        strata__v1__key_grid__init(g);
        fz_pool_hashes(r, 1 + fz_below(r, 16), &g->block_hashes);
        g->kinds = fz_alloc(sizeof(*g->kinds) * 2);
        g->kinds[0] = KIND_KV;
        g->kinds[1] = KIND_IDX;
        g->n_kinds = 1 + fz_below(r, 2);
        g->layers = fz_layers(r, &g->n_layers);
        q->grid = g;
    }
    q->lease = fz_chance(r, 30);
    q->lease_ms = fz_chance(r, 50) ? 0 : (uint32_t)(1 + fz_below(r, F.lim.max_lease));
    q->promote = fz_chance(r, 20);
    return &q->base;
}

static ProtobufCMessage *fz_b_reserve(fz_rng_t *r)
{
    Strata__V1__ReserveRequest *q = fz_alloc(sizeof(*q));
    size_t n = 1 + fz_below(r, 4);
    int rows = fz_chance(r, 50);

    strata__v1__reserve_request__init(q);
    q->namespace_id = F.ns;
    q->keys = fz_alloc(sizeof(*q->keys) * n);
    q->lengths = fz_alloc(sizeof(uint64_t) * n);
    q->row_bytes = rows ? fz_alloc(sizeof(uint32_t) * n) : NULL;
    q->links = fz_alloc(sizeof(*q->links) * n);
    for (size_t i = 0; i < n; i++) {
        st_hash_t *h = fz_alloc(sizeof(*h));
        Strata__V1__BlockLink *l = fz_alloc(sizeof(*l));

        fz_fill(r, h->b, 16); /* a fresh block: nothing is there yet */
        q->keys[i] = fz_key(h, fz_chance(r, 70) ? KIND_KV : KIND_KDA, 0);
        q->lengths[i] = 1 + fz_below(r, 4096);
        if (rows) {
            q->row_bytes[i] = 64;
        }
        strata__v1__block_link__init(l);
        l->hash = fz_hb(h);
        l->parent_hash = fz_hb(&F.pool[fz_below(r, FZ_POOL)]);
        l->block_index = FZ_POOL + fz_below(r, 100);
        q->links[i] = l;
    }
    q->n_keys = q->n_lengths = q->n_links = n;
    q->n_row_bytes = rows ? n : 0;
    return &q->base;
}

static const fz_resv_t *fz_pick_resv(fz_rng_t *r)
{
    fz_node_t *nd = &F.node[F.cur_node];

    return nd->n_resv > 0 ? &nd->resv[fz_below(r, nd->n_resv)] : NULL;
}

static ProtobufCMessage *fz_b_commit(fz_rng_t *r)
{
    Strata__V1__CommitRequest *q = fz_alloc(sizeof(*q));
    const fz_resv_t *rv = fz_pick_resv(r);
    size_t n = rv ? rv->n_keys : 1;

    strata__v1__commit_request__init(q);
    q->namespace_id = F.ns;
    q->reservation_id = rv ? rv->id : fz_next(r);
    q->checksums = fz_alloc(sizeof(uint64_t) * n);
    fz_fill(r, q->checksums, sizeof(uint64_t) * n);
    q->n_checksums = n;
    return &q->base;
}

static ProtobufCMessage *fz_b_abort(fz_rng_t *r)
{
    Strata__V1__AbortRequest *q = fz_alloc(sizeof(*q));
    const fz_resv_t *rv = fz_pick_resv(r);

    strata__v1__abort_request__init(q);
    q->namespace_id = F.ns;
    q->reservation_id = rv ? rv->id : fz_next(r);
    return &q->base;
}

static ProtobufCMessage *fz_b_release(fz_rng_t *r)
{
    Strata__V1__ReleaseRequest *q = fz_alloc(sizeof(*q));
    fz_node_t *nd = &F.node[F.cur_node];
    size_t n = 1 + fz_below(r, 4);

    strata__v1__release_request__init(q);
    q->namespace_id = F.ns;
    q->lease_ids = fz_alloc(sizeof(uint64_t) * n);
    for (size_t i = 0; i < n; i++) {
        q->lease_ids[i] =
            nd->n_leases > 0
                ? nd->leases[fz_below(r, nd->n_leases < FZ_RING ? nd->n_leases : FZ_RING)]
                : fz_next(r);
    }
    q->n_lease_ids = n;
    return &q->base;
}

static ProtobufCMessage *fz_b_put(fz_rng_t *r)
{
    Strata__V1__PutRequest *q = fz_alloc(sizeof(*q));
    size_t n = 1 + fz_below(r, 4);

    strata__v1__put_request__init(q);
    q->namespace_id = F.ns;
    q->objects = fz_alloc(sizeof(*q->objects) * n);
    q->links = fz_alloc(sizeof(*q->links) * n);
    for (size_t i = 0; i < n; i++) {
        size_t b = fz_below(r, FZ_POOL);
        Strata__V1__ObjectKey *k = fz_pool_key(r);

        q->objects[i] = fz_obj(&F.pool[b], (int)k->kind, k->layer, 1 + fz_below(r, 2048));
        q->links[i] = fz_link(F.pool, b);
    }
    q->n_objects = q->n_links = n;
    return &q->base;
}

ProtobufCMessage *fz_b_get(fz_rng_t *r)
{
    Strata__V1__GetRequest *q = fz_alloc(sizeof(*q));
    size_t n = 1 + fz_below(r, 8);

    strata__v1__get_request__init(q);
    q->namespace_id = F.ns;
    q->keys = fz_alloc(sizeof(*q->keys) * n);
    for (size_t i = 0; i < n; i++) {
        q->keys[i] = fz_pool_key(r);
    }
    q->n_keys = n;
    return &q->base;
}

static ProtobufCMessage *fz_b_delete(fz_rng_t *r)
{
    Strata__V1__DeleteRequest *q = fz_alloc(sizeof(*q));

    strata__v1__delete_request__init(q);
    q->namespace_id = F.ns;
    q->keys = fz_alloc(sizeof(*q->keys));
    q->keys[0] = fz_pool_key(r);
    q->n_keys = 1;
    return &q->base;
}

static ProtobufCMessage *fz_b_pin(fz_rng_t *r)
{
    Strata__V1__PinRequest *q = fz_alloc(sizeof(*q));

    strata__v1__pin_request__init(q);
    q->namespace_id = F.ns;
    fz_pool_hashes(r, 1 + fz_below(r, 4), &q->block_hashes);
    return &q->base;
}

static ProtobufCMessage *fz_b_unpin(fz_rng_t *r)
{
    Strata__V1__UnpinRequest *q = fz_alloc(sizeof(*q));

    strata__v1__unpin_request__init(q);
    q->namespace_id = F.ns;
    fz_pool_hashes(r, 1 + fz_below(r, 4), &q->block_hashes);
    return &q->base;
}

static ProtobufCBinaryData fz_session_id(fz_rng_t *r)
{
    fz_node_t *nd = &F.node[F.cur_node];
    ProtobufCBinaryData b;

    b.len = 16;
    if (nd->n_sessions > 0 && fz_chance(r, 80)) {
        b.data = fz_dup(
            nd->sessions[fz_below(r, nd->n_sessions < FZ_RING ? nd->n_sessions : FZ_RING)], 16);
    } else {
        b.data = fz_alloc(16);
        fz_fill(r, b.data, 16);
    }
    return b;
}

static ProtobufCMessage *fz_b_open(fz_rng_t *r)
{
    Strata__V1__OpenSessionRequest *q = fz_alloc(sizeof(*q));

    strata__v1__open_session_request__init(q);
    q->namespace_id = F.ns;
    if (fz_chance(r, 70)) {
        q->session_id = fz_session_id(r);
    }
    q->tenant = "fuzz";
    q->model = "m";
    q->ttl_ms = fz_chance(r, 50) ? 0 : (uint32_t)(1000 + fz_below(r, 100000));
    return &q->base;
}

static ProtobufCMessage *fz_b_append(fz_rng_t *r)
{
    Strata__V1__AppendSessionRequest *q = fz_alloc(sizeof(*q));
    size_t b = fz_below(r, FZ_POOL);

    strata__v1__append_session_request__init(q);
    q->namespace_id = F.ns;
    q->session_id = fz_session_id(r);
    q->head_hash = fz_hb(&F.pool[b]);
    q->length = (b + 1) * F.block_tokens;
    return &q->base;
}

static ProtobufCMessage *fz_b_getsession(fz_rng_t *r)
{
    Strata__V1__GetSessionRequest *q = fz_alloc(sizeof(*q));

    strata__v1__get_session_request__init(q);
    q->namespace_id = F.ns;
    q->session_id = fz_session_id(r);
    return &q->base;
}

static ProtobufCMessage *fz_b_close(fz_rng_t *r)
{
    Strata__V1__CloseSessionRequest *q = fz_alloc(sizeof(*q));

    strata__v1__close_session_request__init(q);
    q->namespace_id = F.ns;
    q->session_id = fz_session_id(r);
    q->forget = fz_chance(r, 50);
    return &q->base;
}

static ProtobufCMessage *fz_b_stats(fz_rng_t *r)
{
    Strata__V1__StatsRequest *q = fz_alloc(sizeof(*q));

    strata__v1__stats_request__init(q);
    q->namespace_id = fz_chance(r, 50) ? F.ns : 0;
    return &q->base;
}

ProtobufCMessage *fz_b_cluster(fz_rng_t *r)
{
    Strata__V1__ClusterLookupRequest *q = fz_alloc(sizeof(*q));
    size_t S = F.segment_blocks, k0 = fz_below(r, FZ_POOL / S);
    size_t n = 1 + fz_below(r, FZ_POOL - k0 * S);

    strata__v1__cluster_lookup_request__init(q);
    q->namespace_id = F.ns;
    q->block_hashes.data = F.pool[k0 * S].b;
    q->block_hashes.len = n * ST_HASH_BYTES;
    q->first_block = k0 * S;
    q->kinds_mask = (uint32_t)(fz_below(r, 4) << 1);
    q->layers = fz_layers(r, &q->n_layers);
    q->want_locations = fz_chance(r, 50);
    q->lease = fz_chance(r, 20);
    return &q->base;
}

/* A peer's copy of KDA objects and session records (refused to a tenant's token). */
static ProtobufCMessage *fz_b_replicate(fz_rng_t *r)
{
    Strata__V1__ReplicateRequest *q = fz_alloc(sizeof(*q));
    size_t n = fz_below(r, 4), ns = fz_below(r, 3);

    strata__v1__replicate_request__init(q);
    q->tenant = "fuzz";
    q->model = "m";
    q->block_tokens = (uint32_t)F.block_tokens;
    q->check_only = fz_chance(r, 30);
    q->objects = fz_alloc(sizeof(*q->objects) * (n + 1));
    q->links = fz_alloc(sizeof(*q->links) * (n + 1));
    for (size_t i = 0; i < n; i++) {
        size_t b = fz_below(r, FZ_POOL);

        q->objects[i] = fz_obj(&F.pool[b], KIND_KDA, 0, 1 + fz_below(r, 2048));
        q->links[i] = fz_link(F.pool, b);
        q->links[i]->placement = fz_hb(&F.pool[b - b % F.segment_blocks]);
    }
    q->n_objects = q->n_links = n;
    q->sessions = fz_alloc(sizeof(*q->sessions) * (ns + 1));
    q->session_checksum = fz_alloc(sizeof(*q->session_checksum) * (ns + 1));
    for (size_t i = 0; i < ns; i++) {
        Strata__V1__SessionInfo *si = fz_alloc(sizeof(*si));
        size_t b = fz_below(r, FZ_POOL);

        strata__v1__session_info__init(si);
        si->session_id = fz_session_id(r);
        si->head_hash = fz_hb(&F.pool[b]);
        si->length = (b + 1) * F.block_tokens;
        si->version = fz_below(r, 8);
        si->ttl_ms = (uint32_t)fz_below(r, 100000);
        q->sessions[i] = si;
        q->session_checksum[i] = fz_below(r, 1u << 30);
    }
    q->n_sessions = q->n_session_checksum = ns;
    return &q->base;
}

static ProtobufCMessage *fz_b_drain(fz_rng_t *r)
{
    Strata__V1__DrainRequest *q = fz_alloc(sizeof(*q));

    strata__v1__drain_request__init(q);
    q->timeout_ms = (uint32_t)fz_below(r, 100000);
    return &q->base;
}

static ProtobufCMessage *fz_b_health(fz_rng_t *r)
{
    static const char *const svc[] = {"", SRPC_CACHE_SERVICE, SRPC_HEALTH_SERVICE};
    Grpc__Health__V1__HealthCheckRequest *q = fz_alloc(sizeof(*q));

    grpc__health__v1__health_check_request__init(q);
    q->service = (char *)svc[fz_below(r, 3)];
    return &q->base;
}

const fz_builder_fn fz_builders[FZ_N_METHODS] = {
    fz_b_hello,   fz_b_lookup,    fz_b_locate,     fz_b_reserve, fz_b_commit, fz_b_abort,
    fz_b_release, fz_b_put,       fz_b_get,        fz_b_delete,  fz_b_pin,    fz_b_unpin,
    fz_b_open,    fz_b_append,    fz_b_getsession, fz_b_close,   fz_b_stats,  fz_b_cluster,
    fz_b_score,   fz_b_replicate, fz_b_drain,      fz_b_health,  NULL,
};
