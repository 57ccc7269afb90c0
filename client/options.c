/*
 * options.c - the one table of libstrata's settings (client_options.h): the
 * config file keys, the st_client_params_t fields that win over them, and the
 * connection flags of the `strata` command, with one default, one set of
 * limits and one help text each.
 */
#include "client_options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"

/* verify_reads values, in sc_options_t.verify_reads order. */
static const char *const sc_verify_names[] = {"lease", "always", NULL};

/* cache_locations values, in sc_options_t.cache_locations order. */
static const char *const sc_cache_names[] = {"rows", "all", NULL};

#define SC_OFF(m)    offsetof(sc_options_t, m)
#define SC_PARAM(m)  offsetof(st_client_params_t, m)
#define SC_CLI_EMPTY (SC_OPT_CLI | SC_OPT_EMPTY_UNSET)

/* In the order of the command's --help. */
const sc_option_t sc_option_table[] = {
    {{"nodes", CFG_STRING, SC_OFF(nodes), "", 0, 0, 0, NULL, 'n',
      "the cluster's nodes, host:port,host:port"},
     ST_CLIENT_FIELD_NODES,
     SC_PARAM(nodes),
     SC_OPT_CLI,
     "127.0.0.1:7700"},
    {{"tenant", CFG_STRING, SC_OFF(tenant), "default", 0, 0, 0, NULL, 0, "tenant name"},
     ST_CLIENT_FIELD_TENANT,
     SC_PARAM(tenant),
     SC_CLI_EMPTY,
     NULL},
    {{"model", CFG_STRING, SC_OFF(model), "default", 0, 0, 0, NULL, 0, "model name"},
     ST_CLIENT_FIELD_MODEL,
     SC_PARAM(model),
     SC_CLI_EMPTY,
     NULL},
    {{"token", CFG_STRING, SC_OFF(token), "", 0, 0, CFG_SENSITIVE, NULL, 0, "authentication token"},
     ST_CLIENT_FIELD_TOKEN,
     SC_PARAM(token),
     SC_CLI_EMPTY,
     NULL},
    {{"timeout", CFG_DURATION, SC_OFF(timeout_ms), "5s", 10, 600000, 0, NULL, 0,
      "deadline of one call"},
     ST_CLIENT_FIELD_TIMEOUT,
     SC_PARAM(timeout_ms),
     SC_OPT_CLI,
     NULL},
    {{"replicas", CFG_INT, SC_OFF(replicas), "0", 0, 16, 0, NULL, 0,
      "copies of KDA and SESSION objects (0: the cluster's, from Hello)"},
     ST_CLIENT_FIELD_REPLICAS,
     SC_PARAM(replicas),
     SC_OPT_CLI,
     NULL},
    {{"write_quorum", CFG_INT, SC_OFF(write_quorum), "0", 0, 16, 0, NULL, 0,
      "replicas that must commit a --durable write to disk (0: all of --replicas); fewer "
      "exits with 3"},
     ST_CLIENT_FIELD_WRITE_QUORUM,
     SC_PARAM(write_quorum),
     SC_OPT_CLI,
     NULL},
    {{"transport", CFG_STRING, SC_OFF(transport), "inline", 0, 0, 0, NULL, 0,
      "how object bytes move: inline (in the control plane), ucx, libfabric[:provider]"},
     ST_CLIENT_FIELD_TRANSPORT,
     SC_PARAM(transport),
     SC_OPT_CLI,
     NULL},
    {{"vnodes", CFG_INT, SC_OFF(vnodes), "128", 1, 4096, 0, NULL, 0, "ring points per node"},
     ST_CLIENT_FIELD_VNODES,
     SC_PARAM(vnodes),
     0,
     NULL},
    {{"health_interval", CFG_DURATION, SC_OFF(health_interval_ms), "1s", 10, 600000, 0, NULL, 0,
      "how often down nodes are retried"},
     ST_CLIENT_FIELD_HEALTH_INTERVAL,
     SC_PARAM(health_interval_ms),
     0,
     NULL},
    {{"verify_reads", CFG_ENUM, SC_OFF(verify_reads), "lease", 0, 0, 0, sc_verify_names, 0,
      "one-sided reads of whole objects: lease (bytes that landed under the Locate's lease "
      "count; later ones are checked by XXH3-64) or always (every object is checked)"},
     ST_CLIENT_FIELD_VERIFY_READS,
     SC_PARAM(verify_reads),
     SC_OPT_CLI,
     NULL},
    {{"cache_locations", CFG_ENUM, SC_OFF(cache_locations), "rows", 0, 0, 0, sc_cache_names, 0,
      "which one-sided reads reuse their lease's location without a Locate: rows or all "
      "(whole objects too)"},
     ST_CLIENT_FIELD_CACHE_LOCATIONS,
     SC_PARAM(cache_locations),
     SC_OPT_CLI,
     NULL},
    {{"transport_calls", CFG_BOOL, SC_OFF(transport_calls), "true", 0, 0, 0, NULL, 0,
      "with a transport: Locate, Release, Lookup and Score over it to daemons that serve them "
      "(false: over gRPC)"},
     ST_CLIENT_FIELD_TRANSPORT_CALLS,
     SC_PARAM(transport_calls),
     SC_OPT_CLI,
     NULL},
    {{"copy_threads", CFG_INT, SC_OFF(copy_threads), "2", 1, 16, 0, NULL, 0,
      "threads that copy a large batch's objects where the transport maps the daemons' memory "
      "(ucx, same host); 1: the batch's own thread alone"},
     ST_CLIENT_FIELD_COPY_THREADS,
     SC_PARAM(copy_threads),
     SC_OPT_CLI | SC_OPT_CHECK_PARAM,
     NULL},
    {{"tls_ca", CFG_STRING, SC_OFF(tls_ca), "", 0, 0, 0, NULL, 0,
      "PEM file of the CA of the daemons' certificates: talk TLS (empty: plaintext)"},
     ST_CLIENT_FIELD_TLS_CA,
     SC_PARAM(tls_ca),
     SC_CLI_EMPTY,
     NULL},
    {{"tls_cert", CFG_STRING, SC_OFF(tls_cert), "", 0, 0, 0, NULL, 0,
      "PEM file of a client certificate, for daemons that ask for one (needs --tls-ca)"},
     ST_CLIENT_FIELD_TLS_CERT,
     SC_PARAM(tls_cert),
     SC_CLI_EMPTY,
     NULL},
    {{"tls_key", CFG_STRING, SC_OFF(tls_key), "", 0, 0, 0, NULL, 0,
      "PEM file of --tls-cert's private key"},
     ST_CLIENT_FIELD_TLS_KEY,
     SC_PARAM(tls_key),
     SC_CLI_EMPTY,
     NULL},
    {{"etcd", CFG_STRING, SC_OFF(etcd), "", 0, 0, 0, NULL, 0,
      "etcd endpoints (http://host:port,...): find the cluster's members there, in place of "
      "--nodes"},
     ST_CLIENT_FIELD_ETCD,
     SC_PARAM(etcd),
     SC_CLI_EMPTY,
     NULL},
    {{"etcd_prefix", CFG_STRING, SC_OFF(etcd_prefix), "/strata/", 0, 0, 0, NULL, 0,
      "the cluster's key prefix in etcd (its daemons' etcd_prefix)"},
     ST_CLIENT_FIELD_ETCD_PREFIX,
     SC_PARAM(etcd_prefix),
     SC_CLI_EMPTY,
     NULL},
};
#define SC_N_OPTIONS (sizeof(sc_option_table) / sizeof(sc_option_table[0]))
const size_t sc_n_options = SC_N_OPTIONS;

