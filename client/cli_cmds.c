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
#include "srpc.h"
#include "strata.pb-c.h"

#define CLI_OFF(m) offsetof(cli_conf_t, m)

static const char *const cli_kind_names[] = {"kv", "idx", "kda", NULL};

/* Hashes the command's tokens into the client's namespace. */
static int cli_chain(const cli_conf_t *cf, st_client_t *c, st_hash_t **chain_p, size_t *nb_p,
                     size_t *n_tokens_p)
{
    uint32_t *tok = NULL;
    size_t n = 0, nb = 0;
    st_hash_t *chain;

    if (cli_read_tokens(cf, &tok, &n) != ST_OK) {
        return 2;
    }
    chain = malloc(sizeof(*chain) * (n / 16 + 1));
    if (chain == NULL || st_client_hash(c, tok, n, NULL, 0, chain, n / 16 + 1, &nb) != ST_OK) {
        fprintf(stderr, "strata: cannot hash the tokens: %s\n", st_client_last_error());
        free(tok);
        free(chain);
        return 1;
    }
    free(tok);
    *chain_p = chain;
    *nb_p = nb;
    if (n_tokens_p != NULL) {
        *n_tokens_p = n;
    }
    return 0;
}

/* -------------------------------------------------------------- status -- */

static int cli_status(const cli_conf_t *cf, int argc, char **argv)
{
    char *list = strdup(cf->nodes), *save = NULL;
    char *pem[3];
    srpc_channel_config_t tls = {0};
    int rc = 0;

    if (list == NULL) {
        return 1;
    }
    if (cli_tls_load(cf, pem, &tls) != ST_OK) {
        free(list);
        return 1;
    }
    printf("%-22s %-8s %-10s %10s %12s %14s %10s\n", "node", "state", "version", "uptime_s",
           "objects", "memory_MiB", "hit_rate");
    for (char *t = strtok_r(list, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        srpc_channel_config_t cc = {.token = cf->token[0] ? cf->token : NULL,
                                    .tls_ca_pem = tls.tls_ca_pem,
                                    .tls_cert_pem = tls.tls_cert_pem,
                                    .tls_key_pem = tls.tls_key_pem};
        Strata__V1__StatsRequest req = STRATA__V1__STATS_REQUEST__INIT;
        Strata__V1__StatsResponse *resp = NULL;
        srpc_channel_t *ch = NULL;
        srpc_error_t err;
        uint64_t objects = 0, used = 0, limit = 0, lt = 0, mt = 0;

        if (srpc_channel_open(t, &cc, &ch) != ST_OK ||
            srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_STATS], &req.base, (int)cf->timeout_ms,
                      (ProtobufCMessage **)&resp, &err) != ST_OK) {
            /* Up, but it will not tell this token (a tenant's token asks per namespace). */
            int refused = ch != NULL && (err.grpc_code == GRPC_STATUS_PERMISSION_DENIED ||
                                         err.grpc_code == GRPC_STATUS_UNAUTHENTICATED);

            printf("%-22s %-8s %s\n", t, refused ? "REFUSED" : "DOWN",
                   ch ? err.message : "cannot open channel");
            srpc_channel_close(ch);
            rc = 1;
            continue;
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
            }
        }
        printf("%-22s %-8s %-10s %10.1f %12" PRIu64 " %6.1f/%-7.1f %9.1f%%\n", t, "UP",
               resp->version, (double)resp->uptime_ms / 1000, objects, (double)used / (1 << 20),
               (double)limit / (1 << 20), lt ? 100.0 * (double)mt / (double)lt : 0.0);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        srpc_channel_close(ch);
    }
    cli_tls_free(pem);
    free(list);
    return rc;
}

/* ---------------------------------------------------------- hash/lookup -- */

static int cli_hash(const cli_conf_t *cf, int argc, char **argv)
{
    st_client_t *c;
    st_hash_t *chain;
    size_t nb;
    char hex[33];
    int rc;

    if (cli_connect(cf, &c) != ST_OK) {
        return 1;
    }
    rc = cli_chain(cf, c, &chain, &nb, NULL);
    if (rc == 0) {
        for (size_t i = 0; i < nb; i++) {
            st_hash_to_hex(&chain[i], hex);
            printf("%zu %s\n", i, hex);
        }
        free(chain);
    }
    st_client_close(c);
    return rc;
}

