/*
 * cli_cmds.c - the commands of `strata` other than bench.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <grpc/status.h>

#include "cli.h"
#include "etcd_members.h"
#include "srpc.h"
#include "strata.pb-c.h"

#define CLI_OFF(m) offsetof(cli_conf_t, m)

/* --kind of put and get, by st_kind_t (sessions have their own command). */
static const char *const cli_kind_names[] = {"kv", "idx", "kda", "session", "vis", NULL};
#define CLI_DELETE_KINDS 3 /* delete --kinds: kv, idx, kda */

/*
 * Hashes the tokens into the client's namespace with items (n_items may be
 * 0); *plain_p (when not NULL) gets the chain of the tokens alone too.
 */
static int cli_chain(const cli_conf_t *cf, st_client_t *c, const cli_item_spec_t *specs,
                     size_t n_items, st_hash_t **chain_p, st_hash_t **plain_p, size_t *nb_p,
                     size_t *n_tokens_p)
{
    uint32_t *tok = NULL;
    size_t n = 0, nb = 0, np = 0;
    st_hash_t *chain, *plain = NULL;
    st_hash_item_t *items = n_items ? calloc(n_items, sizeof(*items)) : NULL;
    st_status_t st;

    if (n_items > 0 && items == NULL) {
        return 1;
    }
    for (size_t i = 0; i < n_items; i++) {
        items[i] = (st_hash_item_t){specs[i].hash, specs[i].start, specs[i].n_tokens};
    }
    if (cli_read_tokens(cf, &tok, &n) != ST_OK) {
        free(items);
        return 2;
    }
    chain = malloc(sizeof(*chain) * (n / 16 + 1));
    st = chain == NULL ? ST_ERR_NOMEM
                       : st_client_hash(c, tok, n, items, n_items, chain, n / 16 + 1, &nb);
    if (st == ST_OK && plain_p != NULL) {
        plain = malloc(sizeof(*plain) * (n / 16 + 1));
        st = plain == NULL ? ST_ERR_NOMEM
                           : st_client_hash(c, tok, n, NULL, 0, plain, n / 16 + 1, &np);
    }
    free(tok);
    free(items);
    if (st != ST_OK) {
        fprintf(stderr, "strata: cannot hash the tokens%s: %s\n", n_items ? " with the items" : "",
                st_client_last_error());
        free(chain);
        free(plain);
        return st == ST_ERR_INVALID ? 2 : 1;
    }
    *chain_p = chain;
    *nb_p = nb;
    if (plain_p != NULL) {
        *plain_p = plain;
    }
    if (n_tokens_p != NULL) {
        *n_tokens_p = n;
    }
    return 0;
}

/* A command's client, its items and the chain of its tokens. */
typedef struct cli_run {
    const cli_conf_t *cf;
    st_client_t *c;
    st_hash_t *chain;
    st_hash_t *plain; /* the chain without the items (when there are items) */
    size_t nb;        /* blocks in the chain */
    size_t n_tokens;  /* tokens hashed */
    cli_item_spec_t *items;
    size_t n_items;
} cli_run_t;

/* The items of --image, --gen-image and --items; prints the error. */
static int cli_items(const cli_conf_t *cf, int need_pos, cli_item_spec_t **specs_p, size_t *n_p)
{
    char why[CLI_PATH_MAX + 512];
    st_status_t st =
        cli_items_collect(cf->images, cf->gen_images, cf->items_file, (uint32_t)cf->patch, need_pos,
                          specs_p, n_p, why, sizeof(why));

    if (st != ST_OK) {
        fprintf(stderr, "strata: %s\n", why);
        return st == ST_ERR_NOMEM ? 1 : 2;
    }
    return 0;
}

