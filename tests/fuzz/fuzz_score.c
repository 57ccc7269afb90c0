/*
 * fuzz_score.c - test_fuzz_handlers' Score: IDX objects of the indexer's
 * layout on the pool (layer FZ_SC_LAYER, dim FZ_SC_DIM, finite keys), a
 * builder of valid Score requests over them (and over layer 0, whose pool
 * objects are not of the layout: DATA_LOSS), what the protocol says a
 * malformed one gets, and the checks of an OK answer: at most k candidates,
 * ranked, each a row of a block asked and held, the missing ones asked.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "fuzz_handlers.h"
#include "strata/strata.h"

#define FZ_SC_LAYER 3
#define FZ_SC_DIM   8
#define FZ_SC_HEADS 2

void fz_put_score_idx(int node, int strict)
{
    Strata__V1__PutRequest q = STRATA__V1__PUT_REQUEST__INIT;
    Strata__V1__PutResponse *a;
    size_t n_floats = ((size_t)F.block_tokens + 2) * FZ_SC_DIM;
    fz_rng_t r;

    fz_rng_init(&r, 0x5c0e, 1);
    q.objects = fz_alloc(sizeof(*q.objects) * FZ_POOL);
    q.links = fz_alloc(sizeof(*q.links) * FZ_POOL);
    for (size_t i = 0; i < FZ_POOL; i++) {
        float *keys = fz_alloc(sizeof(float) * n_floats);
        Strata__V1__InlineObject *o = fz_obj(&F.pool[i], KIND_IDX, FZ_SC_LAYER, 16);

        for (size_t f = 0; f < (size_t)F.block_tokens * FZ_SC_DIM; f++) {
            keys[f] = (float)fz_below(&r, 2001) / 1000.0f - 1.0f;
        }
        for (size_t c = 0; c < FZ_SC_DIM; c++) { /* min, max */
            float *mn = keys + (size_t)F.block_tokens * FZ_SC_DIM, *mx = mn + FZ_SC_DIM;

            mn[c] = INFINITY;
            mx[c] = -INFINITY;
            for (size_t row = 0; row < F.block_tokens; row++) {
                float v = keys[row * FZ_SC_DIM + c];

                mn[c] = v < mn[c] ? v : mn[c];
                mx[c] = v > mx[c] ? v : mx[c];
            }
        }
        o->data.data = (uint8_t *)keys;
        o->data.len = sizeof(float) * n_floats;
        o->checksum = XXH3_64bits(keys, o->data.len);
        q.objects[i] = o;
        q.links[i] = fz_link(F.pool, i);
    }
    q.n_objects = FZ_POOL;
    q.n_links = FZ_POOL;
    q.namespace_id = F.ns;
    a = fz_call_ok(node, SRPC_CACHE_PUT, &q);
    for (size_t i = 0; i < a->n_status; i++) {
        FZ_CHECK(!strict || a->status[i] == STRATA__V1__KEY_STATUS__KEY_OK ||
                     a->status[i] == STRATA__V1__KEY_STATUS__KEY_EXISTS,
                 "node %d: put of score object %zu: status %d", node, i, (int)a->status[i]);
    }
    protobuf_c_message_free_unpacked(&a->base, NULL);
}

ProtobufCMessage *fz_b_score(fz_rng_t *r)
{
    Strata__V1__ScoreRequest *q = fz_alloc(sizeof(*q));
    size_t k0 = fz_below(r, FZ_POOL), n = 1 + fz_below(r, FZ_POOL - k0), j = 0;

    strata__v1__score_request__init(q);
    q->namespace_id = F.ns;
    q->layer = fz_chance(r, 80) ? FZ_SC_LAYER : (uint32_t)fz_below(r, 2);
    q->heads = FZ_SC_HEADS;
    q->dim = fz_chance(r, 90) ? FZ_SC_DIM : 1 + (uint32_t)fz_below(r, 16);
    q->n_q = (size_t)q->heads * q->dim;
    q->q = fz_alloc(sizeof(float) * q->n_q);
    q->n_w = q->heads;
    q->w = fz_alloc(sizeof(float) * q->n_w);
    for (size_t i = 0; i < q->n_q; i++) {
        q->q[i] = (float)fz_below(r, 2001) / 1000.0f - 1.0f;
    }
    for (size_t i = 0; i < q->n_w; i++) {
        q->w[i] = (float)fz_below(r, 2001) / 1000.0f - 0.5f;
    }
    q->k = fz_chance(r, 20) ? ST_SCORE_K_MAX : 1 + (uint32_t)fz_below(r, 200);
    q->use_floor = fz_chance(r, 30);
    q->floor = (float)fz_below(r, 2001) / 1000.0f - 0.5f;
    q->block_hashes.data = fz_alloc(n * ST_HASH_BYTES);
    q->blocks = fz_alloc(sizeof(uint64_t) * n);
    for (size_t i = 0; i < n; i++) {
        if (i > 0 && fz_chance(r, 30)) {
            continue; /* a gap: blocks need only rise */
        }
        memcpy(q->block_hashes.data + j * ST_HASH_BYTES, F.pool[k0 + i].b, ST_HASH_BYTES);
        q->blocks[j++] = k0 + i;
    }
    q->block_hashes.len = j * ST_HASH_BYTES;
    q->n_blocks = j;
    return &q->base;
}

