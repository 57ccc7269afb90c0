/*
 * handlers_common.c - the helpers of handlers.h that every handler uses:
 * authentication and namespace checks, keys, hashes, locations. The method
 * table is handlers.c; Hello and Stats are in handlers_node.c.
 */
#include "handlers.h"

#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

#include "clock.h"
#include "kinds.h"
#include "log.h"
#include "utf8.h"
#include "strata/strata.h" /* ST_KIND_*, which CD_KIND_* equal */

/* ------------------------------------------------------------ helpers -- */

st_status_t cd_h_auth(srpc_ctx_t *ctx, cd_daemon_t *d)
{
    const cd_principal_t *pr = cd_au_principal(ctx);

    (void)d;
    if (pr->pr_kind == CD_PR_NONE) {
        srpc_ctx_set_error(ctx, "this node requires a token (authorization: Bearer <token>)");
        return ST_ERR_UNAUTHENTICATED;
    }
    if (pr->pr_kind == CD_PR_TENANT && atomic_load(&pr->pr_tenant->tn_removed)) {
        srpc_ctx_set_error(ctx, "token refused: it belongs to no tenant of this node");
        return ST_ERR_UNAUTHENTICATED;
    }
    return ST_OK;
}

st_status_t cd_h_ns(srpc_ctx_t *ctx, cd_daemon_t *d, uint64_t wire_id, cd_ns_entry_t **e_p)
{
    st_status_t status = cd_h_auth(ctx, d);
    cd_ns_entry_t *e;

    if (status != ST_OK) {
        return status;
    }
    e = cd_daemon_ns_find(d, wire_id);
    /* Another tenant's namespace answers as an unknown one: its existence is not told. */
    if (e == NULL || !cd_au_may_tenant(cd_au_principal(ctx), e->tenant)) {
        srpc_ctx_set_error(ctx, "unknown namespace_id=%llu on node %s: call Hello first",
                           (unsigned long long)wire_id, d->cfg.node_id);
        return ST_ERR_NOT_FOUND;
    }
    *e_p = e;
    return ST_OK;
}

/* The daemon's kinds are the API's (proto/kinds.h maps both to the wire). */
_Static_assert((int)CD_KIND_KV == (int)ST_KIND_KV && (int)CD_KIND_IDX == (int)ST_KIND_IDX &&
                   (int)CD_KIND_KDA == (int)ST_KIND_KDA &&
                   (int)CD_KIND_SESSION == (int)ST_KIND_SESSION &&
                   (int)CD_KIND_VIS == (int)ST_KIND_VIS,
               "CD_KIND_* and ST_KIND_* differ");

int cd_h_kind(Strata__V1__ObjectKind kind)
{
    return pk_kind_from_wire(kind);
}

st_status_t cd_h_key(const Strata__V1__ObjectKey *k, cd_key_t *out)
{
    int kind;

    if (k == NULL || k->block_hash.len != ST_HASH_BYTES) {
        return ST_ERR_INVALID;
    }
    kind = cd_h_kind(k->kind);
    if (kind < 0 || kind == CD_KIND_SESSION || k->layer >= CD_LAYERS_MAX) {
        return ST_ERR_INVALID;
    }
    memcpy(out->hash.b, k->block_hash.data, ST_HASH_BYTES);
    out->kind = (uint32_t)kind;
    out->layer = k->layer;
    return ST_OK;
}

size_t cd_h_grid_cells(const Strata__V1__KeyGrid *g)
{
    if (g == NULL) {
        return 0;
    }
    return g->block_hashes.len / ST_HASH_BYTES * g->n_kinds * g->n_layers;
}