/* The table's keys as the config file reads them. */
static void sc_file_table(cfg_table_t *t, cfg_option_t keys[SC_N_OPTIONS])
{
    for (size_t i = 0; i < SC_N_OPTIONS; i++) {
        keys[i] = sc_option_table[i].key;
    }
    *t = (cfg_table_t){"strata", "libstrata client settings", NULL, keys, SC_N_OPTIONS};
}

/* Sets the enum member *m from the parameter v, which must name one of the row's values. */
static st_status_t sc_option_enum(const sc_option_t *row, const char *v, int *m)
{
    const char *const *names = row->key.enum_names;
    char expected[128] = "";
    size_t n = 0;

    v = v != NULL ? v : "";
    for (; names[n] != NULL; n++) {
        if (strcmp(v, names[n]) == 0) {
            *m = (int)n;
            return ST_OK;
        }
    }
    for (size_t i = 0; i < n; i++) {
        size_t len = strlen(expected);

        snprintf(expected + len, sizeof(expected) - len, "%s%s",
                 i == 0       ? ""
                 : i + 1 == n ? " or "
                              : ", ",
                 names[i]);
    }
    return sc_error(ST_ERR_INVALID, "%s '%s': expected %s", row->key.name, v, expected);
}

/* Sets the member of row in *o from its field of params. */
static st_status_t sc_option_param(const sc_option_t *row, const st_client_params_t *params,
                                   sc_options_t *o)
{
    const char *p = (const char *)params + row->param;
    void *m = (char *)o + row->key.offset;

    switch (row->key.type) {
    case CFG_STRING: {
        const char *v = *(const char *const *)p;
        char *copy;

        if (v == NULL || (v[0] == '\0' && (row->flags & SC_OPT_EMPTY_UNSET))) {
            return ST_OK;
        }
        copy = strdup(v);
        if (copy == NULL) {
            return ST_ERR_NOMEM;
        }
        free(*(char **)m);
        *(char **)m = copy;
        return ST_OK;
    }
    case CFG_ENUM: return sc_option_enum(row, *(const char *const *)p, m);
    case CFG_BOOL: *(int *)m = *(const int *)p != 0; return ST_OK;
    default: { /* int and duration parameters are uint32_t */
        uint32_t v = *(const uint32_t *)p;

        if ((row->flags & SC_OPT_CHECK_PARAM) && (v < row->key.min || v > row->key.max)) {
            return sc_error(ST_ERR_INVALID, "%s %u: expected %lld to %lld", row->key.name, v,
                            (long long)row->key.min, (long long)row->key.max);
        }
        if (row->key.type == CFG_INT) {
            *(int64_t *)m = v;
        } else {
            *(uint64_t *)m = v;
        }
        return ST_OK;
    }
    }
}

