/*
 * inline.c - get, put, pin, unpin and delete over the inline control plane
 * (the objects' bytes in the gRPC messages), fanned out to the nodes in
 * parallel. Lookups are in lookup.c; one-sided gets and puts in dataplane.c.
 */
#include "client_internal.h"

#include <stdlib.h>
#include <string.h>

#include "xxh.h"

#include "kinds.h"
#include "log.h"

#define SC_MAX_REPLICAS 16

/*
 * The ranks a KDA get asks: its R replicas, then the R members after them on the ring. While
 * the rebalancer moves objects (docs/daemon.md "What a reader sees during a move"), the old
 * copies stay where they were until every new replica acknowledged its copy; after one ring
 * change at least one of them is still among the R replicas, but after k changes inside one
 * pass (two joins, a crash and its restart) the new set may hold none yet, and the old
 * holders are then among the next k members. A miss there costs R more calls, on misses only.
 */
static size_t sc_get_ranks(const st_client_t *c)
{
    size_t r = 2 * (size_t)c->replicas;

    return r > SC_MAX_REPLICAS ? SC_MAX_REPLICAS : r;
}

/* The nodes that hold an object of block i: the owner, and for KDA the
 * replicas after it (with get, the members after those too: sc_get_ranks).
 * Returns how many (0: all down). */
static size_t sc_targets(const st_client_t *c, const st_hash_t *chain, uint64_t i, uint8_t kind,
                         int get, uint32_t *nodes)
{
    size_t want = kind != ST_KIND_KDA ? 1 : get ? sc_get_ranks(c) : c->replicas;

    if (want > SC_MAX_REPLICAS) {
        want = SC_MAX_REPLICAS;
    }
    return ring_place(&c->ring, sc_segment_first(c, chain, i), nodes, want);
}

/* ------------------------------------------------------------ get/put -- */