/* put/get --kind vis: one image (--image or --gen-image), no tokens, block 0. */
static int cli_vis_check(const cli_conf_t *cf, const cli_run_t *r)
{
    const char *why = NULL;

    if (r->n_items != 1 || (cf->items_file != NULL && cf->items_file[0] != '\0')) {
        why = "names its object by one image: give exactly one --image FILE or --gen-image "
              "W,H,SEED (no --items)";
    } else if ((cf->tokens != NULL && cf->tokens[0] != '\0') ||
               (cf->tokens_file != NULL && cf->tokens_file[0] != '\0') || cf->random > 0) {
        why = "takes no tokens: the object is keyed by the image's hash alone";
    } else if (cf->block != 0 || cf->layer != 0) {
        why = "objects are block 0, layer 0 of their image's one-hash chain";
    }
    if (why != NULL) {
        fprintf(stderr, "strata: --kind vis %s\n", why);
        return 2;
    }
    return 0;
}

/*
 * Collects the items, connects, hashes the command's tokens with them (or,
 * for --kind vis, makes the image's one-hash chain), runs body over them
 * and closes. Returns body's exit code, or that of the items, the connection
 * or the tokens.
 */
static int cli_on_chain(const cli_conf_t *cf, int (*body)(cli_run_t *r, void *arg), void *arg)
{
    cli_run_t r = {cf, NULL, NULL, NULL, 0, 0, NULL, 0};
    int vis = cf->kind == ST_KIND_VIS;
    int rc = cli_items(cf, !vis, &r.items, &r.n_items);

    if (rc == 0 && vis) {
        rc = cli_vis_check(cf, &r);
    }
    if (rc == 0 && cli_connect(cf, &r.c) != ST_OK) {
        rc = 1;
    }
    if (rc == 0 && vis) {
        r.chain = malloc(sizeof(*r.chain));
        rc = r.chain == NULL ? 1 : 0;
        if (rc == 0) {
            r.chain[0] = r.items[0].hash;
            r.nb = 1;
        }
    } else if (rc == 0) {
        rc = cli_chain(cf, r.c, r.items, r.n_items, &r.chain, r.n_items ? &r.plain : NULL, &r.nb,
                       &r.n_tokens);
    }
    if (rc == 0) {
        rc = body(&r, arg);
    }
    free(r.chain);
    free(r.plain);
    free(r.items);
    st_client_close(r.c);
    return rc;
}

/* -------------------------------------------------------------- status -- */

/* One node's row of `strata status`: Stats, or why there are none. */
static int cli_status_node(const cli_conf_t *cf, const srpc_channel_config_t *tls, const char *t,
                           const char *member)
{
    srpc_channel_config_t cc = {.token = cf->conn.token[0] ? cf->conn.token : NULL,
                                .tls_ca_pem = tls->tls_ca_pem,
                                .tls_cert_pem = tls->tls_cert_pem,
                                .tls_key_pem = tls->tls_key_pem};
    Strata__V1__StatsRequest req = STRATA__V1__STATS_REQUEST__INIT;
    Strata__V1__StatsResponse *resp = NULL;
    srpc_channel_t *ch = NULL;
    srpc_error_t err;
    uint64_t objects = 0, used = 0, limit = 0, lt = 0, mt = 0, epoch = 0, moving = 0, draining = 0;

    if (srpc_channel_open(t, &cc, &ch) != ST_OK ||
        srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_STATS], &req.base, (int)cf->conn.timeout_ms,
                  (ProtobufCMessage **)&resp, &err) != ST_OK) {
        /* Up, but it will not tell this token (a tenant's token asks per namespace). */
        int refused = ch != NULL && (err.grpc_code == GRPC_STATUS_PERMISSION_DENIED ||
                                     err.grpc_code == GRPC_STATUS_UNAUTHENTICATED);

        printf("%-22s %-8s %-9s %s\n", t, refused ? "REFUSED" : "DOWN", member,
               ch ? err.message : "cannot open channel");
        srpc_channel_close(ch);
        return 1;
    }
    for (size_t i = 0; i < resp->n_counters; i++) {
        const char *k = resp->counters[i]->key;
        uint64_t v = resp->counters[i]->value;

        if (strncmp(k, "objects_", 8) == 0) {
            objects += v;
        } else if (strcmp(k, "memory_used_bytes") == 0) {
            used = v;
        } else if (strcmp(k, "memory_limit_bytes") == 0) {
            limit = v;
        } else if (strcmp(k, "lookup_tokens") == 0) {
            lt = v;
        } else if (strcmp(k, "matched_tokens") == 0) {
            mt = v;
        } else if (strcmp(k, "ring_epoch") == 0) {
            epoch = v;
        } else if (strcmp(k, "rebalance_pending") == 0) {
            moving = v; /* durable objects still to hand over (docs/daemon.md) */
        } else if (strcmp(k, "draining") == 0) {
            draining = v;
        }
    }
    printf("%-22s %-8s %-9s %-10s %10.1f %12" PRIu64 " %6.1f/%-7.1f %9.1f%% %8" PRIu64 " %8" PRIu64
           "\n",
           t, draining ? "DRAINING" : "UP", member, resp->version, (double)resp->uptime_ms / 1000,
           objects, (double)used / (1 << 20), (double)limit / (1 << 20),
           lt ? 100.0 * (double)mt / (double)lt : 0.0, moving, epoch);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    srpc_channel_close(ch);
    return 0;
}

