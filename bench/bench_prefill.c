/*
 * bench_prefill.c - chunked prefill against the token-by-token path on the
 * CPU (docs/engine.md, "Chunked prefill"), no cluster: a sequence computes
 * TOKENS tokens with st_seq_forward one by one, then with st_seq_prefill in
 * spans of CHUNK, alternating which runs first round by round; tokens per
 * second of each (medians and MADs over ROUNDS) and their ratio, and the
 * check that the logits are equal bit for bit. Shapes: "default"
 * (st_model_config_default) and "gpu" (st_model_config_gpu, top-k 128 so
 * that a CPU run stays short).
 *
 * usage: bench_prefill [TOKENS=4096] [CHUNK=1024] [ROUNDS=5] [SHAPE=default|gpu]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "strata/engine.h"

/* Seconds for tok[0..n) through a fresh sequence; chunk 0: token by token. lg: last logits. */
static double timed(const st_model_t *m, const uint32_t *tok, size_t n, size_t chunk, float *lg)
{
    st_seq_t *s;
    uint64_t t0;

    if (st_seq_create(m, &s) != ST_OK) {
        exit(1);
    }
    t0 = bench_now_ns();
    for (size_t i = 0; i < n;) {
        size_t k = chunk ? (n - i < chunk ? n - i : chunk) : 1;
        float *l = i + k == n ? lg : NULL;
        st_status_t r = chunk ? st_seq_prefill(s, tok + i, k, l) : st_seq_forward(s, tok[i], l);

        if (r != ST_OK) {
            fprintf(stderr, "forward failed: %s\n", st_status_name(r));
            exit(1);
        }
        i += k;
    }
    t0 = bench_now_ns() - t0;
    st_seq_free(s);
    return t0 / 1e9;
}

int main(int argc, char **argv)
{
    size_t n = argc > 1 ? (size_t)atol(argv[1]) : 4096;
    size_t chunk = argc > 2 ? (size_t)atol(argv[2]) : 1024;
    int rounds = argc > 3 ? atoi(argv[3]) : 5;
    const char *shape = argc > 4 ? argv[4] : "default";
    double tk[32], ch[32], ratio[32];
    bench_stats_t st, sc, sr;
    st_model_config_t c;
    st_model_t *m;
    uint32_t *tok = malloc(sizeof(uint32_t) * (n + 1));
    float *la, *lb;

    if (n < 1 || chunk < 1 || rounds < 1 || rounds > 32 || !tok ||
        (strcmp(shape, "default") && strcmp(shape, "gpu"))) {
        fprintf(stderr, "usage: bench_prefill [TOKENS] [CHUNK] [ROUNDS 1..32] [default|gpu]\n");
        return 2;
    }
    if (strcmp(shape, "gpu") == 0) {
        st_model_config_gpu(&c);
        c.topk = 128;
    } else {
        st_model_config_default(&c);
    }
    if (st_model_create(&c, &m) != ST_OK) {
        return 1;
    }
    la = malloc(sizeof(float) * c.vocab);
    lb = malloc(sizeof(float) * c.vocab);
    for (size_t i = 0; i < n; i++) {
        tok[i] = (uint32_t)((i + 1) * 2654435761u >> 9) % c.vocab;
    }
    printf(
        "prefill on the CPU: %s shape (%s, d_model %u, DSA %u heads x %u, top-k %u), %zu tokens, "
        "spans of %zu, %d rounds (order alternating)\n",
        shape, c.pattern, c.d_model, c.dsa_heads, c.dsa_latent + c.dsa_rope, c.topk, n, chunk,
        rounds);
    for (int r = 0; r < rounds; r++) {
        if (r % 2 == 0) {
            tk[r] = timed(m, tok, n, 0, la);
            ch[r] = timed(m, tok, n, chunk, lb);
        } else {
            ch[r] = timed(m, tok, n, chunk, lb);
            tk[r] = timed(m, tok, n, 0, la);
        }
        if (memcmp(la, lb, sizeof(float) * c.vocab) != 0) {
            fprintf(stderr, "FAIL: chunked logits differ from the token path's\n");
            return 1;
        }
        ratio[r] = tk[r] / ch[r];
        tk[r] = n / tk[r];
        ch[r] = n / ch[r];
    }
    bench_stats(tk, (size_t)rounds, &st);
    bench_stats(ch, (size_t)rounds, &sc);
    bench_stats(ratio, (size_t)rounds, &sr);
    printf("token by token %.0f tokens/s (mad %.0f); chunked %.0f tokens/s (mad %.0f); chunked / "
           "token %.2fx (mad %.2f, range %.2f-%.2f); logits equal bit for bit\n",
           st.median, st.mad, sc.median, sc.mad, sr.median, sr.mad, sr.min, sr.max);
    st_model_free(m);
    free(tok);
    free(la);
    free(lb);
    return 0;
}