static st_status_t sc_check_ops(const st_hash_t *chain, size_t n_chain, uint64_t block,
                                uint8_t kind, const void *buf)
{
    if (chain == NULL || block >= n_chain || buf == NULL ||
        (kind != ST_KIND_KV && kind != ST_KIND_IDX && kind != ST_KIND_KDA && kind != ST_KIND_VIS)) {
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

static st_status_t sc_submit(st_client_t *c, const st_hash_t *chain, size_t n_chain,
                             st_get_op_t *gets, st_put_op_t *puts, size_t n, unsigned flags,
                             st_handle_t **handle_p)
{
    st_handle_t *h = calloc(1, sizeof(*h));

    if (h == NULL) {
        return sc_error(ST_ERR_NOMEM, "out of memory for a handle");
    }
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    h->client = c;
    h->chain = chain;
    h->n_chain = n_chain;
    h->gets = gets;
    h->puts = puts;
    h->n = n;
    h->flags = flags;
    h->deadline_ns = cm_mono_ns() + (uint64_t)c->timeout_ms * 1000000ull;
    if (puts != NULL && (h->written = calloc(n + 1, sizeof(*h->written))) == NULL) {
        pthread_mutex_destroy(&h->lock);
        pthread_cond_destroy(&h->cond);
        free(h);
        *handle_p = NULL;
        return sc_error(ST_ERR_NOMEM, "out of memory for a handle");
    }
    h->job.run = gets != NULL ? sc_run_get : sc_run_put;
    h->job.handle = h;
    *handle_p = h;
    if (gets != NULL && c->dp != NULL && sc_dp_get_now(h)) {
        sc_handle_complete(h); /* cached row reads: done here, no worker (dataplane.c) */
        return ST_OK;
    }
    sc_pool_submit(c, &h->job);
    return ST_OK;
}

st_status_t st_client_get(st_client_t *c, const st_hash_t *chain, size_t n_chain, st_get_op_t *ops,
                          size_t n, st_handle_t **handle_p)
{
    for (size_t i = 0; i < n; i++) {
        if (sc_check_ops(chain, n_chain, ops[i].block, ops[i].kind, ops[i].dst) != ST_OK ||
            (ops[i].n_rows != 0 && (ops[i].rows == NULL || ops[i].row_bytes == 0))) {
            return sc_error(ST_ERR_INVALID,
                            "get: op %zu names block %llu of a %zu-block chain, "
                            "kind %u, or has no buffer or rows",
                            i, (unsigned long long)ops[i].block, n_chain, ops[i].kind);
        }
        ops[i].status = ST_ERR_UNAVAILABLE;
        ops[i].length = 0;
    }
    return sc_submit(c, chain, n_chain, ops, NULL, n, 0, handle_p);
}

st_status_t st_client_put(st_client_t *c, const st_hash_t *chain, size_t n_chain, st_put_op_t *ops,
                          size_t n, unsigned flags, st_handle_t **handle_p)
{
    for (size_t i = 0; i < n; i++) {
        if (sc_check_ops(chain, n_chain, ops[i].block, ops[i].kind, ops[i].src) != ST_OK ||
            ops[i].len == 0) {
            return sc_error(ST_ERR_INVALID,
                            "put: op %zu names block %llu of a %zu-block chain, "
                            "kind %u, or has no bytes",
                            i, (unsigned long long)ops[i].block, n_chain, ops[i].kind);
        }
        ops[i].status = ST_ERR_UNAVAILABLE;
    }
    return sc_submit(c, chain, n_chain, NULL, ops, n, flags, handle_p);
}

/*
 * One call's worth of ops for one node. ops[] holds op indices; the request
 * is built from them when the call is issued.
 */
typedef struct sc_batch {
    uint32_t node;
    size_t *ops;
    size_t n;
    size_t bytes;
} sc_batch_t;

/* Groups the ops that still need a node (todo[i] != 0) by the rank-th
 * target of each: of placed (SC_MAX_REPLICAS a op, n_placed of them) when
 * the call placed its ops once, else as the ring places them now; with
 * split_kda, KDA ops go in batches of their own (a durable put: the node may
 * refuse durability, which must not cost the other kinds their write).
 * Returns the batches, or NULL (no memory). */
static sc_batch_t *sc_group(st_client_t *c, const st_hash_t *chain, size_t n, const uint64_t *block,
                            const uint8_t *kind, const size_t *bytes, const uint8_t *todo,
                            const uint32_t *placed, const uint8_t *n_placed, size_t rank,
                            int split_kda, size_t *n_batches_p)
{
    sc_batch_t *b = calloc(n + 1, sizeof(*b));
    sc_batch_t **cur = calloc(2 * (size_t)c->n_nodes, sizeof(*cur));
    size_t nb = 0;
    size_t max_bytes = c->max_message / 2;

    if (b == NULL || cur == NULL) {
        free(b);
        free(cur);
        return NULL;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t here[SC_MAX_REPLICAS];
        const uint32_t *targets = here;
        size_t nt, slot;
        sc_batch_t *x;

        if (!todo[i]) {
            continue;
        }
        if (placed != NULL) {
            targets = placed + i * SC_MAX_REPLICAS;
            nt = n_placed[i];
        } else {
            nt = sc_targets(c, chain, block[i], kind[i], 0, here);
        }
        if (rank >= nt) {
            continue; /* no such replica: the op keeps its status */
        }
        slot = 2 * (size_t)targets[rank] + (split_kda && kind[i] == ST_KIND_KDA);
        x = cur[slot];
        if (x == NULL || x->n == c->max_batch || x->bytes + bytes[i] > max_bytes) {
            x = &b[nb++];
            x->node = targets[rank];
            x->ops = calloc(n, sizeof(*x->ops));
            if (x->ops == NULL) {
                for (size_t k = 0; k < nb; k++) {
                    free(b[k].ops);
                }
                free(b);
                free(cur);
                return NULL;
            }
            cur[slot] = x;
        }
        x->ops[x->n++] = i;
        x->bytes += bytes[i];
    }
    free(cur);
    *n_batches_p = nb;
    return b;
}

static void sc_free_batches(sc_batch_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(b[i].ops);
    }
    free(b);
}

/* Fills one op from a Get answer, checking the bytes against their checksum. */
static void sc_get_fill(st_get_op_t *op, const Strata__V1__InlineObject *o,
                        Strata__V1__KeyStatus ks)
{
    size_t len;

    op->status = pk_key_status_to_status(ks);
    if (op->status != ST_OK) {
        return;
    }
    len = o->data.len;
    if (XXH3_64bits(o->data.data, len) != o->checksum) {
        op->status = ST_ERR_NOT_FOUND; /* never wrong bytes: a miss */
        lg_warn_ratelimited("get: checksum mismatch, treated as a miss bytes=%zu", len);
        return;
    }
    if (op->n_rows == 0) {
        if (len > op->dst_len) {
            op->status = ST_ERR_INVALID;
            op->length = len;
            return;
        }
        memcpy(op->dst, o->data.data, len);
        op->length = len;
        return;
    }
    if ((size_t)op->n_rows * op->row_bytes > op->dst_len) {
        op->status = ST_ERR_INVALID;
        return;
    }
    for (uint32_t r = 0; r < op->n_rows; r++) {
        size_t off = (size_t)op->rows[r] * op->row_bytes;

        if (off + op->row_bytes > len) {
            op->status = ST_ERR_INVALID;
            return;
        }
        memcpy((uint8_t *)op->dst + (size_t)r * op->row_bytes, o->data.data + off, op->row_bytes);
    }
    op->length = (size_t)op->n_rows * op->row_bytes;
}

/* The ops of a batch as sc_group() reads them: block, kind, the bytes of
 * their message, which still need a node (todo) and, puts, which a node
 * acknowledged. */
typedef struct sc_ops {
    uint64_t *block;
    uint8_t *kind, *todo, *acked;
    size_t *bytes;
    /* A get's targets, placed once when it starts (sc_ops_place): a node
     * marked down by rank r's answers must not shift the ranks after it, or
     * the replica that moved up into an asked rank would never be asked. */
    uint32_t *placed;
    uint8_t *n_placed;
} sc_ops_t;

/* The ops of handle h, every one todo; without memory every op fails with
 * ST_ERR_NOMEM. A get's message carries its bytes plus 64, a put's plus 96. */
static st_status_t sc_ops_of(sc_ops_t *o, st_handle_t *h)
{
    size_t n = h->n;

    o->placed = NULL;
    o->n_placed = NULL;
    o->block = calloc(n + 1, sizeof(*o->block));
    o->kind = calloc(n + 1, 1);
    o->todo = calloc(n + 1, 1);
    o->acked = calloc(n + 1, 1);
    o->bytes = calloc(n + 1, sizeof(*o->bytes));
    if (!o->block || !o->kind || !o->todo || !o->acked || !o->bytes) {
        for (size_t i = 0; i < n; i++) {
            *(h->gets != NULL ? &h->gets[i].status : &h->puts[i].status) = ST_ERR_NOMEM;
        }
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        o->block[i] = h->gets != NULL ? h->gets[i].block : h->puts[i].block;
        o->kind[i] = h->gets != NULL ? h->gets[i].kind : h->puts[i].kind;
        o->bytes[i] = h->gets != NULL ? h->gets[i].dst_len + 64 : h->puts[i].len + 96;
        o->todo[i] = 1;
    }
    return ST_OK;
}

/* Places every op of a get once (the nodes up now). ST_ERR_NOMEM leaves
 * o->placed NULL: sc_group then places as it goes. */
static void sc_ops_place(sc_ops_t *o, const st_client_t *c, const st_hash_t *chain, size_t n)
{
    o->placed = calloc(n * SC_MAX_REPLICAS + 1, sizeof(*o->placed));
    o->n_placed = calloc(n + 1, 1);
    if (o->placed == NULL || o->n_placed == NULL) {
        free(o->placed), free(o->n_placed);
        o->placed = NULL, o->n_placed = NULL;
        return;
    }
    for (size_t i = 0; i < n; i++) {
        o->n_placed[i] = (uint8_t)sc_targets(c, chain, o->block[i], o->kind[i], 1,
                                             o->placed + i * SC_MAX_REPLICAS);
    }
}

static void sc_ops_free(sc_ops_t *o)
{
    free(o->block), free(o->kind), free(o->todo), free(o->acked), free(o->bytes);
    free(o->placed), free(o->n_placed);
}

/* The key of an object on the wire (KDA and VIS objects have layer 0). */
static void sc_key(Strata__V1__ObjectKey *key, const st_hash_t *hash, uint8_t kind, uint32_t layer)
{
    strata__v1__object_key__init(key);
    key->block_hash.data = (uint8_t *)hash->b;
    key->block_hash.len = ST_HASH_BYTES;
    key->kind = pk_kind_to_wire(kind);
    key->layer = kind == ST_KIND_KDA || kind == ST_KIND_VIS ? 0 : layer;
}

/* Takes the Get answers of one rank: fills the ops of the batches that
 * answered; only a KDA miss stays todo (worth asking the next replica). */
static void sc_get_take(st_handle_t *h, const sc_batch_t *b, size_t nb,
                        const srpc_fanout_item_t *items, uint8_t *todo)
{
    for (size_t x = 0; x < nb; x++) {
        const Strata__V1__GetResponse *r = (const void *)items[x].resp;

        if (items[x].status == ST_ERR_OVERLOADED) {
            /* Refused before any of it ran: the node is up, and its replicas are as loaded
             * (the caller retries after the hint, docs/daemon.md "Fairness and admission"). */
            lg_ratelimited(LG_INFO, "get refused for load node=%s error=\"%s\"",
                           h->client->nodes[b[x].node].addr, items[x].err.message);
            for (size_t j = 0; j < b[x].n; j++) {
                h->gets[b[x].ops[j]].status = ST_ERR_OVERLOADED;
                todo[b[x].ops[j]] = 0;
            }
            continue;
        }
        if (items[x].status != ST_OK || r->n_objects != b[x].n || r->n_status != b[x].n) {
            sc_node_failed(h->client, b[x].node, items[x].status, &items[x].err);
            continue; /* those ops stay todo, with ST_ERR_UNAVAILABLE */
        }
        if (r->ring_epoch > __atomic_load_n(&h->client->ring_epoch, __ATOMIC_ACQUIRE)) {
            h->behind = 1; /* this node places by a newer ring than ours */
        }
        for (size_t j = 0; j < b[x].n; j++) {
            size_t i = b[x].ops[j];

            sc_get_fill(&h->gets[i], r->objects[j], r->status[j]);
            todo[i] = h->gets[i].kind == ST_KIND_KDA && h->gets[i].status == ST_ERR_NOT_FOUND;
        }
    }
}

/* One rank of an inline get: a Get per batch, in parallel. Returns ST_OK or
 * ST_ERR_NOMEM (the ops keep their status). */
static st_status_t sc_get_rank(st_handle_t *h, const sc_batch_t *b, size_t nb, uint8_t *todo)
{
    st_client_t *c = h->client;
    srpc_fanout_item_t *items = calloc(nb, sizeof(*items));
    Strata__V1__GetRequest *reqs = calloc(nb, sizeof(*reqs));
    Strata__V1__ObjectKey *keys = calloc(h->n, sizeof(*keys));
    Strata__V1__ObjectKey **kp = calloc(h->n, sizeof(*kp));

    if (!items || !reqs || !keys || !kp) {
        free(items), free(reqs), free(keys), free(kp);
        return ST_ERR_NOMEM;
    }
    for (size_t x = 0, k = 0; x < nb; x++) {
        strata__v1__get_request__init(&reqs[x]);
        reqs[x].namespace_id = c->ns;
        reqs[x].keys = &kp[k];
        for (size_t j = 0; j < b[x].n; j++, k++) {
            const st_get_op_t *op = &h->gets[b[x].ops[j]];

            sc_key(&keys[k], &h->chain[op->block], op->kind, op->layer);
            kp[k] = &keys[k];
        }
        reqs[x].n_keys = b[x].n;
        items[x].ch = c->nodes[b[x].node].ch;
        items[x].req = &reqs[x].base;
    }
    if (srpc_fanout(&srpc_cache_methods[SRPC_CACHE_GET], items, nb, sc_left_ms(h)) == ST_OK) {
        sc_get_take(h, b, nb, items, todo);
    }
    srpc_fanout_free(items, nb);
    free(items), free(reqs), free(keys), free(kp);
    return ST_OK;
}

void sc_run_get(sc_job_t *job)
{
    st_handle_t *h = job->handle;
    st_client_t *c = h->client;
    size_t n = h->n;
    size_t ranks = sc_get_ranks(c);
    uint64_t gen0 = __atomic_load_n(&c->view_gen, __ATOMIC_ACQUIRE);
    sc_ops_t o;

    if (sc_ops_of(&o, h) != ST_OK) {
        goto out;
    }
    if (c->dp != NULL) {
        sc_dp_get(h, o.todo); /* one-sided; leaves todo what the inline path must do */
    }
    /* Owners first; KDA ops that missed or failed try the next replica, then
     * the members after the replicas (sc_get_ranks), while the call's
     * deadline allows. A durable object that none of those holds may sit
     * where this client's view is behind: with membership on etcd, a node
     * that answered places by a newer ring (two changes this client has not
     * read yet can leave no copy on any node it knows of, once the old
     * holders dropped theirs). Then, once, the view is brought up to date
     * (sc_health_refresh: the members read, down members greeted) and, if
     * it moved, the ops placed again. */
    for (int again = 0; again < 2; again++) {
        int left = 0;

        sc_ops_place(&o, c, h->chain, n);
        for (size_t rank = 0; rank < ranks && !sc_past(h); rank++) {
            size_t nb = 0;
            sc_batch_t *b = sc_group(c, h->chain, n, o.block, o.kind, o.bytes, o.todo, o.placed,
                                     o.n_placed, rank, 0, &nb);
            st_status_t status;

            if (b == NULL) {
                break;
            }
            status = nb > 0 ? sc_get_rank(h, b, nb, o.todo) : ST_ERR_NOT_FOUND;
            sc_free_batches(b, nb);
            if (status != ST_OK) {
                break; /* nothing left to ask, or no memory */
            }
        }
        for (size_t i = 0; i < n && !left; i++) {
            left = o.todo[i] && o.kind[i] == ST_KIND_KDA;
        }
        if (!left || again || !h->behind || c->etcd == NULL || sc_past(h) ||
            !sc_health_refresh(c, gen0, h->deadline_ns)) {
            break;
        }
        free(o.placed), free(o.n_placed);
        o.placed = NULL, o.n_placed = NULL;
    }
    for (size_t i = 0; sc_past(h) && i < n; i++) {
        if (o.todo[i] && h->gets[i].status == ST_ERR_UNAVAILABLE) {
            h->gets[i].status = ST_ERR_TIMEOUT; /* unanswered at the deadline */
        }
    }
out:
    sc_ops_free(&o);
    sc_handle_complete(h);
}

/*
 * A durable KDA object is durable only when write_quorum of its replicas
 * committed it to disk: a node that is down, failed, or has no SSD tier (it
 * refuses durable writes with UNSUPPORTED) does not count. Fewer, but some,
 * is ST_ERR_PARTIAL (logged once per batch); none keeps the last error.
 */
static void sc_put_quorum(st_handle_t *h)
{
    st_client_t *c = h->client;
    size_t partial = 0, first = 0;

    for (size_t i = 0; i < h->n; i++) {
        st_put_op_t *op = &h->puts[i];

        if (op->kind != ST_KIND_KDA || h->written[i] == 0 || h->written[i] >= c->write_quorum) {
            continue;
        }
        if (partial++ == 0) {
            first = i;
        }
        op->status = ST_ERR_PARTIAL;
    }
    if (partial > 0) {
        lg_warn_ratelimited("durable KDA put on fewer replicas than write_quorum objects=%zu "
                            "first_block=%llu written=%u write_quorum=%u replicas=%u",
                            partial, (unsigned long long)h->puts[first].block, h->written[first],
                            c->write_quorum, c->replicas);
    }
}

/* The messages of one rank of a put: one request per batch, one object and
 * key per op, one link per block of a request. */
typedef struct sc_put_msgs {
    srpc_fanout_item_t *items;
    Strata__V1__PutRequest *reqs;
    Strata__V1__InlineObject *objs, **op_p;
    Strata__V1__ObjectKey *keys;
    Strata__V1__BlockLink *links, **lp;
} sc_put_msgs_t;

static void sc_put_msgs_free(sc_put_msgs_t *m)
{
    free(m->items), free(m->reqs), free(m->objs), free(m->op_p), free(m->keys), free(m->links);
    free(m->lp);
}

static st_status_t sc_put_msgs_alloc(sc_put_msgs_t *m, size_t nb, size_t n)
{
    m->items = calloc(nb, sizeof(*m->items));
    m->reqs = calloc(nb, sizeof(*m->reqs));
    m->objs = calloc(n, sizeof(*m->objs));
    m->op_p = calloc(n, sizeof(*m->op_p));
    m->keys = calloc(n, sizeof(*m->keys));
    m->links = calloc(n, sizeof(*m->links));
    m->lp = calloc(n, sizeof(*m->lp));
    if (!m->items || !m->reqs || !m->objs || !m->op_p || !m->keys || !m->links || !m->lp) {
        sc_put_msgs_free(m);
        return ST_ERR_NOMEM;
    }
    return ST_OK;
}

/* Adds op (object k of the rank) to request req: its object, and the link
 * of its block unless the op before it in the batch had the same block. */
static void sc_put_object(st_handle_t *h, sc_put_msgs_t *m, Strata__V1__PutRequest *req,
                          const st_put_op_t *op, const st_put_op_t *prev, size_t k, size_t *nl)
{
    Strata__V1__InlineObject *obj = &m->objs[k];
    Strata__V1__BlockLink *link = &m->links[*nl];

    sc_key(&m->keys[k], &h->chain[op->block], op->kind, op->layer);
    strata__v1__inline_object__init(obj);
    obj->key = &m->keys[k];
    obj->data.data = (uint8_t *)op->src;
    obj->data.len = op->len;
    obj->checksum = XXH3_64bits(op->src, op->len);
    obj->row_bytes = op->kind == ST_KIND_KV || op->kind == ST_KIND_IDX ? op->row_bytes : 0;
    m->op_p[k] = obj;
    /* One link per block: the ops of a block are usually adjacent. */
    if (prev != NULL && prev->block == op->block) {
        return;
    }
    strata__v1__block_link__init(link);
    link->hash = m->keys[k].block_hash;
    link->parent_hash.data =
        (uint8_t *)(op->block == 0 ? h->client->seed.b : h->chain[op->block - 1].b);
    link->parent_hash.len = ST_HASH_BYTES;
    link->block_index = op->block;
    /* Where the ring places the block, so that daemons can move a KDA copy
     * when members change (docs/daemon.md "Membership changes"). */
    link->placement.data = (uint8_t *)sc_segment_first(h->client, h->chain, op->block)->b;
    link->placement.len = ST_HASH_BYTES;
    m->lp[(*nl)++] = link;
    req->n_links++;
}

/* Builds the Put of every batch of a rank into m. */
static void sc_put_requests(st_handle_t *h, const sc_batch_t *b, size_t nb, int durable,
                            sc_put_msgs_t *m)
{
    st_client_t *c = h->client;

    for (size_t x = 0, k = 0, nl = 0; x < nb; x++) {
        Strata__V1__PutRequest *req = &m->reqs[x];

        strata__v1__put_request__init(req);
        req->namespace_id = c->ns;
        req->objects = &m->op_p[k];
        req->links = &m->lp[nl];
        req->n_links = 0;
        req->durable = 0;
        for (size_t j = 0; j < b[x].n; j++, k++) {
            const st_put_op_t *op = &h->puts[b[x].ops[j]];

            /* Durable is asked for where it means something: the requests of KDA
             * objects (the one kind written through; sc_group keeps them apart), so
             * that KV and IDX objects of a durable batch still go to a node without
             * an SSD tier. */
            req->durable |= durable && op->kind == ST_KIND_KDA;
            sc_put_object(h, m, req, op, j > 0 ? &h->puts[b[x].ops[j - 1]] : NULL, k, &nl);
        }
        req->n_objects = b[x].n;
        m->items[x].ch = c->nodes[b[x].node].ch;
        m->items[x].req = &req->base;
    }
}

/* Takes the Put answers of one rank: an op acknowledged once is written; a
 * failed call or a key's error is the op's status until a node takes it. */
static void sc_put_take(st_handle_t *h, const sc_batch_t *b, size_t nb,
                        const srpc_fanout_item_t *items, uint8_t *acked)
{
    for (size_t x = 0; x < nb; x++) {
        const Strata__V1__PutResponse *r = (const void *)items[x].resp;

        if (items[x].status != ST_OK || r->n_status != b[x].n) {
            sc_node_failed(h->client, b[x].node, items[x].status, &items[x].err);
            for (size_t j = 0; j < b[x].n && items[x].status != ST_OK; j++) {
                size_t i = b[x].ops[j];

                if (!acked[i]) {
                    h->puts[i].status = items[x].status;
                }
            }
            continue;
        }
        for (size_t j = 0; j < b[x].n; j++) {
            size_t i = b[x].ops[j];
            st_status_t st = pk_key_status_to_status(r->status[j]);

            if (st == ST_OK) {
                acked[i] = 1;
                h->puts[i].status = ST_OK;
                h->written[i]++;
            } else if (!acked[i]) {
                h->puts[i].status = st;
            }
        }
    }
}

/* One rank of an inline put: a Put per batch, in parallel. Returns ST_OK or
 * ST_ERR_NOMEM. */
static st_status_t sc_put_rank(st_handle_t *h, const sc_batch_t *b, size_t nb, int durable,
                               uint8_t *acked)
{
    sc_put_msgs_t m;

    if (sc_put_msgs_alloc(&m, nb, h->n) != ST_OK) {
        return ST_ERR_NOMEM;
    }
    sc_put_requests(h, b, nb, durable, &m);
    if (srpc_fanout(&srpc_cache_methods[SRPC_CACHE_PUT], m.items, nb, sc_left_ms(h)) == ST_OK) {
        sc_put_take(h, b, nb, m.items, acked);
    }
    srpc_fanout_free(m.items, nb);
    sc_put_msgs_free(&m);
    return ST_OK;
}

/* Only KDA objects go on to the next replica. */
static void sc_put_next_rank(const sc_ops_t *o, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        o->todo[i] = o->kind[i] == ST_KIND_KDA;
    }
}

