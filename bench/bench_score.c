/*
 * bench_score.c - near-data scoring (st_client_score, the daemons' Score
 * call) of one DSA layer's history over --nodes daemons on loopback, per
 * call, against its two peers on the same cores:
 *
 *   local  st_cpu_indexer_topk over the same keys already in this process
 *          (what the engine does when it holds the history's IDX);
 *   fetch  st_client_get of every IDX object of the range (one batch, over
 *          the client's transport, into a registered buffer), unpacked into
 *          keys and summaries, then the same local st_cpu_indexer_topk
 *          (what a resume that does not hold the keys must do first).
 *
 * Histories of --blocks blocks of the client's block_tokens (default 15625
 * x 64 = 1M tokens) at --heads x --dim (default 4 x 32, the reference
 * model's idx_heads x idx_dim: 8448-byte IDX objects, 132 B a token), with
 * random keys (or, with --hot P, about P % of the blocks with keys in
 * [-1, 1] and the others 20 times smaller: the locality that lets the
 * summaries' bounds prune); k = --k (default 2048). Each round times the three on each
 * of the context lengths (--blocks and three shorter ones), in alternating
 * order; prints medians and MADs of ms per call, bytes moved per call, the
 * ratios, and the break-even context: where near-data scoring (fit as
 * a + b x tokens) costs less than local scoring plus moving the keys at
 * the streaming rate this run measured (fit as c x tokens).
 *
 * Every near-data answer is checked against the local one (same positions,
 * same scores); a difference fails the run.
 *
 * usage: bench_score STRATAD [--nodes N] [--blocks B] [--rounds R] [--k K]
 *                    [--heads H] [--dim D] [--transport ucx|inline] [--hot P]
 *                    [--row-sums 0|1]
 *
 * --row-sums 1 (the default) writes the objects with row sums of dim floats
 * a row, so that a daemon reads a block's two summary rows alone for its
 * bound; 0 makes it read every object whole.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cluster.h"
#include "strata/kernels.h"
#include "strata/strata.h"

#define BS_SIZES 4

typedef struct bs_run {
    st_client_t *c;
    st_hash_t *chain;
    size_t n_blocks;
    uint32_t bt, heads, dim, k;
    uint64_t hot;      /* percent of blocks whose keys matter (0: every block random) */
    uint64_t row_sums; /* 1: objects written with row sums of dim floats a row */
    float *keys, *sum; /* the history, local */
    float *q, *w;
    size_t obj_floats;
    float *staging;      /* fetched IDX objects (registered) */
    float *fkeys, *fsum; /* unpacked from them */
    st_get_op_t *gets;
    int32_t *idx;
    float *sc;
    uint64_t *pos;
    float *nsc;
} bs_run_t;

static uint64_t bs_x = 0x9e3779b97f4a7c15ull;

static float bs_rnd(void)
{
    bs_x ^= bs_x << 13, bs_x ^= bs_x >> 7, bs_x ^= bs_x << 17;
    return (float)((double)(bs_x >> 11) / (double)(1ull << 53) * 2.0 - 1.0);
}

/* The chain of n blocks of a token stream. */
static st_hash_t *bs_chain(st_client_t *c, size_t n)
{
    size_t nt = n * st_client_block_tokens(c), nb = 0;
    uint32_t *tok = malloc(sizeof(uint32_t) * nt);
    st_hash_t *chain = malloc(sizeof(st_hash_t) * n);

    if (tok == NULL || chain == NULL) {
        return NULL;
    }
    for (size_t i = 0; i < nt; i++) {
        tok[i] = (uint32_t)((i * 2654435761u) % 150000);
    }
    if (st_client_hash(c, tok, nt, NULL, 0, chain, n, &nb) != ST_OK || nb != n) {
        free(chain);
        chain = NULL;
    }
    free(tok);
    return chain;
}