static int cli_lookup(const cli_conf_t *cf, int argc, char **argv)
{
    st_client_t *c;
    st_hash_t *chain;
    st_lookup_result_t r;
    size_t nb, n;
    uint32_t bt;
    int rc;

    if (cli_connect(cf, &c) != ST_OK) {
        return 1;
    }
    rc = cli_chain(cf, c, &chain, &nb, &n);
    if (rc == 0) {
        bt = st_client_block_tokens(c);
        if (st_client_lookup(c, chain, nb, (uint32_t)cf->layers, &r) != ST_OK) {
            fprintf(stderr, "strata lookup: %s\n", st_client_last_error());
            rc = 1;
        } else {
            printf("tokens=%zu blocks=%zu matched_blocks=%" PRIu64 " matched_tokens=%" PRIu64
                   " resumable_tokens=%" PRIu64 " nodes_down=%u\n",
                   n, nb, r.matched_blocks, r.matched_blocks * bt, r.resumable_blocks * bt,
                   r.nodes_down);
        }
        free(chain);
    }
    st_client_close(c);
    return rc;
}

/* ---------------------------------------------------------- put/get/del -- */

static int cli_put(const cli_conf_t *cf, int argc, char **argv)
{
    st_client_t *c;
    st_hash_t *chain;
    st_handle_t *h;
    st_put_op_t op = {0};
    size_t nb;
    uint8_t *data = NULL;
    size_t len = 0;
    int rc;

    if (cf->file[0] != '\0') {
        FILE *f = fopen(cf->file, "rb");
        long l;

        if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (l = ftell(f)) <= 0) {
            fprintf(stderr, "strata put: cannot read --file %s (missing or empty)\n", cf->file);
            if (f) {
                fclose(f);
            }
            return 2;
        }
        rewind(f);
        len = (size_t)l;
        data = malloc(len);
        if (data == NULL || fread(data, 1, len, f) != len) {
            fprintf(stderr, "strata put: cannot read --file %s\n", cf->file);
            fclose(f);
            free(data);
            return 1;
        }
        fclose(f);
    } else if (cf->fill > 0) {
        len = (size_t)cf->fill;
        data = malloc(len);
        if (data == NULL) {
            return 1;
        }
        for (size_t i = 0; i < len; i++) {
            data[i] = (uint8_t)(i * 131 + (size_t)cf->block);
        }
    } else {
        fprintf(stderr, "strata put: give the object's bytes with --file or --fill N\n");
        return 2;
    }
    if (cli_connect(cf, &c) != ST_OK) {
        free(data);
        return 1;
    }
    rc = cli_chain(cf, c, &chain, &nb, NULL);
    if (rc == 0) {
        op.block = (uint64_t)cf->block;
        op.kind = (uint8_t)cf->kind;
        op.layer = (uint16_t)cf->layer;
        op.src = data;
        op.len = len;
        if (st_client_put(c, chain, nb, &op, 1, cf->durable ? ST_PUT_DURABLE : 0, &h) != ST_OK) {
            fprintf(stderr, "strata put: %s\n", st_client_last_error());
            rc = 2;
        } else {
            uint32_t written;

            st_handle_wait(h, -1);
            written = st_handle_replicas_written(h, 0);
            st_handle_release(h);
            if (op.status == ST_ERR_PARTIAL) {
                fprintf(stderr,
                        "strata put: %s: durable on %u of %u replicas, --write-quorum is %u\n",
                        st_strerror(op.status), written, st_client_replicas(c),
                        st_client_write_quorum(c));
                rc = CLI_EXIT_PARTIAL;
            } else if (op.status != ST_OK) {
                fprintf(stderr, "strata put: %s\n", st_strerror(op.status));
                rc = 1;
            } else {
                printf("stored block=%lld kind=%s layer=%lld bytes=%zu checksum=%016" PRIx64
                       " replicas=%u%s\n",
                       (long long)cf->block, cli_kind_names[cf->kind], (long long)cf->layer, len,
                       (uint64_t)XXH3_64bits(data, len), written,
                       cf->durable && op.kind == ST_KIND_KDA ? " durable" : "");
            }
        }
        free(chain);
    }
    free(data);
    st_client_close(c);
    return rc;
}