/* The members registered in etcd (every state), as "addr state" rows. */
static int cli_status_etcd(const cli_conf_t *cf, srpc_members_t *mb)
{
    srpc_etcd_t *e;
    st_status_t st;

    if (srpc_etcd_open(cf->conn.etcd, &e) != ST_OK) {
        fprintf(stderr, "strata status: bad --etcd '%s' (want http://host:port,...)\n",
                cf->conn.etcd);
        return 1;
    }
    st = srpc_etcd_members(e, cf->conn.etcd_prefix, (int)cf->conn.timeout_ms, mb);
    srpc_etcd_close(e);
    if (st != ST_OK) {
        fprintf(stderr, "strata status: cannot read the members from etcd=%s: %s\n", cf->conn.etcd,
                st_strerror(st));
        return 1;
    }
    printf("members from etcd=%s prefix=%s: %zu registered, epoch %" PRIu64 "%s\n", cf->conn.etcd,
           cf->conn.etcd_prefix, mb->n, mb->epoch,
           mb->malformed ? " (malformed records ignored)" : "");
    return 0;
}

static int cli_status(const cli_conf_t *cf, int argc, char **argv)
{
    int etcd = cf->conn.etcd != NULL && cf->conn.etcd[0] != '\0';
    char *list = etcd ? NULL : strdup(cf->conn.nodes), *save = NULL;
    srpc_members_t mb = {0};
    char *pem[3];
    srpc_channel_config_t tls = {0};
    int rc = 0;

    if ((!etcd && list == NULL) || (etcd && cli_status_etcd(cf, &mb) != 0)) {
        return 1;
    }
    if (cli_tls_load(cf, pem, &tls) != ST_OK) {
        free(list);
        srpc_members_free(&mb);
        return 1;
    }
    printf("%-22s %-8s %-9s %-10s %10s %12s %14s %10s %8s %8s\n", "node", "state", "member",
           "version", "uptime_s", "objects", "memory_MiB", "hit_rate", "moving", "epoch");
    for (size_t i = 0; etcd && i < mb.n; i++) {
        rc |= cli_status_node(cf, &tls, mb.m[i].grpc, mr_state_name(mb.m[i].state));
    }
    for (char *t = etcd ? NULL : strtok_r(list, ", ", &save); t != NULL;
         t = strtok_r(NULL, ", ", &save)) {
        rc |= cli_status_node(cf, &tls, t, "static");
    }
    cli_tls_free(pem);
    free(list);
    srpc_members_free(&mb);
    return rc;
}

/* --------------------------------------------------------------- drain -- */

/* Drain NODE: it hands its durable objects to the ring without it, leaves
 * and stops (docs/daemon.md "Membership changes"); needs the admin token
 * (--token: the daemon's auth_token) or, on loopback without one, none. */