/* Writes the history as IDX objects of layer 0, 1024 a batch. */
static int bs_put(bs_run_t *r)
{
    size_t bf = (size_t)r->bt * r->dim;
    float *obj = malloc(sizeof(float) * r->obj_floats * 1024);
    st_put_op_t *ops = calloc(1024, sizeof(*ops));

    for (size_t b0 = 0; obj != NULL && ops != NULL && b0 < r->n_blocks; b0 += 1024) {
        size_t n = r->n_blocks - b0 < 1024 ? r->n_blocks - b0 : 1024;
        st_handle_t *h;

        for (size_t i = 0; i < n; i++) {
            float *o = obj + i * r->obj_floats;

            memcpy(o, r->keys + (b0 + i) * bf, sizeof(float) * bf);
            memcpy(o + bf, r->sum + (b0 + i) * 2 * r->dim, sizeof(float) * 2 * r->dim);
            ops[i] = (st_put_op_t){b0 + i,
                                   ST_KIND_IDX,
                                   0,
                                   o,
                                   sizeof(float) * r->obj_floats,
                                   0,
                                   r->row_sums ? r->dim * (uint32_t)sizeof(float) : 0};
        }
        if (st_client_put(r->c, r->chain, r->n_blocks, ops, n, 0, &h) != ST_OK) {
            fprintf(stderr, "bench_score: put: %s\n", st_client_last_error());
            break;
        }
        st_handle_wait(h, -1);
        st_handle_release(h);
        for (size_t i = 0; i < n; i++) {
            if (ops[i].status != ST_OK) {
                fprintf(stderr, "bench_score: put of block %zu: %s\n", b0 + i,
                        st_strerror(ops[i].status));
                free(obj);
                free(ops);
                return 1;
            }
        }
        if (b0 + n == r->n_blocks) {
            free(obj);
            free(ops);
            return 0;
        }
    }
    free(obj);
    free(ops);
    return 1;
}

/* Local scoring of the first n blocks: ms. */
static double bs_local(bs_run_t *r, size_t n, const float *keys, const float *sum)
{
    uint64_t t0 = bench_now_ns();

    st_cpu_indexer_topk(r->q, r->w, (int)r->heads, (int)r->dim, keys, (int)(n * r->bt), (int)r->bt,
                        sum, (int)r->k, r->idx, r->sc, NULL);
    return (double)(bench_now_ns() - t0) / 1e6;
}

/* Fetch of the first n blocks' IDX objects, unpacked, then local scoring: ms. */
static double bs_fetch(bs_run_t *r, size_t n, double *bytes)
{
    size_t bf = (size_t)r->bt * r->dim;
    uint64_t t0 = bench_now_ns();
    st_handle_t *h;

    for (size_t i = 0; i < n; i++) {
        r->gets[i] = (st_get_op_t){.block = i,
                                   .kind = ST_KIND_IDX,
                                   .layer = 0,
                                   .dst = r->staging + i * r->obj_floats,
                                   .dst_len = sizeof(float) * r->obj_floats};
    }
    if (st_client_get(r->c, r->chain, r->n_blocks, r->gets, n, &h) != ST_OK) {
        return -1;
    }
    st_handle_wait(h, -1);
    st_handle_release(h);
    for (size_t i = 0; i < n; i++) {
        if (r->gets[i].status != ST_OK) {
            fprintf(stderr, "bench_score: get of block %zu: %s\n", i,
                    st_strerror(r->gets[i].status));
            return -1;
        }
        memcpy(r->fkeys + i * bf, r->staging + i * r->obj_floats, sizeof(float) * bf);
        memcpy(r->fsum + i * 2 * r->dim, r->staging + i * r->obj_floats + bf,
               sizeof(float) * 2 * r->dim);
    }
    bs_local(r, n, r->fkeys, r->fsum);
    *bytes = (double)n * (double)(sizeof(float) * r->obj_floats);
    return (double)(bench_now_ns() - t0) / 1e6;
}