static int cli_get(const cli_conf_t *cf, int argc, char **argv)
{
    st_client_t *c;
    st_hash_t *chain;
    st_handle_t *h;
    st_get_op_t op = {0};
    size_t nb, cap = 64u << 20;
    uint8_t *buf = malloc(cap);
    int rc;

    if (buf == NULL) {
        return 1;
    }
    if (cli_connect(cf, &c) != ST_OK) {
        free(buf);
        return 1;
    }
    rc = cli_chain(cf, c, &chain, &nb, NULL);
    if (rc == 0) {
        op.block = (uint64_t)cf->block;
        op.kind = (uint8_t)cf->kind;
        op.layer = (uint16_t)cf->layer;
        op.dst = buf;
        op.dst_len = cap;
        if (st_client_get(c, chain, nb, &op, 1, &h) != ST_OK) {
            fprintf(stderr, "strata get: %s\n", st_client_last_error());
            rc = 2;
        } else {
            st_handle_wait(h, -1);
            st_handle_release(h);
            if (op.status == ST_ERR_NOT_FOUND) {
                fprintf(stderr, "strata get: not cached\n");
                rc = 1;
            } else if (op.status != ST_OK) {
                fprintf(stderr, "strata get: %s\n", st_strerror(op.status));
                rc = 1;
            } else if (cf->out[0] != '\0') {
                FILE *f = fopen(cf->out, "wb");

                if (f == NULL || fwrite(buf, 1, op.length, f) != op.length) {
                    fprintf(stderr, "strata get: cannot write --out %s\n", cf->out);
                    rc = 1;
                }
                if (f != NULL) {
                    fclose(f);
                }
            }
            if (rc == 0) {
                printf("block=%lld kind=%s layer=%lld bytes=%zu checksum=%016" PRIx64 "\n",
                       (long long)cf->block, cli_kind_names[cf->kind], (long long)cf->layer,
                       op.length, (uint64_t)XXH3_64bits(buf, op.length));
            }
        }
        free(chain);
    }
    free(buf);
    st_client_close(c);
    return rc;
}

