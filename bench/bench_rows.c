/*
 * bench_rows.c - what row verification costs a row read (docs/transport.md
 * "Row verification"): one stratad over UCX on loopback holds OBJECTS KV
 * objects of 64 rows of 656 bytes (DeepSeek-V3.2's latent-KV row), put with
 * row_bytes; a batch reads one row of each of BATCH objects, as the engine's
 * decode does (about 2048 scattered rows per layer, mostly one per block),
 * every location in the lease cache. In the same run, rounds rotating the
 * order:
 *
 *   verified    libstrata as it is: each row checked against its row sum;
 *   unverified  the same reads accepted as they land under the lease, with
 *               no row sums asked for or checked (the behaviour before row
 *               verification: sc_dp_bench_rows_unverified());
 *   group G     verified reads of G adjacent rows per op (one get of G x 656
 *               bytes, G rows hashed): what a one-row read would cost with
 *               row groups of G rows (G = 2, 4, 8);
 *   hash        pr_rowsum() of BATCH rows alone, in this process, where the
 *               previous batch landed them (as warm as the cache left them).
 *
 * Prints microseconds per batch (median, MAD) and ns per row, and the
 * verified / unverified ratio, order-balanced.
 *
 * usage: bench_rows STRATAD [--rounds N] [--batch B] [--objects K]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "client_internal.h"
#include "cluster.h"
#include "rowsum.h"
#include "strata/strata.h"

enum { RB = 656, ROWS = 64, OBJ = RB * ROWS, MAXG = 8 };

typedef struct br {
    st_client_t *c;
    st_hash_t *chain;
    size_t n_obj, batch;
    st_get_op_t *ops;
    uint32_t *rows; /* batch x MAXG */
    uint8_t *dst;   /* batch x MAXG x RB, registered */
    uint64_t rng;
} br_t;

static uint64_t br_next(br_t *b)
{
    b->rng ^= b->rng << 13, b->rng ^= b->rng >> 7, b->rng ^= b->rng << 17;
    return b->rng;
}

/* One batch: one op of g adjacent rows for each of batch random objects.
 * Returns the ns it took; every op must hit. */
static double br_batch(br_t *b, uint32_t g)
{
    st_handle_t *h;
    uint64_t t0;

    for (size_t i = 0; i < b->batch; i++) {
        uint32_t r0 = (uint32_t)(br_next(b) % (ROWS / g)) * g;

        for (uint32_t x = 0; x < g; x++) {
            b->rows[i * MAXG + x] = r0 + x;
        }
        b->ops[i] = (st_get_op_t){.block = br_next(b) % b->n_obj,
                                  .kind = ST_KIND_KV,
                                  .dst = b->dst + i * MAXG * RB,
                                  .dst_len = (size_t)g * RB,
                                  .row_bytes = RB,
                                  .rows = &b->rows[i * MAXG],
                                  .n_rows = g};
    }
    t0 = bench_now_ns();
    if (st_client_get(b->c, b->chain, b->n_obj, b->ops, b->batch, &h) != ST_OK ||
        st_handle_wait(h, -1) != ST_OK) {
        fprintf(stderr, "bench_rows: get: %s\n", st_client_last_error());
        exit(1);
    }
    t0 = bench_now_ns() - t0;
    st_handle_release(h);
    for (size_t i = 0; i < b->batch; i++) {
        if (b->ops[i].status != ST_OK) {
            fprintf(stderr, "bench_rows: a row read missed (%s)\n",
                    st_status_name(b->ops[i].status));
            exit(1);
        }
    }
    return (double)t0;
}

static double br_hash(br_t *b)
{
    uint64_t t0 = bench_now_ns(), acc = 0;

    for (size_t i = 0; i < b->batch; i++) {
        acc += pr_rowsum(b->dst + i * MAXG * RB, RB); /* where the last batch landed */
    }
    t0 = bench_now_ns() - t0;
    if (acc == 42) {
        printf(" ");
    }
    return (double)t0;
}