/* Near-data scoring of the first n blocks: ms, checked against local scoring. */
static double bs_near(bs_run_t *r, size_t n, double *bytes, double *scored)
{
    st_score_query_t q = {0, r->heads, r->dim, r->q, r->w, r->k};
    st_score_stats_t st;
    size_t n_out, want;
    uint64_t t0 = bench_now_ns();
    double ms;

    if (st_client_score(r->c, r->chain, 0, n, &q, r->pos, r->nsc, &n_out, &st) != ST_OK) {
        fprintf(stderr, "bench_score: score: %s\n", st_client_last_error());
        return -1;
    }
    ms = (double)(bench_now_ns() - t0) / 1e6;
    bs_local(r, n, r->keys, r->sum);
    want = n * r->bt < r->k ? n * r->bt : r->k;
    for (size_t i = 0; i < want; i++) {
        if (n_out != want || r->pos[i] != (uint64_t)r->idx[i] ||
            memcmp(&r->nsc[i], &r->sc[i], sizeof(float)) != 0) {
            fprintf(stderr, "bench_score: candidate %zu differs from local scoring\n", i);
            return -1;
        }
    }
    *bytes = (double)(st.bytes_sent + st.bytes_received);
    *scored = (double)st.blocks_scored / (double)n;
    return ms;
}

/* The history, the query, the buffers. */
static int bs_setup(bs_run_t *r)
{
    size_t nk = r->n_blocks * r->bt;

    r->obj_floats = ((size_t)r->bt + 2) * r->dim;
    r->keys = malloc(sizeof(float) * nk * r->dim);
    r->sum = malloc(sizeof(float) * r->n_blocks * 2 * r->dim);
    r->fkeys = malloc(sizeof(float) * nk * r->dim);
    r->fsum = malloc(sizeof(float) * r->n_blocks * 2 * r->dim);
    r->staging = malloc(sizeof(float) * r->n_blocks * r->obj_floats);
    r->gets = calloc(r->n_blocks, sizeof(*r->gets));
    r->q = malloc(sizeof(float) * r->heads * r->dim);
    r->w = malloc(sizeof(float) * r->heads);
    r->idx = malloc(sizeof(int32_t) * r->k);
    r->sc = malloc(sizeof(float) * r->k);
    r->pos = malloc(sizeof(uint64_t) * r->k);
    r->nsc = malloc(sizeof(float) * r->k);
    if (!r->keys || !r->sum || !r->fkeys || !r->fsum || !r->staging || !r->gets || !r->q || !r->w ||
        !r->idx || !r->sc || !r->pos || !r->nsc) {
        return 1;
    }
    for (size_t i = 0; i < nk * r->dim; i++) {
        size_t b = i / ((size_t)r->bt * r->dim);
        /* --hot: a few blocks (every 100/hot-th) hold the keys that matter,
         * the others are small: the locality the summaries' bounds use. */
        int cold = r->hot > 0 && (b * 2654435761u) % 1000 >= (size_t)r->hot * 10;

        r->keys[i] = bs_rnd() * (cold ? 0.05f : 1.0f);
    }
    for (size_t i = 0; i < (size_t)r->heads * r->dim; i++) {
        r->q[i] = bs_rnd();
    }
    for (size_t j = 0; j < r->heads; j++) {
        r->w[j] = 0.5f + 0.5f * bs_rnd();
    }
    st_cpu_block_summary(r->keys, (int)nk, (int)r->dim, (int)r->bt, r->sum);
    (void)st_client_register(r->c, r->staging, sizeof(float) * r->n_blocks * r->obj_floats);
    return 0;
}

static void bs_free(bs_run_t *r)
{
    free(r->keys);
    free(r->sum);
    free(r->fkeys);
    free(r->fsum);
    free(r->staging);
    free(r->gets);
    free(r->q);
    free(r->w);
    free(r->idx);
    free(r->sc);
    free(r->pos);
    free(r->nsc);
    free(r->chain);
}

/* Least squares y = a + b x over n points. */
static void bs_fit(const double *x, const double *y, size_t n, double *a, double *b)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;

    for (size_t i = 0; i < n; i++) {
        sx += x[i], sy += y[i], sxx += x[i] * x[i], sxy += x[i] * y[i];
    }
    *b = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    *a = (sy - *b * sx) / n;
}

/* Prints one context length's line; med: the medians (ms) of near, local, fetch;
 * *rate: the fetch's bytes a second (its time less local scoring's). */