/* Whether every value of v[0..n) is finite. */
static int fz_sc_finite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(v[i])) {
            return 0;
        }
    }
    return 1;
}

void fz_expect_score(const ProtobufCMessage *pm, fz_expect_t *e)
{
    const Strata__V1__ScoreRequest *q = (const void *)pm;
    size_t n = q->block_hashes.len / ST_HASH_BYTES;

    if (q->heads == 0 || q->heads > 64 || q->dim == 0 || q->dim > 1024 ||
        q->n_q != (size_t)q->heads * q->dim || q->n_w != q->heads) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "heads=%u dim=%u with %zu q, %zu w", q->heads,
               q->dim, q->n_q, q->n_w);
    }
    if (q->k == 0 || q->k > ST_SCORE_K_MAX || q->layer >= FZ_LAYERS_MAX) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "k=%u layer=%u", q->k, q->layer);
    }
    if (q->block_hashes.len % ST_HASH_BYTES != 0 || n != q->n_blocks || n == 0 ||
        n > F.lim.max_hashes) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "%zu hash bytes for %zu blocks",
               q->block_hashes.len, q->n_blocks);
    }
    if (!fz_sc_finite(q->q, q->n_q) || !fz_sc_finite(q->w, q->n_w) ||
        (q->use_floor && !isfinite(q->floor))) {
        fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "q or w not finite");
    }
    for (size_t i = 0; i < q->n_blocks; i++) {
        if ((i > 0 && q->blocks[i] <= q->blocks[i - 1]) ||
            q->blocks[i] >= UINT64_MAX / F.block_tokens) {
            fz_bad(e, GRPC_STATUS_INVALID_ARGUMENT, "blocks[%zu]=%llu", i,
                   (unsigned long long)q->blocks[i]);
            break;
        }
    }
    /* An object not of the layout (layer 0 of the pool, or another dim). */
    e->env_codes |= CODE(DATA_LOSS);
}

void fz_ok_score(const ProtobufCMessage *pm, const ProtobufCMessage *pa)
{
    const Strata__V1__ScoreRequest *q = (const void *)pm;
    const Strata__V1__ScoreResponse *a = (const void *)pa;
    const uint64_t bt = F.block_tokens;

    FZ_CHECK(a->n_positions == a->n_scores && a->n_positions <= q->k && a->block_tokens == bt,
             "score: %zu positions, %zu scores, block_tokens %u for k=%u", a->n_positions,
             a->n_scores, a->block_tokens, q->k);
    FZ_CHECK(a->n_missing <= q->n_blocks && a->blocks_scored <= q->n_blocks - a->n_missing,
             "score: %zu missing, %u scored of %zu blocks", a->n_missing, a->blocks_scored,
             q->n_blocks);
    FZ_CHECK(q->use_floor || a->n_positions == (q->k < (q->n_blocks - a->n_missing) * bt
                                                    ? q->k
                                                    : (q->n_blocks - a->n_missing) * bt),
             "score: %zu candidates for k=%u over %zu blocks held", a->n_positions, q->k,
             q->n_blocks - a->n_missing);
    for (size_t m = 0; m < a->n_missing; m++) {
        size_t i = 0;

        while (i < q->n_blocks && q->blocks[i] != a->missing[m]) {
            i++;
        }
        FZ_CHECK(i < q->n_blocks, "score: missing block %llu was not asked",
                 (unsigned long long)a->missing[m]);
    }
    for (size_t p = 0; p < a->n_positions; p++) {
        uint64_t b = a->positions[p] / bt;
        size_t i = 0;

        while (i < q->n_blocks && q->blocks[i] != b) {
            i++;
        }
        FZ_CHECK(i < q->n_blocks, "score: position %llu is in block %llu, not asked",
                 (unsigned long long)a->positions[p], (unsigned long long)b);
        FZ_CHECK(!q->use_floor || a->scores[p] >= q->floor, "score: candidate %zu below the floor",
                 p);
        for (size_t m = 0; m < a->n_missing; m++) {
            FZ_CHECK(a->missing[m] != b, "score: position %llu is in missing block %llu",
                     (unsigned long long)a->positions[p], (unsigned long long)b);
        }
        FZ_CHECK(p == 0 || a->scores[p] < a->scores[p - 1] ||
                     (a->scores[p] == a->scores[p - 1] && a->positions[p] > a->positions[p - 1]),
                 "score: candidates %zu and %zu out of rank", p - 1, p);
    }
}