static int cli_drain(const cli_conf_t *cf, int argc, char **argv)
{
    char *pem[3];
    srpc_channel_config_t tls = {0}, cc;
    Strata__V1__DrainRequest req = STRATA__V1__DRAIN_REQUEST__INIT;
    Strata__V1__DrainResponse *resp = NULL;
    srpc_channel_t *ch = NULL;
    srpc_error_t err = {0};
    int rc = 1;

    (void)argc;
    if (cli_tls_load(cf, pem, &tls) != ST_OK) {
        return 1;
    }
    cc = tls;
    cc.token = cf->conn.token[0] ? cf->conn.token : NULL;
    if (srpc_channel_open(argv[0], &cc, &ch) != ST_OK) {
        fprintf(stderr, "strata drain: cannot open a channel to %s\n", argv[0]);
    } else if (srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_DRAIN], &req.base,
                         (int)cf->conn.timeout_ms, (ProtobufCMessage **)&resp, &err) != ST_OK) {
        fprintf(stderr, "strata drain: %s: %s\n", argv[0], err.message);
    } else {
        printf("draining %s: %" PRIu64 " durable objects to hand over; it stops when done\n",
               resp->node_id, resp->pending);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        rc = 0;
    }
    srpc_channel_close(ch);
    cli_tls_free(pem);
    return rc;
}

/* ---------------------------------------------------------- hash/lookup -- */

/* `strata hash` with items: one line an item (its source, position, hash). */
static void cli_print_items(const cli_run_t *r)
{
    for (size_t i = 0; i < r->n_items; i++) {
        const cli_item_spec_t *it = &r->items[i];
        char hex[33];

        st_hash_to_hex(&it->hash, hex);
        printf("item %zu ", i);
        if (it->src == CLI_ITEM_FILE) {
            printf("image=%s %ux%ux%u", it->path, it->width, it->height, it->channels);
        } else if (it->src == CLI_ITEM_GEN) {
            printf("gen=%u,%u,%llu,%u", it->width, it->height, (unsigned long long)it->seed,
                   it->channels);
        } else {
            printf("hash");
        }
        printf(" start=%llu tokens=%llu hash=%s\n", (unsigned long long)it->start,
               (unsigned long long)it->n_tokens, hex);
    }
}

/*
 * The chain, a line a block: index and hash; with items, "changed" when the
 * hash differs from that of the tokens alone (every block from the first
 * one an item overlaps on: the chain carries it) and "items=i,j" for the
 * items that overlap the block itself; then a summary line.
 */
static int cli_hash_chain(cli_run_t *r, void *arg)
{
    uint64_t bt = st_client_block_tokens(r->c);
    size_t changed = 0, overlapped = 0, first = SIZE_MAX;
    char hex[33];

    cli_print_items(r);
    for (size_t i = 0; i < r->nb; i++) {
        int any = 0;

        st_hash_to_hex(&r->chain[i], hex);
        printf("%zu %s", i, hex);
        if (r->n_items > 0 && memcmp(&r->chain[i], &r->plain[i], sizeof(st_hash_t)) != 0) {
            printf(" changed");
            changed++;
            first = first == SIZE_MAX ? i : first;
        }
        for (size_t k = 0; k < r->n_items; k++) {
            const cli_item_spec_t *it = &r->items[k];

            if (it->start < (i + 1) * bt && it->start + it->n_tokens > i * bt) {
                printf("%s%zu", any ? "," : " items=", k);
                any = 1;
            }
        }
        overlapped += any;
        printf("\n");
    }
    if (r->n_items > 0) {
        printf("blocks=%zu items=%zu overlapped=%zu changed=%zu first_changed=", r->nb, r->n_items,
               overlapped, changed);
        if (first == SIZE_MAX) {
            printf("none\n");
        } else {
            printf("%zu\n", first);
        }
    }
    return 0;
}

static int cli_hash(const cli_conf_t *cf, int argc, char **argv)
{
    return cli_on_chain(cf, cli_hash_chain, NULL);
}