void sc_run_put(sc_job_t *job)
{
    st_handle_t *h = job->handle;
    st_client_t *c = h->client;
    size_t n = h->n;
    size_t ranks = c->replicas > SC_MAX_REPLICAS ? SC_MAX_REPLICAS : c->replicas;
    int durable = (h->flags & ST_PUT_DURABLE) != 0;
    sc_ops_t o;

    if (sc_ops_of(&o, h) != ST_OK) {
        goto out;
    }
    if (c->dp != NULL) {
        sc_dp_put(h, o.todo, o.acked); /* one-sided at the owners; the rest below */
        for (size_t i = 0; i < n; i++) {
            h->written[i] = o.acked[i];
        }
    }
    /* Rank 0 is every op's owner; ranks above it are KDA replicas (while
     * the call's deadline allows). */
    for (size_t rank = 0; rank < ranks && !sc_past(h); rank++) {
        size_t nb = 0;
        sc_batch_t *b = sc_group(c, h->chain, n, o.block, o.kind, o.bytes, o.todo, NULL, NULL, rank,
                                 durable, &nb);
        st_status_t status = ST_ERR_NOT_FOUND;

        if (b == NULL) {
            break;
        }
        if (nb > 0) {
            status = sc_put_rank(h, b, nb, durable, o.acked);
        } else if (rank == 0 && c->dp != NULL) {
            status = ST_OK; /* the owners were written one-sided */
        }
        sc_free_batches(b, nb);
        if (status != ST_OK) {
            break; /* nothing left to write, or no memory */
        }
        sc_put_next_rank(&o, n);
    }
    for (size_t i = 0; sc_past(h) && i < n; i++) {
        if (o.todo[i] && h->puts[i].status == ST_ERR_UNAVAILABLE) {
            h->puts[i].status = ST_ERR_TIMEOUT; /* unanswered at the deadline */
        }
    }
    if (durable) {
        sc_put_quorum(h);
    }
out:
    sc_ops_free(&o);
    sc_handle_complete(h);
}