st_status_t cd_h_grid(srpc_ctx_t *ctx, const Strata__V1__KeyGrid *g, cd_key_t *keys, size_t *n,
                      size_t cap)
{
    size_t nb;

    if (g == NULL || g->block_hashes.len == 0) {
        return ST_OK;
    }
    if (g->block_hashes.len % ST_HASH_BYTES != 0 || g->n_kinds == 0 || g->n_layers == 0) {
        srpc_ctx_set_error(ctx,
                           "grid: block_hashes must be n x 16 bytes (got %zu) and kinds "
                           "and layers non-empty",
                           g->block_hashes.len);
        return ST_ERR_INVALID;
    }
    nb = g->block_hashes.len / ST_HASH_BYTES;
    for (size_t b = 0; b < nb; b++) {
        for (size_t k = 0; k < g->n_kinds; k++) {
            int kind = cd_h_kind(g->kinds[k]);

            if (kind < 0 || kind == CD_KIND_SESSION ||
                (kind != CD_KIND_KV && kind != CD_KIND_IDX &&
                 (g->n_layers != 1 || g->layers[0] != 0))) {
                srpc_ctx_set_error(ctx, "grid: kind %d is invalid or has layers other than [0]",
                                   (int)g->kinds[k]);
                return ST_ERR_INVALID;
            }
            for (size_t l = 0; l < g->n_layers; l++) {
                if (*n >= cap || g->layers[l] >= CD_LAYERS_MAX) {
                    srpc_ctx_set_error(ctx, "grid: too many cells or layer %u >= %d", g->layers[l],
                                       CD_LAYERS_MAX);
                    return ST_ERR_INVALID;
                }
                memcpy(keys[*n].hash.b, g->block_hashes.data + b * ST_HASH_BYTES, ST_HASH_BYTES);
                keys[*n].kind = (uint32_t)kind;
                keys[*n].layer = g->layers[l];
                (*n)++;
            }
        }
    }
    return ST_OK;
}

Strata__V1__KeyStatus cd_h_key_status(st_status_t status)
{
    return pk_status_to_key_status(status);
}

Strata__V1__Locations *cd_h_locations(srpc_ctx_t *ctx, size_t n)
{
    Strata__V1__Locations *l = srpc_ctx_alloc(ctx, sizeof(*l));

    if (l == NULL) {
        return NULL;
    }
    strata__v1__locations__init(l);
    if (n == 0) {
        return l;
    }
    l->state = srpc_ctx_alloc(ctx, sizeof(*l->state) * n);
    l->region_id = srpc_ctx_alloc(ctx, sizeof(*l->region_id) * n);
    l->offset = srpc_ctx_alloc(ctx, sizeof(*l->offset) * n);
    l->length = srpc_ctx_alloc(ctx, sizeof(*l->length) * n);
    l->checksum = srpc_ctx_alloc(ctx, sizeof(*l->checksum) * n);
    l->generation = srpc_ctx_alloc(ctx, sizeof(*l->generation) * n);
    l->row_bytes = srpc_ctx_alloc(ctx, sizeof(*l->row_bytes) * n);
    l->row_group = srpc_ctx_alloc(ctx, sizeof(*l->row_group) * n);
    if (!l->state || !l->region_id || !l->offset || !l->length || !l->checksum || !l->generation ||
        !l->row_bytes || !l->row_group) {
        return NULL;
    }
    l->n_state = l->n_region_id = l->n_offset = l->n_length = l->n_checksum = l->n_generation =
        l->n_row_bytes = l->n_row_group = n;
    return l;
}

void cd_h_location_set(Strata__V1__Locations *l, size_t i, Strata__V1__ObjectState state,
                       const cd_location_t *where)
{
    l->state[i] = state;
    if (where != NULL && state != STRATA__V1__OBJECT_STATE__OBJECT_MISSING) {
        l->region_id[i] = where->region;
        l->offset[i] = where->offset;
        l->length[i] = where->length;
        l->checksum[i] = where->checksum;
        l->generation[i] = where->generation;
        l->row_bytes[i] = where->row_bytes;
        l->row_group[i] = where->row_group;
        if (l->row_sums != NULL && i < l->n_row_sums && where->rowsum != NULL) {
            l->row_sums[i].data = (uint8_t *)where->rowsum;
            l->row_sums[i].len = where->n_rowsum * 8;
        }
    }
}

const st_hash_t *cd_h_hashes(srpc_ctx_t *ctx, const ProtobufCBinaryData *b, size_t *n_p,
                             const char *field)
{
    static const st_hash_t none;

    if (b->len % ST_HASH_BYTES != 0) {
        srpc_ctx_set_error(ctx, "%s: %zu bytes is not a multiple of 16 (packed block hashes)",
                           field, b->len);
        return NULL;
    }
    *n_p = b->len / ST_HASH_BYTES;
    /* protobuf-c gives bytes fields no particular alignment; st_hash_t needs none. */
    return b->len ? (const st_hash_t *)(const void *)b->data : &none;
}

st_status_t cd_h_fail(srpc_ctx_t *ctx, st_status_t status, const cd_err_t *err)
{
    srpc_ctx_set_error(ctx, "%s", err->msg[0] ? err->msg : st_strerror(status));
    return status;
}
