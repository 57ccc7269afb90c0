/*
 * client.c - connecting to a cluster: parameters and the client config file,
 * Hello to every node, the ring, the health checker, the per-thread error.
 */
#include "client_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "st_config.h"
#include "st_log.h"

static __thread char sc_last_error[320];

st_status_t sc_error(st_status_t status, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(sc_last_error, sizeof(sc_last_error), fmt, ap);
    va_end(ap);
    return status;
}

const char *st_client_last_error(void)
{
    return sc_last_error;
}

/* --------------------------------------------------------- config file -- */

typedef struct sc_file_config {
    char *nodes, *tenant, *model, *token, *transport;
    char *tls_ca, *tls_cert, *tls_key;
    int64_t replicas, vnodes, write_quorum;
    uint64_t timeout_ms, health_interval_ms;
    int verify_reads, cache_locations, transport_calls;
    int64_t copy_threads;
} sc_file_config_t;

/* verify_reads values, in sc_file_config_t.verify_reads order. */
static const char *const sc_verify_names[] = {"lease", "always", NULL};

/* cache_locations values, in sc_file_config_t.cache_locations order. */
static const char *const sc_cache_names[] = {"rows", "all", NULL};

#define SC_OFF(m) offsetof(sc_file_config_t, m)
static const st_cfg_option_t sc_file_options[] = {
    {"nodes", ST_CFG_STRING, SC_OFF(nodes), "", 0, 0, 0, NULL, 0,
     "the cluster's nodes, host:port,host:port"},
    {"tenant", ST_CFG_STRING, SC_OFF(tenant), "default", 0, 0, 0, NULL, 0, "tenant name"},
    {"model", ST_CFG_STRING, SC_OFF(model), "default", 0, 0, 0, NULL, 0, "model name"},
    {"token", ST_CFG_STRING, SC_OFF(token), "", 0, 0, ST_CFG_SENSITIVE, NULL, 0,
     "authentication token"},
    {"transport", ST_CFG_STRING, SC_OFF(transport), "inline", 0, 0, 0, NULL, 0,
     "data-plane transport"},
    {"replicas", ST_CFG_INT, SC_OFF(replicas), "0", 0, 16, 0, NULL, 0,
     "copies of KDA and SESSION objects (0: the cluster's, from Hello)"},
    {"write_quorum", ST_CFG_INT, SC_OFF(write_quorum), "0", 0, 16, 0, NULL, 0,
     "W: replicas that must commit a durable write (a durable KDA put or session write) to "
     "disk for it to succeed; fewer is ST_ERR_PARTIAL with the count (0: replicas, all R)"},
    {"vnodes", ST_CFG_INT, SC_OFF(vnodes), "128", 1, 4096, 0, NULL, 0, "ring points per node"},
    {"timeout", ST_CFG_DURATION, SC_OFF(timeout_ms), "5s", 10, 600000, 0, NULL, 0,
     "deadline of one call"},
    {"health_interval", ST_CFG_DURATION, SC_OFF(health_interval_ms), "1s", 10, 600000, 0, NULL, 0,
     "how often down nodes are retried"},
    {"verify_reads", ST_CFG_ENUM, SC_OFF(verify_reads), "lease", 0, 0, 0, sc_verify_names, 0,
     "one-sided reads of whole objects: lease (bytes that landed under the Locate's lease are "
     "the committed ones; later ones are checked by XXH3-64) or always (every object is "
     "checked)"},
    {"cache_locations", ST_CFG_ENUM, SC_OFF(cache_locations), "rows", 0, 0, 0, sc_cache_names, 0,
     "which one-sided reads keep their lease and reuse the location without a Locate: rows "
     "(row reads) or all (whole objects too; what they read stays leased for up to the "
     "lease)"},
    {"transport_calls", ST_CFG_BOOL, SC_OFF(transport_calls), "true", 0, 0, 0, NULL, 0,
     "with a transport: send Locate, Release and Lookup over it to daemons that serve them "
     "(no gRPC round trip; gRPC when the answer takes over 250 ms)"},
    {"copy_threads", ST_CFG_INT, SC_OFF(copy_threads), "2", 1, 16, 0, NULL, 0,
     "with a transport that maps the daemons' memory here (UCX on one host): threads that "
     "copy a large batch's objects, the batch's own included (1: it copies alone)"},
    {"tls_ca", ST_CFG_STRING, SC_OFF(tls_ca), "", 0, 0, 0, NULL, 0,
     "PEM file of the CA of the daemons' certificates: gRPC over TLS (empty: plaintext)"},
    {"tls_cert", ST_CFG_STRING, SC_OFF(tls_cert), "", 0, 0, 0, NULL, 0,
     "PEM file of a client certificate, for daemons that ask for one (needs tls_ca)"},
    {"tls_key", ST_CFG_STRING, SC_OFF(tls_key), "", 0, 0, 0, NULL, 0,
     "PEM file of tls_cert's private key"},
};
static const st_cfg_table_t sc_file_table = {"strata", "libstrata client settings", NULL,
                                             sc_file_options,
                                             sizeof(sc_file_options) / sizeof(sc_file_options[0])};

