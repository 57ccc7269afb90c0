/*
 * bench_hash.c - hashing a 1M-token sequence into its block-hash chain.
 *
 * Runs, in the same process and interleaved round by round:
 *   strata  st_hash_chain (XXH3-128) over 16,384 blocks of 64 tokens;
 *   sha256  a SHA-256 chain of the same bytes through OpenSSL (what vLLM
 *           uses by default): h[i] = SHA256(h[i-1] || block tokens);
 *   read    one pass that reads every token (the memory floor).
 * Prints ns per token (median, p99, MAD) and the ratios.
 *
 * usage: bench_hash [--rounds N] [--tokens N]
 */
#include <inttypes.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "strata/hash.h"

#define BT 64

static volatile uint64_t sink;

static void sha_chain(const uint32_t *tok, size_t nb, uint8_t *out)
{
    uint8_t msg[32 + BT * 4];
    uint8_t prev[32] = {0};

    for (size_t i = 0; i < nb; i++) {
        memcpy(msg, prev, 32);
        memcpy(msg + 32, tok + i * BT, BT * 4);
        SHA256(msg, sizeof(msg), prev);
    }
    memcpy(out, prev, 32);
}

static uint64_t read_all(const uint32_t *tok, size_t n)
{
    uint64_t s = 0;

    for (size_t i = 0; i < n; i++) {
        s += tok[i];
    }
    return s;
}

int main(int argc, char **argv)
{
    size_t n_tokens = 1u << 20, rounds = 31;
    uint32_t *tok;
    st_hash_t *chain, seed = {{0}};
    double *t_st, *t_sha, *t_rd;
    bench_stats_t s_st, s_sha, s_rd;
    uint8_t shaout[32];

    const bench_opt_t opts[] = {{"--rounds", BENCH_OPT_SIZE, &rounds},
                                {"--tokens", BENCH_OPT_SIZE, &n_tokens}};

    if (bench_opt_pairs(argc, argv, 1, opts, sizeof(opts) / sizeof(opts[0])) != 0 ||
        argc % 2 == 0 || rounds == 0 || n_tokens < BT) {
        fprintf(stderr, "usage: bench_hash [--rounds N] [--tokens N]\n");
        return 2;
    }
    tok = malloc(n_tokens * 4);
    chain = malloc(sizeof(st_hash_t) * (n_tokens / BT));
    t_st = malloc(sizeof(double) * rounds);
    t_sha = malloc(sizeof(double) * rounds);
    t_rd = malloc(sizeof(double) * rounds);
    if (!tok || !chain || !t_st || !t_sha || !t_rd) {
        fprintf(stderr, "bench_hash: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < n_tokens; i++) {
        tok[i] = (uint32_t)(i * 2654435761u) % 151936u;
    }

    for (size_t r = 0; r < rounds; r++) {
        uint64_t t0, t1;
        size_t nb;

        t0 = bench_now_ns();
        st_hash_chain(&seed, tok, n_tokens, BT, NULL, 0, chain, n_tokens / BT, &nb);
        t1 = bench_now_ns();
        t_st[r] = (double)(t1 - t0) / (double)n_tokens;
        sink += chain[nb - 1].b[0];

        t0 = bench_now_ns();
        sha_chain(tok, n_tokens / BT, shaout);
        t1 = bench_now_ns();
        t_sha[r] = (double)(t1 - t0) / (double)n_tokens;
        sink += shaout[0];

        t0 = bench_now_ns();
        sink += read_all(tok, n_tokens);
        t1 = bench_now_ns();
        t_rd[r] = (double)(t1 - t0) / (double)n_tokens;
    }
    bench_stats(t_st, rounds, &s_st);
    bench_stats(t_sha, rounds, &s_sha);
    bench_stats(t_rd, rounds, &s_rd);

    printf("bench_hash: %zu tokens, %zu blocks of %d, %zu rounds\n", n_tokens, n_tokens / BT, BT,
           rounds);
    printf("%-28s %10s %10s %10s\n", "", "median", "p99", "MAD");
    printf("%-28s %10.3f %10.3f %10.3f ns/token\n", "strata XXH3-128 chain", s_st.median, s_st.p99,
           s_st.mad);
    printf("%-28s %10.3f %10.3f %10.3f ns/token\n", "OpenSSL SHA-256 chain", s_sha.median,
           s_sha.p99, s_sha.mad);
    printf("%-28s %10.3f %10.3f %10.3f ns/token\n", "read every token once", s_rd.median, s_rd.p99,
           s_rd.mad);
    printf("ratio sha256/strata: %.1fx faster (goal >= 8x)\n", s_sha.median / s_st.median);
    printf("strata: %.3f ns/token (goal < 0.5), %.2fx the cost of one read pass\n", s_st.median,
           s_st.median / s_rd.median);
    printf("strata throughput: %.2f GB/s of tokens\n", 4.0 / s_st.median);
    return 0;
}