static void bs_report(const bs_run_t *r, size_t n, double *t[3], double *bytes[2], double *scored,
                      size_t rounds, double med[3], double *rate)
{
    bench_stats_t s[3], bn, bf, sc;

    for (int m = 0; m < 3; m++) {
        bench_stats(t[m], rounds, &s[m]);
        med[m] = s[m].median;
    }
    bench_stats(bytes[0], rounds, &bn);
    bench_stats(bytes[1], rounds, &bf);
    bench_stats(scored, rounds, &sc);
    printf("%8zu %8zu | %8.2f %6.2f | %8.2f %6.2f | %8.2f %6.2f | %10.0f %12.0f %6.3f%% | %5.3f "
           "%5.3f | %5.1f%%\n",
           n, n * r->bt, s[0].median, s[0].mad, s[1].median, s[1].mad, s[2].median, s[2].mad,
           bn.median, bf.median, 100.0 * bn.median / bf.median, s[0].median / s[1].median,
           s[0].median / s[2].median, 100.0 * sc.median);
    *rate = bf.median / ((s[2].median - s[1].median) / 1e3); /* bytes/s of the fetch part */
}

int main(int argc, char **argv)
{
    const char *stratad, *transport = "ucx";
    size_t nodes = 4, blocks = 15625, rounds = 11;
    uint64_t k = 2048, heads = 4, dim = 32;
    char args[256];
    tc_cluster_t cl;
    st_client_params_t p = {0};
    bs_run_t r = {.row_sums = 1};
    size_t sizes[BS_SIZES];
    double *t[BS_SIZES][3], *bytes[BS_SIZES][2], *scored[BS_SIZES];
    double x[BS_SIZES], ynear[BS_SIZES], ylocal[BS_SIZES], med[3], rate = 0, a, b, a2, c;

    if (argc < 2) {
        fprintf(stderr,
                "usage: %s STRATAD [--nodes N] [--blocks B] [--rounds R] [--k K] [--heads H] "
                "[--dim D] [--transport ucx|inline] [--hot P] [--row-sums 0|1]\n",
                argv[0]);
        return 2;
    }
    stratad = argv[1];
    const bench_opt_t opts[] = {
        {"--nodes", BENCH_OPT_SIZE, &nodes},        {"--blocks", BENCH_OPT_SIZE, &blocks},
        {"--rounds", BENCH_OPT_SIZE, &rounds},      {"--k", BENCH_OPT_U64, &k},
        {"--heads", BENCH_OPT_U64, &heads},         {"--dim", BENCH_OPT_U64, &dim},
        {"--transport", BENCH_OPT_STR, &transport}, {"--hot", BENCH_OPT_U64, &r.hot},
        {"--row-sums", BENCH_OPT_U64, &r.row_sums}};
    int bad = bench_opt_pairs(argc, argv, 2, opts, sizeof(opts) / sizeof(opts[0]));

    if (bad != 0 || r.hot > 100 || nodes < 1 || nodes > TC_MAX_NODES || blocks < 16 || rounds < 2 ||
        rounds > 64 || k < 1 || k > ST_SCORE_K_MAX) {
        fprintf(stderr, "bench_score: bad option %s\n", bad ? argv[bad] : "(a value)");
        return 2;
    }
    snprintf(args, sizeof(args), "--memory-limit 1G --max-hashes 65536");
    if (tc_start(&cl, stratad, (int)nodes, args) != 0) {
        return 1;
    }
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TIMEOUT | ST_CLIENT_FIELD_TRANSPORT;
    p.nodes = cl.peers;
    p.timeout_ms = 60000;
    p.transport = transport;
    if (st_client_connect(&p, &r.c) != ST_OK) {
        fprintf(stderr, "bench_score: connect: %s\n", st_client_last_error());
        tc_stop_all(&cl);
        return 1;
    }
    r.n_blocks = blocks;
    r.bt = st_client_block_tokens(r.c);
    r.heads = (uint32_t)heads;
    r.dim = (uint32_t)dim;
    r.k = (uint32_t)k;
    r.chain = bs_chain(r.c, blocks);
    if (r.chain == NULL || bs_setup(&r) != 0 || bs_put(&r) != 0) {
        fprintf(stderr, "bench_score: set-up failed\n");
        return 1;
    }
    sizes[0] = blocks / 16, sizes[1] = blocks / 4, sizes[2] = blocks / 2, sizes[3] = blocks;
    for (int s = 0; s < BS_SIZES; s++) {
        for (int m = 0; m < 3; m++) {
            t[s][m] = malloc(sizeof(double) * rounds);
        }
        bytes[s][0] = malloc(sizeof(double) * rounds);
        bytes[s][1] = malloc(sizeof(double) * rounds);
        scored[s] = malloc(sizeof(double) * rounds);
    }
    printf(
        "bench_score: %zu daemons on loopback, transport %s, %zu blocks x %u tokens, "
        "heads %u x dim %u (IDX %zu B a block), k %u, %zu rounds, simd %s, keys %s, row sums %s\n",
        nodes, transport, blocks, r.bt, r.heads, r.dim, sizeof(float) * r.obj_floats, r.k, rounds,
        st_kernels_simd() == ST_SIMD_AVX2 ? "avx2" : "portable", r.hot ? "hot blocks" : "random",
        r.row_sums ? "on" : "off");
    for (size_t rd = 0; rd < rounds; rd++) {
        for (int s = 0; s < BS_SIZES; s++) {
            size_t n = sizes[s];

            for (int o = 0; o < 3; o++) {
                int m = (int)((o + rd) % 3);

                t[s][m][rd] = m == 0   ? bs_near(&r, n, &bytes[s][0][rd], &scored[s][rd])
                              : m == 1 ? bs_local(&r, n, r.keys, r.sum)
                                       : bs_fetch(&r, n, &bytes[s][1][rd]);
                if (t[s][m][rd] < 0) {
                    return 1;
                }
            }
        }
    }
    printf("%8s %8s | %15s | %15s | %15s | %10s %12s %7s | %11s | %6s\n", "blocks", "tokens",
           "near ms (mad)", "local ms (mad)", "fetch ms (mad)", "near B", "fetch B", "ratio",
           "near/local fetch", "scored");
    for (int s = 0; s < BS_SIZES; s++) {
        double rt;

        bs_report(&r, sizes[s], t[s], bytes[s], scored[s], rounds, med, &rt);
        x[s] = (double)(sizes[s] * r.bt);
        ynear[s] = med[0];
        ylocal[s] = med[1];
        rate = s == BS_SIZES - 1 ? rt : rate;
    }
    /* near(L) = a + b L; local plus moving the keys(L) = c L (+ a2). */
    bs_fit(x, ynear, BS_SIZES, &a, &b);
    bs_fit(x, ylocal, BS_SIZES, &a2, &c);
    {
        double per_token_bytes = (double)(sizeof(float) * r.obj_floats) / r.bt;
        double move = per_token_bytes / rate * 1e3; /* ms a token */
        double denom = c + move - b;

        printf("fit: near = %.3f ms + %.3g ms/token; local = %.3f ms + %.3g ms/token; keys "
               "stream at %.2f GB/s (%.0f B a token: %.3g ms/token)\n",
               a, b, a2, c, rate / 1e9, per_token_bytes, move);
        if (denom > 0) {
            printf("break-even: near-data scoring costs less than local scoring plus the keys' "
                   "transfer from %.0f tokens on\n",
                   (a - a2) / denom > 0 ? (a - a2) / denom : 0.0);
        } else {
            printf("break-even: none in this run (near-data costs more per token than local "
                   "scoring plus the transfer)\n");
        }
    }
    for (int s = 0; s < BS_SIZES; s++) {
        for (int m = 0; m < 3; m++) {
            free(t[s][m]);
        }
        free(bytes[s][0]);
        free(bytes[s][1]);
        free(scored[s]);
    }
    bs_free(&r);
    st_client_close(r.c);
    tc_stop_all(&cl);
    return 0;
}