static int cli_delete(const cli_conf_t *cf, int argc, char **argv)
{
    st_client_t *c;
    st_hash_t *chain;
    size_t nb;
    unsigned kinds = 0;
    int rc;

    for (int k = 0; cli_kind_names[k] != NULL; k++) {
        if (strstr(cf->kinds, cli_kind_names[k]) != NULL) {
            kinds |= 1u << k;
        }
    }
    if (kinds == 0) {
        fprintf(stderr, "strata delete: --kinds must name kv, idx and/or kda\n");
        return 2;
    }
    if (cli_connect(cf, &c) != ST_OK) {
        return 1;
    }
    rc = cli_chain(cf, c, &chain, &nb, NULL);
    if (rc == 0) {
        if (st_client_delete(c, chain, nb, kinds, (uint32_t)cf->layers) != ST_OK) {
            fprintf(stderr, "strata delete: %s\n", st_client_last_error());
            rc = 1;
        } else {
            printf("deleted blocks=%zu kinds=%s layers=%lld\n", nb, cf->kinds,
                   (long long)cf->layers);
        }
        free(chain);
    }
    st_client_close(c);
    return rc;
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
        st_hash_t *chain;
        size_t nb;

        rc = cli_chain(cf, c, &chain, &nb, NULL);
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

static const st_cfg_option_t cli_lookup_opts[] = {
    {"layers", ST_CFG_INT, CLI_OFF(layers), "0", 0, 128, 0, NULL, 0,
     "DSA layers whose KV and IDX must all be cached (0: any object counts)"},
};
static const st_cfg_option_t cli_obj_opts[] = {
    {"block", ST_CFG_INT, CLI_OFF(block), "0", 0, INT64_MAX, 0, NULL, 'b',
     "index of the block in the chain"},
    {"kind", ST_CFG_ENUM, CLI_OFF(kind), "kv", 0, 0, 0, cli_kind_names, 'k', "object kind"},
    {"layer", ST_CFG_INT, CLI_OFF(layer), "0", 0, 127, 0, NULL, 0, "DSA layer (KV, IDX)"},
    {"file", ST_CFG_STRING, CLI_OFF(file), "", 0, 0, 0, NULL, 'f',
     "put: the object's bytes come from this file"},
    {"fill", ST_CFG_INT, CLI_OFF(fill), "0", 0, 1 << 30, 0, NULL, 0,
     "put: store this many bytes of a test pattern instead"},
    {"out", ST_CFG_STRING, CLI_OFF(out), "", 0, 0, 0, NULL, 'o',
     "get: write the object's bytes to this file"},
    {"durable", ST_CFG_BOOL, CLI_OFF(durable), "false", 0, 0, 0, NULL, 0,
     "put of a KDA object: succeed only when --write-quorum replicas committed it to disk"},
};
static const st_cfg_option_t cli_delete_opts[] = {
    {"kinds", ST_CFG_STRING, CLI_OFF(kinds), "kv,idx,kda", 0, 0, 0, NULL, 0,
     "object kinds to delete"},
    {"layers", ST_CFG_INT, CLI_OFF(layers), "1", 0, 128, 0, NULL, 0,
     "delete KV and IDX layers 0..layers-1"},
};
static const st_cfg_option_t cli_session_opts[] = {
    {"ttl", ST_CFG_DURATION, CLI_OFF(ttl_ms), "0", 0, 2592000000ll, 0, NULL, 0,
     "open: time to live (0: the daemon's default)"},
    {"durable", ST_CFG_BOOL, CLI_OFF(durable), "false", 0, 0, 0, NULL, 0,
     "open, append: succeed only when --write-quorum replicas committed the record to disk"},
};

static const st_cfg_option_t cli_bench_opts[] = {
    {"sessions", ST_CFG_INT, CLI_OFF(sessions), "4", 1, 10000, 0, NULL, 0,
     "conversations, run one after another"},
    {"turns", ST_CFG_INT, CLI_OFF(turns), "4", 1, 10000, 0, NULL, 0, "turns per conversation"},
    {"prompt_tokens", ST_CFG_INT, CLI_OFF(prompt_tokens), "32768", 64, 1 << 24, 0, NULL, 0,
     "tokens of the first turn (the long context)"},
    {"turn_tokens", ST_CFG_INT, CLI_OFF(turn_tokens), "2048", 1, 1 << 24, 0, NULL, 0,
     "tokens each later turn adds"},
    {"layers", ST_CFG_INT, CLI_OFF(layers), "2", 1, 128, 0, NULL, 0,
     "DSA layers: KV and IDX objects per block"},
    {"kv_bytes", ST_CFG_INT, CLI_OFF(kv_bytes), "41984", 1, 1 << 24, 0, NULL, 0,
     "bytes of one KV object (64 rows x 656 B)"},
    {"idx_bytes", ST_CFG_INT, CLI_OFF(idx_bytes), "8448", 1, 1 << 24, 0, NULL, 0,
     "bytes of one IDX object (64 rows x 132 B)"},
    {"kda_bytes", ST_CFG_INT, CLI_OFF(kda_bytes), "65536", 1, 1 << 26, 0, NULL, 0,
     "bytes of one KDA checkpoint object"},
    {"verify", ST_CFG_INT, CLI_OFF(verify), "64", 0, 1 << 20, 0, NULL, 0,
     "reused blocks per turn read back and compared byte by byte"},
    {"seed", ST_CFG_INT, CLI_OFF(seed), "1", 0, INT64_MAX, 0, NULL, 0,
     "seed of the conversations' tokens (a new seed: new conversations)"},
    {"metrics_listen", ST_CFG_STRING, CLI_OFF(metrics_listen), "", 0, 0, 0, NULL, 0,
     "serve this client's own metrics (strata_client_*) on host:port while running"},
    {"metrics_linger", ST_CFG_DURATION, CLI_OFF(metrics_linger_ms), "0", 0, 3600000, 0, NULL, 0,
     "keep serving them this long after the workload (for a last scrape)"},
    {"durable", ST_CFG_BOOL, CLI_OFF(durable), "false", 0, 0, 0, NULL, 0,
     "KDA puts and session writes succeed only when --write-quorum replicas committed them "
     "to disk (the daemons need data_dir); fewer are counted and exit with 3"},
    {"metrics_tls_cert", ST_CFG_STRING, CLI_OFF(metrics_tls_cert), "", 0, 0, 0, NULL, 0,
     "PEM certificate of the metrics server: HTTPS (empty: HTTP)"},
    {"metrics_tls_key", ST_CFG_STRING, CLI_OFF(metrics_tls_key), "", 0, 0, 0, NULL, 0,
     "PEM private key of --metrics-tls-cert"},
    {"metrics_token_file", ST_CFG_STRING, CLI_OFF(metrics_token_file), "", 0, 0, 0, NULL, 0,
     "file of the bearer token that /metrics and /stats require (empty: none)"},
};

#define CLI_N(a) (sizeof(a) / sizeof((a)[0]))
const cli_command_t cli_commands[] = {
    {"status", "show every node: up or down, version, objects, memory, hit rate", NULL, 0, 0, 0,
     NULL, 0, cli_status},
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
    {"session", "open, append (the tokens' chain), get or close a session",
     "open|append|get|close ID", 2, 2, 1, cli_session_opts, CLI_N(cli_session_opts), cli_session},
    {"bench", "a multi-turn long-context workload: hit rates and timings", NULL, 0, 0, 0,
     cli_bench_opts, CLI_N(cli_bench_opts), cli_bench},
};
const size_t cli_n_commands = CLI_N(cli_commands);