static int cli_lookup_chain(cli_run_t *r, void *arg)
{
    uint32_t bt = st_client_block_tokens(r->c);
    st_lookup_result_t res;

    if (st_client_lookup(r->c, r->chain, r->nb, (uint32_t)r->cf->layers, &res) != ST_OK) {
        fprintf(stderr, "strata lookup: %s\n", st_client_last_error());
        return 1;
    }
    printf("tokens=%zu blocks=%zu matched_blocks=%" PRIu64 " matched_tokens=%" PRIu64
           " resumable_tokens=%" PRIu64 " nodes_down=%u\n",
           r->n_tokens, r->nb, res.matched_blocks, res.matched_blocks * bt,
           res.resumable_blocks * bt, res.nodes_down);
    return 0;
}

static int cli_lookup(const cli_conf_t *cf, int argc, char **argv)
{
    return cli_on_chain(cf, cli_lookup_chain, NULL);
}

/* ---------------------------------------------------------- put/get/del -- */

/* The object bytes of a put or the buffer of a get. */
typedef struct cli_bytes {
    uint8_t *data;
    size_t len;
} cli_bytes_t;

/* The bytes of `strata put`: --file or --fill. Returns 0 or the exit code. */
static int cli_put_bytes(const cli_conf_t *cf, cli_bytes_t *b)
{
    if (cf->file[0] != '\0') {
        char *text = NULL;
        st_status_t st = cli_read_file(cf->file, &text, &b->len);

        b->data = (uint8_t *)text;
        if (st == ST_ERR_NOT_FOUND || (st == ST_OK && b->len == 0)) {
            fprintf(stderr, "strata put: cannot read --file %s (missing or empty)\n", cf->file);
            free(b->data);
            return 2;
        }
        if (st != ST_OK) {
            fprintf(stderr, "strata put: cannot read --file %s\n", cf->file);
            return 1;
        }
        return 0;
    }
    if (cf->fill > 0) {
        b->len = (size_t)cf->fill;
        b->data = malloc(b->len);
        if (b->data == NULL) {
            return 1;
        }
        for (size_t i = 0; i < b->len; i++) {
            b->data[i] = (uint8_t)(i * 131 + (size_t)cf->block);
        }
        return 0;
    }
    fprintf(stderr, "strata put: give the object's bytes with --file or --fill N\n");
    return 2;
}

/* Prints an object's line: block, kind, layer, bytes and checksum, after prefix. */
static void cli_print_object(const cli_run_t *r, const char *prefix, const uint8_t *data,
                             size_t len)
{
    const cli_conf_t *cf = r->cf;

    printf("%sblock=%lld kind=%s layer=%lld bytes=%zu checksum=%016" PRIx64, prefix,
           (long long)cf->block, cli_kind_names[cf->kind], (long long)cf->layer, len,
           (uint64_t)XXH3_64bits(data, len));
    if (cf->kind == ST_KIND_VIS) {
        char hex[33];

        st_hash_to_hex(&r->chain[0], hex);
        printf(" image=%s", hex);
    }
}

static int cli_put_chain(cli_run_t *r, void *arg)
{
    const cli_conf_t *cf = r->cf;
    const cli_bytes_t *b = arg;
    st_put_op_t op = {
        (uint64_t)cf->block, (uint8_t)cf->kind, (uint16_t)cf->layer, b->data, b->len, 0, 0};
    st_handle_t *h;
    uint32_t written;

    if (st_client_put(r->c, r->chain, r->nb, &op, 1, cf->durable ? ST_PUT_DURABLE : 0, &h) !=
        ST_OK) {
        fprintf(stderr, "strata put: %s\n", st_client_last_error());
        return 2;
    }
    st_handle_wait(h, -1);
    written = st_handle_replicas_written(h, 0);
    st_handle_release(h);
    if (op.status == ST_ERR_PARTIAL) {
        fprintf(stderr, "strata put: %s: durable on %u of %u replicas, --write-quorum is %u\n",
                st_strerror(op.status), written, st_client_replicas(r->c),
                st_client_write_quorum(r->c));
        return CLI_EXIT_PARTIAL;
    }
    if (op.status != ST_OK) {
        fprintf(stderr, "strata put: %s\n", st_strerror(op.status));
        return 1;
    }
    cli_print_object(r, "stored ", b->data, b->len);
    printf(" replicas=%u%s\n", written, cf->durable && op.kind == ST_KIND_KDA ? " durable" : "");
    return 0;
}

