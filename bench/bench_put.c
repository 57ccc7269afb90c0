/*
 * bench_put.c - put throughput through libstrata's one-sided data plane
 * (Reserve -> one put per object -> flush -> Commit) into one stratad, for
 * objects of 64 KiB, 256 KiB and 1 MiB, over one transport: what the write
 * keys per reserved extent cost (docs/performance.md, "Write keys").
 *
 * Each round puts one batch of fresh keys (a new chain) totalling
 * --batch-mib, then deletes them, so the arena's extents are reused round
 * after round, as a cache at its limit does. Prints GB/s (1e9 bytes/s) and
 * objects/s of the puts: median, min, max and MAD over rounds.
 *
 * usage: bench_put STRATAD [--transport ucx|libfabric:PROVIDER] [--rounds N]
 *                  [--batch-mib B]
 * (libfabric:tcp;ofi_rxm is written with the ';' as it is, quoted)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cluster.h"
#include "strata/strata.h"

static void bp_fill(uint8_t *p, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ULL | 1;

    for (size_t i = 0; i + 8 <= len; i += 8) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(p + i, &x, 8);
    }
}

int main(int argc, char **argv)
{
    const char *stratad, *spec = "ucx";
    size_t rounds = 15, batch_mib = 64;
    static const size_t sizes[] = {64u << 10, 256u << 10, 1u << 20};
    char args[256], client_spec[128];
    tc_cluster_t cl;

    if (argc < 2) {
        fprintf(stderr, "usage: %s STRATAD [--transport SPEC] [--rounds N] [--batch-mib B]\n",
                argv[0]);
        return 2;
    }
    stratad = argv[1];
    const bench_opt_t opts[] = {{"--transport", BENCH_OPT_STR, &spec},
                                {"--rounds", BENCH_OPT_SIZE, &rounds},
                                {"--batch-mib", BENCH_OPT_SIZE, &batch_mib}};
    int bad = bench_opt_pairs(argc, argv, 2, opts, sizeof(opts) / sizeof(opts[0]));

    if (bad != 0) {
        fprintf(stderr, "bench_put: unknown option %s\n", argv[bad]);
        return 2;
    }
    if (rounds == 0 || batch_mib == 0) {
        fprintf(stderr, "bench_put: --rounds and --batch-mib must be positive\n");
        return 2;
    }
    snprintf(client_spec, sizeof(client_spec), "%s", spec);
    if (strncmp(spec, "libfabric:", 10) == 0) {
        snprintf(args, sizeof(args),
                 "--transport libfabric --fabric-provider %s --memory-limit 1G --chunk-bytes 64M "
                 "--max-object 4M",
                 spec + 10);
    } else {
        snprintf(args, sizeof(args),
                 "--transport %s --memory-limit 1G --chunk-bytes 64M --max-object 4M", spec);
    }
    if (tc_start(&cl, stratad, 1, args) != 0) {
        fprintf(stderr, "bench_put: cannot start %s\n", stratad);
        return 1;
    }
    printf("bench_put: transport=%s rounds=%zu batch=%zu MiB\n", spec, rounds, batch_mib);
    printf("%-8s %8s %10s %10s %10s %10s %12s\n", "object", "objects", "GB/s med", "min", "max",
           "mad", "objects/s");
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        size_t len = sizes[si], n = (batch_mib << 20) / len;
        uint8_t *src = malloc(n * len);
        st_put_op_t *puts = calloc(n, sizeof(*puts));
        uint32_t *tok = NULL;
        st_hash_t *chain = calloc(n, sizeof(*chain));
        double *gbs = calloc(rounds, sizeof(*gbs));
        st_client_params_t p = {0};
        st_client_t *c = NULL;
        bench_stats_t s;
        size_t bt;

        p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_TIMEOUT;
        p.nodes = cl.node[0].addr;
        p.transport = client_spec;
        p.timeout_ms = 20000;
        if (!src || !puts || !chain || !gbs || st_client_connect(&p, &c) != ST_OK) {
            fprintf(stderr, "bench_put: set-up failed: %s\n", st_client_last_error());
            return 1;
        }
        bt = st_client_block_tokens(c);
        tok = malloc(sizeof(*tok) * bt * n);
        if (tok == NULL || st_client_register(c, src, n * len) != ST_OK) {
            fprintf(stderr, "bench_put: cannot register %zu bytes\n", n * len);
            return 1;
        }
        bp_fill(src, n * len, len);
        for (size_t r = 0; r < rounds + 1; r++) { /* round 0 warms up */
            st_handle_t *h;
            size_t nb = 0;
            uint64_t t0;

            for (size_t i = 0; i < bt * n; i++) {
                tok[i] = (uint32_t)(i * 2654435761u) ^ (uint32_t)(r * 7919 + si * 104729);
            }
            if (st_client_hash(c, tok, bt * n, NULL, 0, chain, n, &nb) != ST_OK || nb != n) {
                fprintf(stderr, "bench_put: hashing failed\n");
                return 1;
            }
            for (size_t i = 0; i < n; i++) {
                puts[i] =
                    (st_put_op_t){.block = i, .kind = ST_KIND_KV, .src = src + i * len, .len = len};
            }
            t0 = bench_now_ns();
            if (st_client_put(c, chain, n, puts, n, 0, &h) != ST_OK ||
                st_handle_wait(h, -1) != ST_OK) {
                fprintf(stderr, "bench_put: put failed: %s\n", st_client_last_error());
                return 1;
            }
            if (r > 0) {
                gbs[r - 1] = (double)(n * len) / (double)(bench_now_ns() - t0);
            }
            st_handle_release(h);
            for (size_t i = 0; i < n; i++) {
                if (puts[i].status != ST_OK) {
                    fprintf(stderr, "bench_put: put %zu: %s\n", i, st_strerror(puts[i].status));
                    return 1;
                }
            }
            if (st_client_delete(c, chain, n, 1u << ST_KIND_KV, 1) != ST_OK) {
                fprintf(stderr, "bench_put: delete failed: %s\n", st_client_last_error());
                return 1;
            }
        }
        bench_stats(gbs, rounds, &s);
        printf("%-8zu %8zu %10.2f %10.2f %10.2f %10.2f %12.0f\n", len >> 10 << 10, n, s.median,
               s.min, s.max, s.mad, s.median * 1e9 / (double)len);
        st_client_deregister(c, src);
        st_client_close(c);
        free(src), free(puts), free(tok), free(chain), free(gbs);
    }
    tc_stop_all(&cl);
    return 0;
}
