/* grpc_conn.c - see grpc_conn.h. */
#include "grpc_conn.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

st_status_t gc_call(gc_conn_t *c, int m, const void *req, void **resp, srpc_error_t *err)
{
    return srpc_call(c->ch, &srpc_cache_methods[m], (const ProtobufCMessage *)req, 30000,
                     (ProtobufCMessage **)resp, err);
}

Strata__V1__HelloResponse *gc_hello(gc_conn_t *c, const char *addr, const char *tenant,
                                    const char *model, const char *token)
{
    srpc_channel_config_t cc = {.token = token};
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *resp = NULL;
    srpc_error_t err;

    assert_int_equal(srpc_channel_open(addr, &cc, &c->ch), ST_OK);
    req.protocol_version = 1;
    req.tenant = (char *)tenant;
    req.model = (char *)model;
    assert_int_equal(gc_call(c, SRPC_CACHE_HELLO, &req, (void **)&resp, &err), ST_OK);
    c->ns = resp->namespace_id;
    memcpy(c->seed.b, resp->namespace_seed.data, 16);
    return resp;
}

void gc_open(gc_conn_t *c, const char *addr, const char *token)
{
    Strata__V1__HelloResponse *resp = gc_hello(c, addr, "acme", "k3", token);

    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

void gc_close(gc_conn_t *c)
{
    srpc_channel_close(c->ch);
}

void gc_fill(uint8_t *buf, size_t len, const st_hash_t *h, uint64_t salt)
{
    uint64_t x = XXH3_64bits_withSeed(h->b, 16, salt);

    for (size_t i = 0; i < len; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(x >> 56);
    }
}

Strata__V1__ObjectKey gc_key(const st_hash_t *h, Strata__V1__ObjectKind kind)
{
    Strata__V1__ObjectKey k = STRATA__V1__OBJECT_KEY__INIT;

    k.block_hash.data = (uint8_t *)h->b;
    k.block_hash.len = ST_HASH_BYTES;
    k.kind = kind;
    return k;
}

void gc_inline(Strata__V1__InlineObject *o, Strata__V1__ObjectKey *k, const uint8_t *data,
               size_t len)
{
    strata__v1__inline_object__init(o);
    o->key = k;
    o->data.data = (uint8_t *)data;
    o->data.len = len;
    o->checksum = XXH3_64bits(data, len);
}

/* Object k of p: layer l of block h, its bytes at d. */
static void gc_put_object(gc_put_t *p, size_t k, const st_hash_t *h, uint32_t l,
                          Strata__V1__ObjectKind kind, uint8_t *d, size_t len)
{
    gc_fill(d, len, h, l);
    p->keys[k] = gc_key(h, kind);
    p->keys[k].layer = l;
    gc_inline(&p->objs[k], &p->keys[k], d, len);
    p->op[k] = &p->objs[k];
}

void gc_put_build(gc_put_t *p, uint64_t ns, const st_hash_t *blocks, const st_hash_t *parent0,
                  size_t n, uint32_t n_layers, Strata__V1__ObjectKind kind, size_t len,
                  int64_t first_index)
{
    size_t no = n * n_layers;

    p->data = malloc(len * no);
    p->objs = calloc(no, sizeof(*p->objs));
    p->op = calloc(no, sizeof(*p->op));
    p->keys = calloc(no, sizeof(*p->keys));
    p->links = calloc(n, sizeof(*p->links));
    p->lp = calloc(n, sizeof(*p->lp));
    assert_true(p->data && p->objs && p->op && p->keys && p->links && p->lp);
    for (size_t i = 0; i < n; i++) {
        strata__v1__block_link__init(&p->links[i]);
        p->links[i].hash.data = (uint8_t *)blocks[i].b;
        p->links[i].hash.len = 16;
        p->links[i].parent_hash.data = (uint8_t *)(i == 0 ? parent0->b : blocks[i - 1].b);
        p->links[i].parent_hash.len = 16;
        if (first_index >= 0) {
            p->links[i].block_index = (uint64_t)first_index + i;
        }
        p->lp[i] = &p->links[i];
        for (uint32_t l = 0; l < n_layers; l++) {
            size_t k = i * n_layers + l;

            gc_put_object(p, k, &blocks[i], l, kind, p->data + k * len, len);
        }
    }
    strata__v1__put_request__init(&p->req);
    p->req.namespace_id = ns;
    p->req.objects = p->op;
    p->req.n_objects = no;
    p->req.links = p->lp;
    p->req.n_links = n;
}

void gc_put_free(gc_put_t *p)
{
    free(p->data), free(p->objs), free(p->op), free(p->keys), free(p->links), free(p->lp);
}

uint64_t gc_stat(srpc_channel_t *ch, const char *name)
{
    Strata__V1__StatsRequest req = STRATA__V1__STATS_REQUEST__INIT;
    Strata__V1__StatsResponse *resp = NULL;
    gc_conn_t c = {.ch = ch};
    srpc_error_t err;
    uint64_t v = UINT64_MAX;

    assert_int_equal(gc_call(&c, SRPC_CACHE_STATS, &req, (void **)&resp, &err), ST_OK);
    for (size_t i = 0; i < resp->n_counters; i++) {
        if (strcmp(resp->counters[i]->key, name) == 0) {
            v = resp->counters[i]->value;
        }
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    assert_true(v != UINT64_MAX);
    return v;
}

void gc_lookup_build(gc_lookup_t *l, uint64_t ns, const st_hash_t *blocks, size_t n)
{
    strata__v1__lookup_request__init(&l->req);
    strata__v1__segment__init(&l->seg);
    l->sp = &l->seg;
    l->layers[0] = 0;
    l->layers[1] = 1;
    l->seg.first_block = 0;
    l->seg.block_hashes.data = (uint8_t *)blocks[0].b;
    l->seg.block_hashes.len = n * ST_HASH_BYTES;
    l->req.namespace_id = ns;
    l->req.segments = &l->sp;
    l->req.n_segments = 1;
    l->req.kinds_mask = 1u << STRATA__V1__OBJECT_KIND__KV;
    l->req.layers = l->layers;
    l->req.n_layers = 2;
}