/*
 * put and get: the object's bytes (made by bytes: 0 or an exit code), then
 * body over the chain with them.
 */
static int cli_object(const cli_conf_t *cf, int (*bytes)(const cli_conf_t *cf, cli_bytes_t *b),
                      int (*body)(cli_run_t *r, void *arg))
{
    cli_bytes_t b = {NULL, 0};
    int rc = bytes(cf, &b);

    if (rc == 0) {
        rc = cli_on_chain(cf, body, &b);
        free(b.data);
    }
    return rc;
}

/* --kind session is refused by put and get: sessions have their own command. */
static int cli_kind_ok(const cli_conf_t *cf, const char *cmd)
{
    if (cf->kind == ST_KIND_SESSION) {
        fprintf(stderr,
                "strata %s: --kind session: sessions are read and written with "
                "`strata session`\n",
                cmd);
        return 0;
    }
    return 1;
}

static int cli_put(const cli_conf_t *cf, int argc, char **argv)
{
    return cli_kind_ok(cf, "put") ? cli_object(cf, cli_put_bytes, cli_put_chain) : 2;
}

static int cli_get_chain(cli_run_t *r, void *arg)
{
    const cli_conf_t *cf = r->cf;
    const cli_bytes_t *b = arg;
    st_get_op_t op = {0};
    st_handle_t *h;
    FILE *f;

    op.block = (uint64_t)cf->block;
    op.kind = (uint8_t)cf->kind;
    op.layer = (uint16_t)cf->layer;
    op.dst = b->data;
    op.dst_len = b->len;
    if (st_client_get(r->c, r->chain, r->nb, &op, 1, &h) != ST_OK) {
        fprintf(stderr, "strata get: %s\n", st_client_last_error());
        return 2;
    }
    st_handle_wait(h, -1);
    st_handle_release(h);
    if (op.status != ST_OK) {
        fprintf(stderr, "strata get: %s\n",
                op.status == ST_ERR_NOT_FOUND ? "not cached" : st_strerror(op.status));
        return 1;
    }
    if (cf->out[0] != '\0') {
        f = fopen(cf->out, "wb");
        if (f == NULL || fwrite(b->data, 1, op.length, f) != op.length) {
            fprintf(stderr, "strata get: cannot write --out %s\n", cf->out);
            if (f != NULL) {
                fclose(f);
            }
            return 1;
        }
        fclose(f);
    }
    cli_print_object(r, "", b->data, op.length);
    printf("\n");
    return 0;
}

/* The buffer of `strata get`: 64 MiB, the largest object. */
static int cli_get_buffer(const cli_conf_t *cf, cli_bytes_t *b)
{
    b->len = 64u << 20;
    b->data = malloc(b->len);
    return b->data == NULL ? 1 : 0;
}

static int cli_get(const cli_conf_t *cf, int argc, char **argv)
{
    return cli_kind_ok(cf, "get") ? cli_object(cf, cli_get_buffer, cli_get_chain) : 2;
}

static int cli_delete_chain(cli_run_t *r, void *arg)
{
    const cli_conf_t *cf = r->cf;
    const unsigned *kinds = arg;

    if (st_client_delete(r->c, r->chain, r->nb, *kinds, (uint32_t)cf->layers) != ST_OK) {
        fprintf(stderr, "strata delete: %s\n", st_client_last_error());
        return 1;
    }
    printf("deleted blocks=%zu kinds=%s layers=%lld\n", r->nb, cf->kinds, (long long)cf->layers);
    return 0;
}

