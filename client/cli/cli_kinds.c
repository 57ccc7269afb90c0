/*
 * cli_kinds.c - `strata metrics`: each node's hits and misses per object kind
 * (docs/observability.md, "Per object kind"), from the per-kind counters of
 * its Stats (get_hits_<kind>, get_hits_ssd_<kind>, get_misses_<kind>,
 * lookup_block_hits_<kind>, lookup_block_misses_<kind>; docs/protocol.md).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <grpc/status.h>

#include "cli.h"
#include "srpc.h"
#include "strata.pb-c.h"

/* The per-kind counters of one node's Stats (docs/protocol.md, "Stats"). */
typedef struct cli_kind_counts {
    uint64_t hits[5], ssd[5], misses[5], block_hits[5], block_misses[5];
} cli_kind_counts_t;

static const char *const cli_stat_kinds[5] = {"kv", "idx", "kda", "session", "vis"};

/* Takes counter k = v into kc when it is one of the per-kind ones. */
static void cli_kind_take(cli_kind_counts_t *kc, const char *k, uint64_t v)
{
    static const char *const pre[5] = {"get_hits_", "get_hits_ssd_", "get_misses_",
                                       "lookup_block_hits_", "lookup_block_misses_"};
    uint64_t *col[5] = {kc->hits, kc->ssd, kc->misses, kc->block_hits, kc->block_misses};

    for (int p = 4; p >= 0; p--) { /* get_hits_ssd_ before get_hits_ */
        size_t n = strlen(pre[p]);

        if (strncmp(k, pre[p], n) != 0) {
            continue;
        }
        for (int i = 0; i < 5; i++) {
            if (strcmp(k + n, cli_stat_kinds[i]) == 0) {
                col[p][i] = v;
                return;
            }
        }
    }
}

/* One line a kind under the node's name; lookup blocks for KV and VIS. */
static void cli_kind_print(const cli_kind_counts_t *kc)
{
    for (int i = 0; i < 5; i++) {
        uint64_t gets = kc->hits[i] + kc->misses[i];

        printf("  %-8s gets=%" PRIu64 " hits=%" PRIu64 " from_ssd=%" PRIu64 " misses=%" PRIu64
               " hit_rate=%.1f%%",
               cli_stat_kinds[i], gets, kc->hits[i], kc->ssd[i], kc->misses[i],
               gets ? 100.0 * (double)kc->hits[i] / (double)gets : 0.0);
        if (i == 0 || i == 4) {
            printf(" lookup_blocks=%" PRIu64 " block_hits=%" PRIu64,
                   kc->block_hits[i] + kc->block_misses[i], kc->block_hits[i]);
        }
        printf("\n");
    }
}

/* One node's block: its name, then a line a kind; 1 when it did not answer. */
static int cli_kinds_node(const cli_conf_t *cf, const srpc_channel_config_t *tls, const char *t)
{
    srpc_channel_config_t cc = *tls;
    Strata__V1__StatsRequest req = STRATA__V1__STATS_REQUEST__INIT;
    Strata__V1__StatsResponse *resp = NULL;
    srpc_channel_t *ch = NULL;
    srpc_error_t err;
    cli_kind_counts_t kc;

    cc.token = cf->conn.token[0] ? cf->conn.token : NULL;
    if (srpc_channel_open(t, &cc, &ch) != ST_OK ||
        srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_STATS], &req.base, (int)cf->conn.timeout_ms,
                  (ProtobufCMessage **)&resp, &err) != ST_OK) {
        int refused = ch != NULL && (err.grpc_code == GRPC_STATUS_PERMISSION_DENIED ||
                                     err.grpc_code == GRPC_STATUS_UNAUTHENTICATED);

        printf("%s %s %s\n", t, refused ? "REFUSED" : "DOWN",
               ch ? err.message : "cannot open channel");
        srpc_channel_close(ch);
        return 1;
    }
    memset(&kc, 0, sizeof(kc));
    for (size_t i = 0; i < resp->n_counters; i++) {
        cli_kind_take(&kc, resp->counters[i]->key, resp->counters[i]->value);
    }
    printf("%s UP\n", t);
    cli_kind_print(&kc);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    srpc_channel_close(ch);
    return 0;
}

int cli_kinds_cmd(const cli_conf_t *cf, int argc, char **argv)
{
    char *list = strdup(cf->conn.nodes), *save = NULL;
    char *pem[3];
    srpc_channel_config_t tls = {0};
    int rc = 0;

    (void)argc;
    (void)argv;
    if (list == NULL) {
        return 1;
    }
    if (cli_tls_load(cf, pem, &tls) != ST_OK) {
        free(list);
        return 1;
    }
    for (char *t = strtok_r(list, ", ", &save); t != NULL; t = strtok_r(NULL, ", ", &save)) {
        rc |= cli_kinds_node(cf, &tls, t);
    }
    cli_tls_free(pem);
    free(list);
    return rc;
}
