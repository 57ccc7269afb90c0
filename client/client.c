/*
 * client.c - connecting to a cluster: the settings (client_options.h's table)
 * applied, channels opened, Hello to every node, the health checker.
 */
#include "client_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_options.h"
#include "clock.h"
#include "log.h"

/* ------------------------------------------------------------------ tls -- */

/* A TLS file setting: NULL where it is empty. */
static const char *sc_tls_path(const char *v)
{
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* Reads the TLS files of the settings o into c. */
static st_status_t sc_tls_load(st_client_t *c, const sc_options_t *o)
{
    const char *ca = sc_tls_path(o->tls_ca);
    const char *cert = sc_tls_path(o->tls_cert);
    const char *key = sc_tls_path(o->tls_key);
    st_status_t st;

    if ((cert != NULL) != (key != NULL)) {
        return sc_error(ST_ERR_INVALID, "tls_cert and tls_key go together (only %s is set)",
                        cert != NULL ? "tls_cert" : "tls_key");
    }
    if (cert != NULL && ca == NULL) {
        return sc_error(ST_ERR_INVALID, "a client certificate (tls_cert) needs tls_ca, the CA "
                                        "of the daemons' certificates");
    }
    if (ca != NULL && (st = srpc_pem_load(ca, &c->tls_ca_pem)) != ST_OK) {
        return sc_error(st, "tls_ca %s cannot be read", ca);
    }
    if (cert != NULL && (st = srpc_pem_load(cert, &c->tls_cert_pem)) != ST_OK) {
        return sc_error(st, "tls_cert %s cannot be read", cert);
    }
    if (key != NULL && (st = srpc_pem_load(key, &c->tls_key_pem)) != ST_OK) {
        return sc_error(st, "tls_key %s cannot be read", key);
    }
    return ST_OK;
}

/* Says Hello to node i and checks that it agrees with what we know. */
static st_status_t sc_hello(st_client_t *c, uint32_t i, int first)
{
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *resp = NULL;
    srpc_error_t err;
    st_status_t status;

    req.protocol_version = 1;
    req.tenant = c->tenant;
    req.model = c->model;
    req.client_name = "libstrata";
    status = srpc_call(c->nodes[i].ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &req.base,
                       (int)c->timeout_ms, (ProtobufCMessage **)&resp, &err);
    if (status != ST_OK) {
        return sc_error(status, "hello to %s: %s", c->nodes[i].addr,
                        err.message[0] ? err.message : st_strerror(status));
    }
    if (resp->namespace_seed.len != ST_HASH_BYTES || resp->block_tokens == 0 ||
        resp->segment_blocks == 0) {
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return sc_error(ST_ERR_PROTOCOL, "hello from %s: malformed answer", c->nodes[i].addr);
    }
    if (first) {
        c->ns = resp->namespace_id;
        memcpy(c->seed.b, resp->namespace_seed.data, ST_HASH_BYTES);
        c->block_tokens = resp->block_tokens;
        c->segment_blocks = resp->segment_blocks;
        if (resp->limits != NULL) {
            c->max_batch = resp->limits->max_keys_per_call;
            c->max_message = resp->limits->max_message_bytes;
            c->max_hashes = resp->limits->max_blocks_per_lookup;
        }
    } else if (resp->namespace_id != c->ns ||
               memcmp(resp->namespace_seed.data, c->seed.b, ST_HASH_BYTES) != 0 ||
               resp->block_tokens != c->block_tokens || resp->segment_blocks != c->segment_blocks) {
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return sc_error(ST_ERR_PROTOCOL,
                        "node %s disagrees with the cluster (namespace seed, block size or "
                        "segment size): is its cluster_secret the same?",
                        c->nodes[i].addr);
    }
    if (first && c->replicas == 0) {
        /* The cluster's R (16 at most, as configured replicas are). */
        c->replicas = resp->replicas == 0 ? 2 : resp->replicas > 16 ? 16 : resp->replicas;
    } else if (first && resp->replicas != 0 && resp->replicas != c->replicas) {
        lg_warn("client replicas differ from the cluster's node=%s client_replicas=%u "
                "cluster_replicas=%u write_quorum=%u",
                c->nodes[i].addr, c->replicas, resp->replicas, c->write_quorum);
    }
    if (resp->ring_epoch > __atomic_load_n(&c->ring_epoch, __ATOMIC_ACQUIRE)) {
        if (c->etcd != NULL) {
            c->etcd_checked_ms = 0; /* a newer ring than ours: read the members again */
        } else {
            __atomic_store_n(&c->ring_epoch, resp->ring_epoch, __ATOMIC_RELEASE);
        }
    }
    if (resp->client_id != 0) {
        /* Sent back with every call: this node binds our reservation batches to it. */
        char hex[17];

        snprintf(hex, sizeof(hex), "%016llx", (unsigned long long)resp->client_id);
        srpc_channel_set_client(c->nodes[i].ch, hex);
    }
    sc_dp_hello(c, i, resp);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return ST_OK;
}

#define SC_KICK_MS 20

static void *sc_health_main(void *arg)
{
    st_client_t *c = arg;

    pthread_mutex_lock(&c->health_lock);
    while (!c->stopping) {
        uint64_t take;

        if (c->health_kicks == c->health_served) {
            struct timespec ts = cm_deadline_ms(c->health_interval_ms);

            pthread_cond_timedwait(&c->health_cond, &c->health_lock, &ts);
        }
        if (c->stopping) {
            break;
        }
        take = c->health_kicks;
        if (take != c->health_served) {
            c->etcd_checked_ms = 0; /* kicked: read the members now */
        }
        pthread_mutex_unlock(&c->health_lock);
        sc_members_refresh(c); /* with etcd: joins and leaves (members.c) */
        for (uint32_t i = 0; i < c->n_nodes; i++) {
            if (!c->nodes[i].left && !ring_is_up(&c->ring, i) && sc_hello(c, i, 0) == ST_OK) {
                lg_info("node back node=%s", c->nodes[i].addr);
                ring_set_up(&c->ring, i, 1);
                __atomic_add_fetch(&c->view_gen, 1, __ATOMIC_ACQ_REL);
            }
        }
        pthread_mutex_lock(&c->health_lock);
        if (take != c->health_served) {
            c->health_served = take;
            c->health_kicked_ms = cm_mono_ms();
            pthread_cond_broadcast(&c->health_cond); /* the kickers wait on it too */
        }
    }
    pthread_mutex_unlock(&c->health_lock);
    return NULL;
}

int sc_health_refresh(st_client_t *c, uint64_t gen0, uint64_t deadline_ns)
{
    uint64_t my;

    if (__atomic_load_n(&c->view_gen, __ATOMIC_ACQUIRE) != gen0) {
        return 1; /* moved while the call ran: place again first */
    }
    pthread_mutex_lock(&c->health_lock);
    if (!c->health_running || c->stopping ||
        (c->health_kicks == c->health_served && cm_mono_ms() - c->health_kicked_ms < SC_KICK_MS)) {
        pthread_mutex_unlock(&c->health_lock);
        return 0;
    }
    my = ++c->health_kicks;
    pthread_cond_broadcast(&c->health_cond);
    while (c->health_served < my && !c->stopping) {
        uint64_t now = cm_mono_ns();
        struct timespec ts;

        if (now >= deadline_ns) {
            break;
        }
        ts = cm_deadline_ms((deadline_ns - now + 999999) / 1000000);
        pthread_cond_timedwait(&c->health_cond, &c->health_lock, &ts);
    }
    pthread_mutex_unlock(&c->health_lock);
    return __atomic_load_n(&c->view_gen, __ATOMIC_ACQUIRE) != gen0;
}

uint32_t st_client_write_quorum(const st_client_t *c)
{
    return c->write_quorum;
}

uint32_t st_client_replicas(const st_client_t *c)
{
    return c->replicas < c->n_nodes ? c->replicas : c->n_nodes;
}

/* Checks write_quorum against R (replicas, at most the nodes) and makes 0 R. */
static st_status_t sc_quorum_init(st_client_t *c)
{
    uint32_t r = st_client_replicas(c);

    if (c->write_quorum > r) {
        return sc_error(ST_ERR_INVALID,
                        "write_quorum %u is above replicas %u (replicas=%u, %u nodes)",
                        c->write_quorum, r, c->replicas, c->n_nodes);
    }
    if (c->write_quorum == 0) {
        c->write_quorum = r;
    }
    return ST_OK;
}

/* ------------------------------------------------------------- connect -- */

static st_status_t sc_parse_nodes(st_client_t *c, const char *list)
{
    char *copy = strdup(list), *save = NULL;

    if (copy == NULL) {
        return ST_ERR_NOMEM;
    }
    for (char *t = strtok_r(copy, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        const char *colon = strrchr(t, ':');

        if (colon == NULL || colon == t || colon[1] == '\0' || c->n_nodes == SC_MAX_NODES) {
            sc_error(ST_ERR_INVALID, "bad node address '%s' (want host:port, at most %d)", t,
                     SC_MAX_NODES);
            free(copy);
            return ST_ERR_INVALID;
        }
        c->nodes[c->n_nodes].addr = strdup(t);
        if (c->nodes[c->n_nodes].addr == NULL) {
            free(copy);
            return ST_ERR_NOMEM;
        }
        c->n_nodes++;
    }
    free(copy);
    if (c->n_nodes == 0) {
        return sc_error(ST_ERR_INVALID, "no nodes given");
    }
    return ST_OK;
}

/*
 * Applies the settings o to c: names, counts and switches, the transport, the
 * nodes, the TLS files and the ring. Takes o's tenant, model and token.
 */
static st_status_t sc_configure(st_client_t *c, sc_options_t *o)
{
    uint32_t vnodes = (uint32_t)o->vnodes;
    const char *tr = o->transport;
    st_status_t status;

    c->tenant = o->tenant, o->tenant = NULL;
    c->model = o->model, o->model = NULL;
    c->token = o->token, o->token = NULL;
    c->replicas = (uint32_t)o->replicas;
    c->write_quorum = (uint32_t)o->write_quorum;
    c->timeout_ms = (uint32_t)o->timeout_ms;
    c->health_interval_ms = (uint32_t)o->health_interval_ms;
    c->verify_always = o->verify_reads == 1;
    c->cache_all = o->cache_locations == 1;
    c->tcalls = o->transport_calls;
    c->copy_threads = (uint32_t)o->copy_threads;
    status = tr == NULL || tr[0] == '\0' || strcmp(tr, "inline") == 0 ? ST_OK : sc_dp_create(c, tr);
    if (status != ST_OK) {
        return status; /* the message is set */
    }
    if (o->etcd != NULL && o->etcd[0] != '\0') {
        char *list = NULL;

        status = sc_members_nodes(c, o->etcd, o->etcd_prefix, &list); /* members.c */
        if (status == ST_OK) {
            status = sc_parse_nodes(c, list);
        }
        free(list);
    } else {
        status = sc_parse_nodes(c, o->nodes);
    }
    if (status == ST_OK) {
        status = sc_tls_load(c, o);
    }
    if (status == ST_OK &&
        (c->replicas > 16 || vnodes == 0 || c->timeout_ms == 0 || c->health_interval_ms == 0)) {
        status = sc_error(ST_ERR_INVALID, "replicas must be 0 (the cluster's) to 16; vnodes, "
                                          "timeout and health_interval positive");
    }
    if (status == ST_OK && c->replicas != 0) {
        status = sc_quorum_init(c); /* R is known: check W now, before any call */
    }
    if (status == ST_OK) {
        const char *names[SC_MAX_NODES];

        for (uint32_t i = 0; i < c->n_nodes; i++) {
            names[i] = c->nodes[i].addr;
        }
        status = ring_init(&c->ring, names, c->n_nodes, vnodes);
        if (status == ST_ERR_INVALID) {
            sc_error(status, "the node list has a duplicate");
        }
    }
    return status;
}

/* Opens the gRPC channel of every node. */
static st_status_t sc_channels_open(st_client_t *c)
{
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        st_status_t status = sc_node_channel_open(c, i); /* base.c */

        if (status != ST_OK) {
            return status;
        }
    }
    return ST_OK;
}

/*
 * Says Hello to every node: the first that answers gives the namespace, the
 * others must agree; one that does not answer starts as down. Then the
 * quorum (when R came from Hello) and the limits the nodes did not give.
 */
static st_status_t sc_hello_all(st_client_t *c)
{
    int answered = 0;

    for (uint32_t i = 0; i < c->n_nodes; i++) {
        st_status_t status = sc_hello(c, i, answered == 0);

        if (status == ST_OK) {
            answered++;
            continue;
        }
        if (status == ST_ERR_PERMISSION || status == ST_ERR_UNAUTHENTICATED ||
            status == ST_ERR_PROTOCOL || status == ST_ERR_INVALID) {
            return status; /* the message is set */
        }
        lg_warn("node down at connect node=%s error=\"%s\"", c->nodes[i].addr,
                st_client_last_error());
        ring_set_up(&c->ring, i, 0);
    }
    if (answered == 0) {
        return sc_error(ST_ERR_UNAVAILABLE, "no node of %u answered", c->n_nodes);
    }
    if (c->write_quorum == 0 || c->write_quorum > st_client_replicas(c)) {
        st_status_t status = sc_quorum_init(c); /* R came from Hello */

        if (status != ST_OK) {
            return status;
        }
    }
    c->max_batch = c->max_batch != 0 ? c->max_batch : 4096;
    c->max_message = c->max_message != 0 ? c->max_message : 16u << 20;
    c->max_hashes = c->max_hashes != 0 ? c->max_hashes : 65536;
    return ST_OK;
}

/* Starts the worker pool and the health checker. */
static st_status_t sc_threads_start(st_client_t *c)
{
    st_status_t status;

    pthread_mutex_init(&c->health_lock, NULL);
    pthread_cond_init(&c->health_cond, NULL);
    status = sc_pool_start(c);
    if (status == ST_OK && pthread_create(&c->health, NULL, sc_health_main, c) == 0) {
        c->health_running = 1;
    } else if (status == ST_OK) {
        status = ST_ERR_INTERNAL;
    }
    if (status != ST_OK) {
        return sc_error(status, "cannot start the client's threads");
    }
    return ST_OK;
}

st_status_t st_client_connect(const st_client_params_t *params, st_client_t **client_p)
{
    sc_options_t o;
    st_client_t *c;
    st_status_t status;

    if (params == NULL || client_p == NULL) {
        return sc_error(ST_ERR_INVALID, "st_client_connect: NULL argument");
    }
    status = sc_options_load(params, &o);
    if (status != ST_OK) {
        return status; /* the message is set */
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        sc_options_free(&o);
        return ST_ERR_NOMEM;
    }
    status = sc_configure(c, &o);
    sc_options_free(&o);
    if (status == ST_OK) {
        status = sc_channels_open(c);
    }
    if (status == ST_OK) {
        status = sc_hello_all(c);
    }
    if (status == ST_OK) {
        status = sc_threads_start(c);
    }
    if (status != ST_OK) {
        st_client_close(c);
        return status;
    }
    *client_p = c;
    return ST_OK;
}

void st_client_close(st_client_t *c)
{
    if (c == NULL) {
        return;
    }
    if (c->health_running) {
        pthread_mutex_lock(&c->health_lock);
        c->stopping = 1;
        pthread_cond_broadcast(&c->health_cond);
        pthread_mutex_unlock(&c->health_lock);
        pthread_join(c->health, NULL);
        pthread_mutex_destroy(&c->health_lock);
        pthread_cond_destroy(&c->health_cond);
    }
    sc_pool_stop(c);
    sc_dp_destroy(c);
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        srpc_channel_close(c->nodes[i].ch);
        free(c->nodes[i].addr);
    }
    if (c->ring.table != NULL) {
        ring_destroy(&c->ring);
    }
    sc_members_close(c);
    free(c->tenant);
    free(c->model);
    free(c->token);
    free(c->tls_ca_pem), free(c->tls_cert_pem), free(c->tls_key_pem);
    free(c);
}

uint32_t st_client_block_tokens(const st_client_t *c)
{
    return c->block_tokens;
}

uint32_t st_client_segment_blocks(const st_client_t *c)
{
    return c->segment_blocks;
}

st_status_t st_client_hash(const st_client_t *c, const uint32_t *tokens, size_t n_tokens,
                           const st_hash_item_t *items, size_t n_items, st_hash_t *chain,
                           size_t max_blocks, size_t *n_blocks_p)
{
    st_status_t status = st_hash_chain(&c->seed, tokens, n_tokens, c->block_tokens, items, n_items,
                                       chain, max_blocks, n_blocks_p);

    if (status != ST_OK) {
        return sc_error(status, "hash: items must be sorted by start and non-empty");
    }
    return ST_OK;
}