static int cli_delete(const cli_conf_t *cf, int argc, char **argv)
{
    unsigned kinds = 0;

    for (int k = 0; k < CLI_DELETE_KINDS; k++) {
        if (strstr(cf->kinds, cli_kind_names[k]) != NULL) {
            kinds |= 1u << k;
        }
    }
    if (kinds == 0) {
        fprintf(stderr, "strata delete: --kinds must name kv, idx and/or kda\n");
        return 2;
    }
    return cli_on_chain(cf, cli_delete_chain, &kinds);
}

/* ------------------------------------------------------------- session -- */

static void cli_print_session(const st_session_info_t *s)
{
    char hex[33];

    st_hash_to_hex(&s->head, hex);
    printf("session=%s length=%" PRIu64 " head=%s ttl_ms=%" PRIu64 " updated_unix_ms=%" PRIu64 "\n",
           s->id, s->length, hex, s->ttl_ms, s->updated_ms);
}

static int cli_session(const cli_conf_t *cf, int argc, char **argv)
{
    const char *action = argv[0], *id = argv[1];
    unsigned flags = cf->durable ? ST_SESSION_DURABLE : 0;
    st_write_result_t wr = {0};
    st_session_info_t info;
    st_client_t *c;
    st_status_t status;
    int rc = 0;

    if (strcmp(action, "open") != 0 && strcmp(action, "append") != 0 &&
        strcmp(action, "get") != 0 && strcmp(action, "close") != 0) {
        fprintf(stderr, "strata session: unknown action '%s' (open, append, get, close)\n", action);
        return 2;
    }
    if (cli_connect(cf, &c) != ST_OK) {
        return 1;
    }
    if (strcmp(action, "open") == 0) {
        status = st_session_open_ex(c, id, cf->ttl_ms, flags, &info, &wr);
        if (status == ST_OK) {
            cli_print_session(&info);
        }
    } else if (strcmp(action, "append") == 0) {
        cli_item_spec_t *items = NULL;
        size_t n_items = 0, nb;
        st_hash_t *chain;

        rc = cli_items(cf, 1, &items, &n_items);
        if (rc == 0) {
            rc = cli_chain(cf, c, items, n_items, &chain, NULL, &nb, NULL);
        }
        free(items);
        if (rc != 0) {
            st_client_close(c);
            return rc;
        }
        if (nb == 0) {
            fprintf(stderr, "strata session append: fewer tokens than one block (%u)\n",
                    st_client_block_tokens(c));
            free(chain);
            st_client_close(c);
            return 2;
        }
        status =
            st_session_append_ex(c, id, &chain[nb - 1], nb * st_client_block_tokens(c), flags, &wr);
        free(chain);
        if (status == ST_OK && st_session_get(c, id, &info) == ST_OK) {
            cli_print_session(&info);
        }
    } else if (strcmp(action, "get") == 0) {
        status = st_session_get(c, id, &info);
        if (status == ST_OK) {
            cli_print_session(&info);
        }
    } else {
        status = st_session_close(c, id);
        if (status == ST_OK) {
            printf("session=%s closed\n", id);
        }
    }
    if (status == ST_OK && (strcmp(action, "open") == 0 || strcmp(action, "append") == 0)) {
        printf("written=%u of %u replicas%s\n", wr.written, wr.replicas,
               cf->durable ? " durable" : "");
    }
    if (status == ST_ERR_PARTIAL) {
        fprintf(stderr, "strata session %s: %s: %s\n", action, st_strerror(status),
                st_client_last_error());
        rc = CLI_EXIT_PARTIAL;
    } else if (status != ST_OK) {
        fprintf(stderr, "strata session %s: %s\n", action, st_client_last_error());
        rc = 1;
    }
    st_client_close(c);
    return rc;
}

/* ------------------------------------------------------------ the table -- */