int main(int argc, char **argv)
{
    static const char *const names[] = {"verified", "unverified", "group 2",
                                        "group 4",  "group 8",    "hash"};
    enum { NP = 6 };
    size_t rounds = 20, n_obj = 4096;
    tc_cluster_t cl;
    st_client_params_t p = {0};
    br_t b = {.batch = 2048, .rng = 0x9e3779b97f4a7c15ull};
    uint8_t *src;
    double *s[NP];
    size_t bt, nb = 0;
    uint32_t *tok;

    if (argc < 2) {
        fprintf(stderr, "usage: %s STRATAD [--rounds N] [--batch B] [--objects K]\n", argv[0]);
        return 2;
    }
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rounds") == 0) {
            rounds = strtoull(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--batch") == 0) {
            b.batch = strtoull(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--objects") == 0) {
            n_obj = strtoull(argv[i + 1], NULL, 10);
        }
    }
    rounds += rounds % 2;
    if (tc_start(&cl, argv[1], 1,
                 "--transport ucx --memory-limit 1G --chunk-bytes 64M --lease 60s "
                 "--max-lease 60s") != 0) {
        fprintf(stderr, "bench_rows: cannot start stratad\n");
        return 1;
    }
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_TIMEOUT;
    p.nodes = cl.node[0].addr;
    p.transport = "ucx";
    p.timeout_ms = 30000;
    if (st_client_connect(&p, &b.c) != ST_OK) {
        fprintf(stderr, "bench_rows: connect: %s\n", st_client_last_error());
        return 1;
    }
    b.n_obj = n_obj;
    bt = st_client_block_tokens(b.c);
    tok = malloc(sizeof(*tok) * bt * n_obj);
    b.chain = malloc(sizeof(*b.chain) * n_obj);
    src = malloc(OBJ);
    b.ops = calloc(b.batch, sizeof(*b.ops));
    b.rows = calloc(b.batch * MAXG, sizeof(*b.rows));
    b.dst = malloc(b.batch * MAXG * RB);
    for (size_t i = 0; i < bt * n_obj; i++) {
        tok[i] = (uint32_t)(i * 2654435761u);
    }
    for (size_t i = 0; i < OBJ; i++) {
        src[i] = (uint8_t)(i * 131u);
    }
    if (st_client_hash(b.c, tok, bt * n_obj, NULL, 0, b.chain, n_obj, &nb) != ST_OK ||
        st_client_register(b.c, b.dst, b.batch * MAXG * RB) != ST_OK) {
        fprintf(stderr, "bench_rows: %s\n", st_client_last_error());
        return 1;
    }
    for (size_t i = 0; i < n_obj; i += 256) {
        st_put_op_t ops[256];
        st_handle_t *h;
        size_t n = n_obj - i < 256 ? n_obj - i : 256;

        for (size_t j = 0; j < n; j++) {
            ops[j] = (st_put_op_t){
                .block = i + j, .kind = ST_KIND_KV, .src = src, .len = OBJ, .row_bytes = RB};
        }
        if (st_client_put(b.c, b.chain, n_obj, ops, n, 0, &h) != ST_OK ||
            st_handle_wait(h, -1) != ST_OK) {
            fprintf(stderr, "bench_rows: put: %s\n", st_client_last_error());
            return 1;
        }
        st_handle_release(h);
    }
    for (int k = 0; k < NP; k++) {
        s[k] = calloc(rounds, sizeof(double));
    }
    /* Warm: every object located and in the lease cache, both ways. */
    for (int w = 0; w < 4; w++) {
        sc_dp_bench_rows_unverified(b.c, w % 2);
        (void)br_batch(&b, 1);
    }
    for (size_t r = 0; r < rounds; r++) {
        for (int k0 = 0; k0 < NP; k0++) {
            int k = (int)((k0 + (int)r) % NP);

            /* bench_balanced wants verified and unverified in both orders. */
            if (k0 == 0) {
                k = r % 2 ? 1 : 0;
            } else if (k0 == 1) {
                k = r % 2 ? 0 : 1;
            } else {
                k = 2 + (int)((k0 - 2 + (int)r) % (NP - 2));
            }
            sc_dp_bench_rows_unverified(b.c, k == 1);
            s[k][r] = k == NP - 1 ? br_hash(&b) : br_batch(&b, k < 2 ? 1 : 1u << (k - 1));
        }
    }
    sc_dp_bench_rows_unverified(b.c, 0);
    {
        double *ratio = calloc(rounds / 2 + 1, sizeof(double));
        size_t nr = bench_balanced(s[0], s[1], rounds, ratio);
        bench_stats_t st;

        printf("bench_rows: %zu objects of %d rows x %d bytes, %zu one-op-per-object reads a "
               "batch, %zu rounds\n",
               n_obj, ROWS, RB, b.batch, rounds);
        for (int k = 0; k < NP; k++) {
            bench_stats(s[k], rounds, &st);
            printf("  %-10s  %9.1f us/batch (MAD %6.1f)  %7.1f ns/op\n", names[k], st.median / 1e3,
                   st.mad / 1e3, st.median / (double)b.batch);
        }
        bench_stats(ratio, nr, &st);
        printf("  verified / unverified (order-balanced): %.3f (MAD %.3f)\n", st.median, st.mad);
        free(ratio);
    }
    if (sc_dp_rows_refused(b.c) != 0) {
        fprintf(stderr, "bench_rows: %llu row reads refused\n",
                (unsigned long long)sc_dp_rows_refused(b.c));
        return 1;
    }
    st_client_close(b.c);
    tc_stop_all(&cl);
    return 0;
}