/* ------------------------------------------------------------------ tls -- */

/* The parameter if its bit is set and it is not empty, else the file's setting, else NULL. */
static const char *sc_tls_path(const st_client_params_t *params, uint64_t bit, const char *param,
                               const char *file)
{
    const char *v = (params->field_mask & bit) ? param : NULL;

    v = v != NULL && v[0] != '\0' ? v : file;
    return v != NULL && v[0] != '\0' ? v : NULL;
}

/* Reads the TLS files of params (or of the config file fc) into c. */
static st_status_t sc_tls_load(st_client_t *c, const st_client_params_t *params,
                               const sc_file_config_t *fc)
{
    const char *ca = sc_tls_path(params, ST_CLIENT_FIELD_TLS_CA, params->tls_ca, fc->tls_ca);
    const char *cert =
        sc_tls_path(params, ST_CLIENT_FIELD_TLS_CERT, params->tls_cert, fc->tls_cert);
    const char *key = sc_tls_path(params, ST_CLIENT_FIELD_TLS_KEY, params->tls_key, fc->tls_key);
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

/* ---------------------------------------------------------------- nodes -- */

int sc_owner(const st_client_t *c, const st_hash_t *first)
{
    uint32_t node;

    return st_ring_place(&c->ring, first, &node, 1) == 1 ? (int)node : -1;
}

void sc_node_failed(st_client_t *c, uint32_t i, st_status_t status, const srpc_error_t *err)
{
    /*
     * Down: unreachable or too slow. A node that does not know our namespace
     * has restarted since our Hello (a daemon forgets namespaces, and its
     * DRAM, on restart): it counts as down until the health checker has
     * said Hello to it again.
     */
    if (status == ST_ERR_UNAVAILABLE || status == ST_ERR_TIMEOUT ||
        (status == ST_ERR_NOT_FOUND && err != NULL && strstr(err->message, "namespace_id"))) {
        if (st_ring_is_up(&c->ring, i)) {
            st_warn("node down node=%s error=\"%s\"", c->nodes[i].addr,
                    err != NULL ? err->message : st_strerror(status));
        }
        st_ring_set_up(&c->ring, i, 0);
    }
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
        st_warn("client replicas differ from the cluster's node=%s client_replicas=%u "
                "cluster_replicas=%u write_quorum=%u",
                c->nodes[i].addr, c->replicas, resp->replicas, c->write_quorum);
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

static void *sc_health_main(void *arg)
{
    st_client_t *c = arg;

    pthread_mutex_lock(&c->health_lock);
    while (!c->stopping) {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += c->health_interval_ms / 1000;
        ts.tv_nsec += (long)(c->health_interval_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->health_cond, &c->health_lock, &ts);
        if (c->stopping) {
            break;
        }
        pthread_mutex_unlock(&c->health_lock);
        for (uint32_t i = 0; i < c->n_nodes; i++) {
            if (!st_ring_is_up(&c->ring, i) && sc_hello(c, i, 0) == ST_OK) {
                st_info("node back node=%s", c->nodes[i].addr);
                st_ring_set_up(&c->ring, i, 1);
            }
        }
        pthread_mutex_lock(&c->health_lock);
    }
    pthread_mutex_unlock(&c->health_lock);
    return NULL;
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

static char *sc_strdup(const char *s, const char *dflt)
{
    return strdup(s != NULL && s[0] != '\0' ? s : dflt);
}

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

st_status_t st_client_connect(const st_client_params_t *params, st_client_t **client_p)
{
    sc_file_config_t fc;
    st_client_t *c;
    const char *nodes = NULL;
    uint32_t vnodes;
    int answered = 0;
    char err[320];
    st_status_t status;

    if (params == NULL || client_p == NULL) {
        return sc_error(ST_ERR_INVALID, "st_client_connect: NULL argument");
    }
    memset(&fc, 0, sizeof(fc));
    if (st_config_defaults(&sc_file_table, &fc) != ST_OK) {
        return ST_ERR_NOMEM;
    }
    if (params->field_mask & ST_CLIENT_FIELD_CONFIG_FILE) {
        status = st_config_load_file(&sc_file_table, &fc, params->config_file, err, sizeof(err));
        if (status != ST_OK) {
            st_config_free(&sc_file_table, &fc);
            return sc_error(status, "%s", err);
        }
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        st_config_free(&sc_file_table, &fc);
        return ST_ERR_NOMEM;
    }
#define SC_FIELD(f, name) ((params->field_mask & (f)) ? params->name : NULL)
    nodes = SC_FIELD(ST_CLIENT_FIELD_NODES, nodes);
    c->tenant = sc_strdup(SC_FIELD(ST_CLIENT_FIELD_TENANT, tenant), fc.tenant);
    c->model = sc_strdup(SC_FIELD(ST_CLIENT_FIELD_MODEL, model), fc.model);
    c->token = sc_strdup(SC_FIELD(ST_CLIENT_FIELD_TOKEN, token), fc.token);
    c->replicas =
        (params->field_mask & ST_CLIENT_FIELD_REPLICAS) ? params->replicas : (uint32_t)fc.replicas;
    c->write_quorum = (params->field_mask & ST_CLIENT_FIELD_WRITE_QUORUM)
                          ? params->write_quorum
                          : (uint32_t)fc.write_quorum;
    vnodes = (params->field_mask & ST_CLIENT_FIELD_VNODES) ? params->vnodes : (uint32_t)fc.vnodes;
    c->timeout_ms = (params->field_mask & ST_CLIENT_FIELD_TIMEOUT) ? params->timeout_ms
                                                                   : (uint32_t)fc.timeout_ms;
    c->health_interval_ms = (params->field_mask & ST_CLIENT_FIELD_HEALTH_INTERVAL)
                                ? params->health_interval_ms
                                : (uint32_t)fc.health_interval_ms;
    c->verify_always = fc.verify_reads == 1;
    if (params->field_mask & ST_CLIENT_FIELD_VERIFY_READS) {
        const char *v = params->verify_reads != NULL ? params->verify_reads : "";

        if (strcmp(v, "lease") != 0 && strcmp(v, "always") != 0) {
            st_config_free(&sc_file_table, &fc);
            free(c->tenant), free(c->model), free(c->token), free(c);
            return sc_error(ST_ERR_INVALID, "verify_reads '%s': expected lease or always", v);
        }
        c->verify_always = strcmp(v, "always") == 0;
    }
    c->cache_all = fc.cache_locations == 1;
    if (params->field_mask & ST_CLIENT_FIELD_CACHE_LOCATIONS) {
        const char *v = params->cache_locations != NULL ? params->cache_locations : "";

        if (strcmp(v, "rows") != 0 && strcmp(v, "all") != 0) {
            st_config_free(&sc_file_table, &fc);
            free(c->tenant), free(c->model), free(c->token), free(c);
            return sc_error(ST_ERR_INVALID, "cache_locations '%s': expected rows or all", v);
        }
        c->cache_all = strcmp(v, "all") == 0;
    }
    c->tcalls = fc.transport_calls;
    if (params->field_mask & ST_CLIENT_FIELD_TRANSPORT_CALLS) {
        c->tcalls = params->transport_calls != 0;
    }
    c->copy_threads = (uint32_t)fc.copy_threads;
    if (params->field_mask & ST_CLIENT_FIELD_COPY_THREADS) {
        if (params->copy_threads < 1 || params->copy_threads > 16) {
            st_config_free(&sc_file_table, &fc);
            free(c->tenant), free(c->model), free(c->token), free(c);
            return sc_error(ST_ERR_INVALID, "copy_threads %u: expected 1 to 16",
                            params->copy_threads);
        }
        c->copy_threads = params->copy_threads;
    }
    {
        const char *tr = SC_FIELD(ST_CLIENT_FIELD_TRANSPORT, transport);

        tr = tr != NULL ? tr : fc.transport;
        status =
            tr == NULL || tr[0] == '\0' || strcmp(tr, "inline") == 0 ? ST_OK : sc_dp_create(c, tr);
    }
    if (status != ST_OK) {
        st_config_free(&sc_file_table, &fc);
        free(c);
        return status; /* the message is set */
    }
    status = sc_parse_nodes(c, nodes != NULL ? nodes : fc.nodes);
    if (status == ST_OK) {
        status = sc_tls_load(c, params, &fc);
    }
    st_config_free(&sc_file_table, &fc);
    if (c->tenant == NULL || c->model == NULL || c->token == NULL) {
        status = ST_ERR_NOMEM;
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
        status = st_ring_init(&c->ring, names, c->n_nodes, vnodes);
        if (status == ST_ERR_INVALID) {
            sc_error(status, "the node list has a duplicate");
        }
    }
    if (status != ST_OK) {
        st_client_close(c);
        return status;
    }
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        srpc_channel_config_t cc = {.token = c->token[0] ? c->token : NULL,
                                    .tls_ca_pem = c->tls_ca_pem,
                                    .tls_cert_pem = c->tls_cert_pem,
                                    .tls_key_pem = c->tls_key_pem};

        status = srpc_channel_open(c->nodes[i].addr, &cc, &c->nodes[i].ch);
        if (status != ST_OK) {
            const char *what = status == ST_ERR_INVALID ? " (the TLS files do not parse, or the "
                                                          "key is not the certificate's)"
                                                        : "";

            sc_error(status, "cannot open a channel to %s%s", c->nodes[i].addr, what);
            st_client_close(c);
            return status;
        }
    }
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        status = sc_hello(c, i, answered == 0);
        if (status == ST_OK) {
            answered++;
            continue;
        }
        if (status == ST_ERR_PERMISSION || status == ST_ERR_UNAUTHENTICATED ||
            status == ST_ERR_PROTOCOL || status == ST_ERR_INVALID) {
            st_client_close(c);
            return status; /* the message is set */
        }
        st_warn("node down at connect node=%s error=\"%s\"", c->nodes[i].addr,
                st_client_last_error());
        st_ring_set_up(&c->ring, i, 0);
    }
    if (answered == 0) {
        uint32_t n = c->n_nodes;

        st_client_close(c);
        return sc_error(ST_ERR_UNAVAILABLE, "no node of %u answered", n);
    }
    if (c->write_quorum == 0 || c->write_quorum > st_client_replicas(c)) {
        status = sc_quorum_init(c); /* R came from Hello */
        if (status != ST_OK) {
            st_client_close(c);
            return status;
        }
    }
    if (c->max_batch == 0) {
        c->max_batch = 4096;
    }
    if (c->max_message == 0) {
        c->max_message = 16u << 20;
    }
    if (c->max_hashes == 0) {
        c->max_hashes = 65536;
    }
    pthread_mutex_init(&c->health_lock, NULL);
    pthread_cond_init(&c->health_cond, NULL);
    status = sc_pool_start(c);
    if (status == ST_OK && pthread_create(&c->health, NULL, sc_health_main, c) == 0) {
        c->health_running = 1;
    } else if (status == ST_OK) {
        status = ST_ERR_INTERNAL;
    }
    if (status != ST_OK) {
        st_client_close(c);
        return sc_error(status, "cannot start the client's threads");
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
    if (c->ring.points != NULL) {
        st_ring_destroy(&c->ring);
    }
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