static const cfg_option_t cli_lookup_opts[] = {
    {"layers", CFG_INT, CLI_OFF(layers), "0", 0, 128, 0, NULL, 0,
     "DSA layers whose KV and IDX must all be cached (0: any object counts)"},
};
static const cfg_option_t cli_obj_opts[] = {
    {"block", CFG_INT, CLI_OFF(block), "0", 0, INT64_MAX, 0, NULL, 'b',
     "index of the block in the chain"},
    {"kind", CFG_ENUM, CLI_OFF(kind), "kv", 0, 0, 0, cli_kind_names, 'k',
     "object kind: kv, idx, kda, or vis (an image's embeddings, keyed by its --image)"},
    {"layer", CFG_INT, CLI_OFF(layer), "0", 0, 127, 0, NULL, 0, "DSA layer (KV, IDX)"},
    {"file", CFG_STRING, CLI_OFF(file), "", 0, 0, 0, NULL, 'f',
     "put: the object's bytes come from this file"},
    {"fill", CFG_INT, CLI_OFF(fill), "0", 0, 1 << 30, 0, NULL, 0,
     "put: store this many bytes of a test pattern instead"},
    {"out", CFG_STRING, CLI_OFF(out), "", 0, 0, 0, NULL, 'o',
     "get: write the object's bytes to this file"},
    {"durable", CFG_BOOL, CLI_OFF(durable), "false", 0, 0, 0, NULL, 0,
     "put of a KDA object: succeed only when --write-quorum replicas committed it to disk"},
};
static const cfg_option_t cli_delete_opts[] = {
    {"kinds", CFG_STRING, CLI_OFF(kinds), "kv,idx,kda", 0, 0, 0, NULL, 0, "object kinds to delete"},
    {"layers", CFG_INT, CLI_OFF(layers), "1", 0, 128, 0, NULL, 0,
     "delete KV and IDX layers 0..layers-1"},
};
static const cfg_option_t cli_session_opts[] = {
    {"ttl", CFG_DURATION, CLI_OFF(ttl_ms), "0", 0, 2592000000ll, 0, NULL, 0,
     "open: time to live (0: the daemon's default)"},
    {"durable", CFG_BOOL, CLI_OFF(durable), "false", 0, 0, 0, NULL, 0,
     "open, append: succeed only when --write-quorum replicas committed the record to disk"},
};

#define CLI_N(a) (sizeof(a) / sizeof((a)[0]))
const cli_command_t cli_commands[] = {
    {"status",
     "show every node: up or down, member state (with --etcd: every registered member), "
     "version, objects, memory, hit rate, ring epoch",
     NULL, 0, 0, 0, NULL, 0, cli_status},
    {"hash", "print the block-hash chain of tokens in the cluster's namespace", NULL, 0, 0, 1, NULL,
     0, cli_hash},
    {"lookup", "how much of a token sequence is cached, and how much is resumable", NULL, 0, 0, 1,
     cli_lookup_opts, CLI_N(cli_lookup_opts), cli_lookup},
    {"put", "store one object of a block of a token sequence", NULL, 0, 0, 1, cli_obj_opts,
     CLI_N(cli_obj_opts), cli_put},
    {"get", "read one object of a block of a token sequence", NULL, 0, 0, 1, cli_obj_opts,
     CLI_N(cli_obj_opts), cli_get},
    {"delete", "delete the objects of a token sequence's blocks", NULL, 0, 0, 1, cli_delete_opts,
     CLI_N(cli_delete_opts), cli_delete},
    {"metrics", "show every node's gets (hits, from SSD, misses) and lookup blocks per object kind",
     NULL, 0, 0, 0, NULL, 0, cli_kinds_cmd},
    {"session", "open, append (the tokens' chain), get or close a session",
     "open|append|get|close ID", 2, 2, 1, cli_session_opts, CLI_N(cli_session_opts), cli_session},
    {"bench", "a multi-turn long-context workload: hit rates and timings", NULL, 0, 0, 0,
     cli_bench_opts, CLI_BENCH_N_OPTS, cli_bench},
    {"load",
     "open-loop load from many simulated engines (or against Redis): latency per call kind, "
     "hit rates, errors",
     NULL, 0, 0, 0, cli_load_opts, CLI_LOAD_N_OPTS, cli_load},
    {"drain", "hand a node's durable objects to the other nodes, then stop it", "NODE", 1, 1, 0,
     NULL, 0, cli_drain},
};
const size_t cli_n_commands = CLI_N(cli_commands);