st_status_t sc_options_load(const st_client_params_t *params, sc_options_t *o)
{
    cfg_option_t keys[SC_N_OPTIONS];
    cfg_table_t t;
    char err[320];
    st_status_t status;

    sc_file_table(&t, keys);
    memset(o, 0, sizeof(*o));
    status = cfg_defaults(&t, o);
    if (status == ST_OK && (params->field_mask & ST_CLIENT_FIELD_CONFIG_FILE)) {
        status = cfg_load_file(&t, o, params->config_file, err, sizeof(err));
        if (status != ST_OK) {
            sc_error(status, "%s", err);
        }
    }
    for (size_t i = 0; i < SC_N_OPTIONS && status == ST_OK; i++) {
        if (params->field_mask & sc_option_table[i].field) {
            status = sc_option_param(&sc_option_table[i], params, o);
        }
    }
    if (status != ST_OK) {
        cfg_free(&t, o);
    }
    return status;
}

void sc_options_free(sc_options_t *o)
{
    cfg_option_t keys[SC_N_OPTIONS];
    cfg_table_t t;

    sc_file_table(&t, keys);
    cfg_free(&t, o);
}

size_t sc_options_flags(cfg_option_t *out, size_t conn_offset)
{
    size_t n = 0;

    for (size_t i = 0; i < SC_N_OPTIONS; i++) {
        const sc_option_t *row = &sc_option_table[i];

        if (row->flags & SC_OPT_CLI) {
            out[n] = row->key;
            out[n].offset += conn_offset;
            if (row->cli_defval != NULL) {
                out[n].defval = row->cli_defval;
            }
            n++;
        }
    }
    return n;
}

void sc_options_params(const sc_options_t *o, st_client_params_t *params)
{
    for (size_t i = 0; i < SC_N_OPTIONS; i++) {
        const sc_option_t *row = &sc_option_table[i];
        const char *m = (const char *)o + row->key.offset;
        char *p = (char *)params + row->param;

        if (!(row->flags & SC_OPT_CLI)) {
            continue;
        }
        params->field_mask |= row->field;
        switch (row->key.type) {
        case CFG_STRING: *(const char **)p = *(char *const *)m; break;
        case CFG_ENUM: *(const char **)p = row->key.enum_names[*(const int *)m]; break;
        case CFG_BOOL: *(int *)p = *(const int *)m; break;
        case CFG_INT: *(uint32_t *)p = (uint32_t) * (const int64_t *)m; break;
        default: *(uint32_t *)p = (uint32_t) * (const uint64_t *)m; break;
        }
    }
}