/* ---------------------------------------------------- pin/unpin/delete -- */

static st_status_t sc_pin_common(st_client_t *c, const st_hash_t *chain, size_t n_blocks, int pin)
{
    uint32_t S = c->segment_blocks;
    st_status_t first = ST_OK;

    for (size_t k = 0; k * S < n_blocks; k++) {
        int node = sc_owner(c, &chain[k * S]);
        size_t nb = n_blocks - k * S < S ? n_blocks - k * S : S;
        Strata__V1__PinRequest pin_req = STRATA__V1__PIN_REQUEST__INIT;
        Strata__V1__UnpinRequest unpin_req = STRATA__V1__UNPIN_REQUEST__INIT;
        srpc_error_t err;
        void *resp = NULL;
        st_status_t st;

        if (node < 0) {
            return sc_error(ST_ERR_UNAVAILABLE, "every node is down");
        }
        /* Pin and Unpin ask the same of the same blocks. */
        pin_req.namespace_id = unpin_req.namespace_id = c->ns;
        pin_req.block_hashes = unpin_req.block_hashes =
            (ProtobufCBinaryData){nb * ST_HASH_BYTES, (uint8_t *)chain[k * S].b};
        st = srpc_call(c->nodes[node].ch,
                       &srpc_cache_methods[pin ? SRPC_CACHE_PIN : SRPC_CACHE_UNPIN],
                       pin ? &pin_req.base : &unpin_req.base, (int)c->timeout_ms,
                       (ProtobufCMessage **)&resp, &err);
        if (st != ST_OK) {
            sc_node_failed(c, (uint32_t)node, st, &err);
            if (first == ST_OK) {
                first = sc_error(st, "%s on %s: %s", pin ? "pin" : "unpin", c->nodes[node].addr,
                                 err.message);
            }
            continue;
        }
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    return first;
}

st_status_t st_client_pin(st_client_t *c, const st_hash_t *chain, size_t n_blocks)
{
    return sc_pin_common(c, chain, n_blocks, 1);
}

st_status_t st_client_unpin(st_client_t *c, const st_hash_t *chain, size_t n_blocks)
{
    return sc_pin_common(c, chain, n_blocks, 0);
}

st_status_t st_client_delete(st_client_t *c, const st_hash_t *chain, size_t n_blocks,
                             unsigned kinds, uint32_t n_layers)
{
    uint32_t S = c->segment_blocks;
    st_status_t first = ST_OK;
    Strata__V1__ObjectKind kl[3];
    uint32_t layers[128], zero = 0;
    size_t nk = 0;

    if (n_layers > 128) {
        return sc_error(ST_ERR_INVALID, "delete: n_layers > 128");
    }
    for (uint32_t l = 0; l < n_layers; l++) {
        layers[l] = l;
    }
    for (uint8_t k = ST_KIND_KV; k <= ST_KIND_KDA; k++) {
        if (kinds & (1u << k)) {
            kl[nk++] = pk_kind_to_wire(k);
        }
    }
    for (size_t k = 0; k * S < n_blocks; k++) {
        uint32_t nodes[SC_MAX_REPLICAS];
        size_t nt = ring_place(&c->ring, &chain[k * S], nodes,
                               c->replicas < SC_MAX_REPLICAS ? c->replicas : SC_MAX_REPLICAS);
        size_t nb = n_blocks - k * S < S ? n_blocks - k * S : S;

        for (size_t t = 0; t < nt; t++) {
            for (size_t kk = 0; kk < nk; kk++) {
                Strata__V1__DeleteRequest req = STRATA__V1__DELETE_REQUEST__INIT;
                Strata__V1__KeyGrid grid = STRATA__V1__KEY_GRID__INIT;
                int kda = kl[kk] == STRATA__V1__OBJECT_KIND__KDA;
                srpc_error_t err;
                void *resp = NULL;
                st_status_t st;

                if (t > 0 && !kda) {
                    continue; /* only KDA objects have replicas */
                }
                grid.block_hashes.data = (uint8_t *)chain[k * S].b;
                grid.block_hashes.len = nb * ST_HASH_BYTES;
                grid.kinds = &kl[kk];
                grid.n_kinds = 1;
                grid.layers = kda ? &zero : layers;
                grid.n_layers = kda ? 1 : n_layers;
                if (grid.n_layers == 0) {
                    continue;
                }
                req.namespace_id = c->ns;
                req.grid = &grid;
                st = srpc_call(c->nodes[nodes[t]].ch, &srpc_cache_methods[SRPC_CACHE_DELETE],
                               &req.base, (int)c->timeout_ms, (ProtobufCMessage **)&resp, &err);
                if (st != ST_OK) {
                    sc_node_failed(c, nodes[t], st, &err);
                    if (first == ST_OK) {
                        first =
                            sc_error(st, "delete on %s: %s", c->nodes[nodes[t]].addr, err.message);
                    }
                    continue;
                }
                protobuf_c_message_free_unpacked(resp, NULL);
            }
        }
    }
    return first;
}
