/*
 * bench_engine_score.c - the engine's near-data scoring at long context
 * (issue #20): decode over four stratad on loopback with a HISTORY-token
 * history, scored locally (the engine fetches every block's IDX object at
 * the resume and scores all keys itself) against near the data
 * (remote_scoring: the daemons score the history outside the pool, the
 * engine fetches and holds only the pool's keys), both with the same local
 * pool of POOL blocks, on the same cores, the runs alternating.
 *
 * The history's objects are synthetic, with the model's shapes (the default
 * hybrid: KDKD, indexer 4 heads of 32, top-k 128): each block's KV rows and
 * indexer keys uniform in [-1, 1) from a counter-based generator, its IDX
 * summary the keys' per-channel min and max, and one KDA checkpoint (the
 * documented header, zero states) after the last block, all written with
 * st_client_put; then a prompt of the history plus one token resumes every
 * block and decodes. Uniform keys make the summaries' pruning weak (most
 * blocks are scored row by row) on both sides alike.
 *
 * Reported per mode: the resume (TTFT, bytes fetched, and the streaming rate
 * bytes / fetch time), decode ms per token (median and spread of REPS), the
 * bytes a Score call moves per token and DSA layer against the IDX bytes per
 * layer that the local-scoring resume brought over, the indexer-key bytes
 * the engine holds and its resident memory. The same at HISTORY / 8, and
 * from the two lengths the break-even context length: where DECODE tokens
 * of near-data decode cost less than the local decode plus the keys'
 * transfer at the measured streaming rate (linear in the length on both
 * sides).
 *
 * usage: bench_engine_score STRATAD [HISTORY=1000000] [DECODE=32] [REPS=3] [POOL=8]
 *        [TRANSPORT=ucx]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cluster.h"
#include "strata/engine.h"

#define N_NODES 4
#define BATCH   128 /* blocks per put batch */

static st_model_t *model;
static st_client_t *client;

static float u01(uint64_t a, uint64_t b)
{
    uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull);

    x ^= x >> 31;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 29;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 32;
    return (float)((double)(x >> 40) / 8388608.0 - 1.0);
}

static void le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static void le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

/* Writes blocks [0, nb) of the chain: KV and IDX of every DSA layer,
 * synthetic, and the KDA checkpoint after the last block. */
static int write_history(const st_hash_t *chain, size_t nb, uint64_t salt)
{
    const st_model_config_t *c = st_model_config(model);
    size_t B = c->block_tokens, di = c->idx_dim, row = c->dsa_latent + c->dsa_rope;
    size_t kvb = B * row * 4, ixb = (B + 2) * di * 4, n_dsa = 0, n_kda = 0;
    size_t kdb, per;
    uint8_t *buf;
    st_put_op_t *ops;

    for (const char *p = c->pattern; *p; p++) {
        n_dsa += *p == 'D';
        n_kda += *p == 'K';
    }
    kdb = 32 + n_kda * c->kda_heads * c->kda_head_dim * c->kda_head_dim * 4;
    per = n_dsa * (kvb + ixb);
    buf = calloc(1, BATCH * per + kdb);
    ops = calloc(BATCH * n_dsa * 2 + 1, sizeof(*ops));
    if (!buf || !ops) {
        return -1;
    }
    for (size_t b0 = 0; b0 < nb; b0 += BATCH) {
        size_t k = 0, end = b0 + BATCH < nb ? b0 + BATCH : nb;
        st_handle_t *h;

        for (size_t b = b0; b < end; b++) {
            for (size_t l = 0; l < n_dsa; l++) {
                uint8_t *kv = buf + (b - b0) * per + l * (kvb + ixb), *ix = kv + kvb;
                float *rows = (float *)kv, *keys = (float *)ix, *mn = keys + B * di, *mx = mn + di;
                uint64_t id = (salt * 1000003u + b) * 8 + l;

                for (size_t i = 0; i < B * row; i++) {
                    rows[i] = u01(id, i);
                }
                for (size_t i = 0; i < B * di; i++) {
                    keys[i] = u01(id, (1u << 20) + i);
                }
                for (size_t j = 0; j < di; j++) {
                    mn[j] = mx[j] = keys[j];
                    for (size_t r = 1; r < B; r++) {
                        float v = keys[r * di + j];

                        mn[j] = v < mn[j] ? v : mn[j];
                        mx[j] = v > mx[j] ? v : mx[j];
                    }
                }
                ops[k++] =
                    (st_put_op_t){b, ST_KIND_KV, (uint16_t)l, kv, kvb, 0, (uint32_t)(row * 4)};
                ops[k++] =
                    (st_put_op_t){b,   ST_KIND_IDX, (uint16_t)l,       ix,
                                  ixb, 0,           (uint32_t)(di * 4)}; /* as the engine's */
            }
        }
        if (end == nb) { /* the checkpoint: docs/engine.md's header, zero states */
            uint8_t *p = buf + BATCH * per;

            memset(p, 0, kdb);
            le32(p, 0x41444b53u);
            p[4] = 1;
            p[6] = (uint8_t)n_kda;
            le32(p + 8, c->kda_heads);
            le32(p + 12, c->kda_head_dim);
            le64(p + 16, nb * B);
            le64(p + 24, st_model_fingerprint(model));
            ops[k++] = (st_put_op_t){nb - 1, ST_KIND_KDA, 0, p, kdb, 0, 0};
        }
        if (st_client_put(client, chain, nb, ops, k, 0, &h) != ST_OK ||
            st_handle_wait(h, 120000) != ST_OK) {
            fprintf(stderr, "writing the history failed at block %zu: %s\n", b0,
                    st_client_last_error());
            return -1;
        }
        for (size_t i = 0; i < k; i++) {
            if (ops[i].status != ST_OK) {
                fprintf(stderr, "object not stored block=%llu: %s\n",
                        (unsigned long long)ops[i].block, st_status_name(ops[i].status));
                st_handle_release(h);
                return -1;
            }
        }
        st_handle_release(h);
    }
    free(buf);
    free(ops);
    return 0;
}

static st_engine_t *engine(uint32_t pool, int remote)
{
    st_engine_params_t ep = {0};
    st_engine_t *e = NULL;

    ep.field_mask =
        ST_ENGINE_FIELD_CLIENT | ST_ENGINE_FIELD_LOCAL_BLOCKS | ST_ENGINE_FIELD_REMOTE_SCORING;
    ep.client = client;
    ep.local_blocks = pool;
    ep.remote_scoring = (uint32_t)remote;
    if (st_engine_create(model, &ep, &e) != ST_OK) {
        fprintf(stderr, "engine create failed\n");
        exit(1);
    }
    return e;
}

/* Resident memory of this process in bytes (/proc/self/statm). */
static double rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    unsigned long size = 0, res = 0;

    if (f) {
        if (fscanf(f, "%lu %lu", &size, &res) != 2) {
            res = 0;
        }
        fclose(f);
    }
    return (double)res * 4096.0;
}

/* One mode's numbers at one history length. */
typedef struct bs_mode {
    double ttft_ms, fetched, rate, dec[16], dec_med, dec_mad, score_b, keys, rss;
    uint64_t calls, fallbacks;
} bs_mode_t;

static void run_mode(st_engine_t *e, const uint32_t *tok, size_t n, uint32_t n_dec, int r,
                     bs_mode_t *m)
{
    st_engine_stats_t s;
    uint32_t *ids = malloc(sizeof(uint32_t) * (n_dec + 1));

    if (!ids || st_engine_run(e, tok, n, 0, NULL, NULL, &s) != ST_OK) {
        fprintf(stderr, "st_engine_run failed\n");
        exit(1);
    }
    m->ttft_ms = (double)s.ttft_us / 1e3;
    m->fetched = (double)s.bytes_fetched;
    m->rate = s.fetch_us ? (double)s.bytes_fetched / ((double)s.fetch_us / 1e6) : 0.0;
    if (st_engine_run(e, tok, n, n_dec, NULL, ids, &s) != ST_OK) {
        fprintf(stderr, "st_engine_run failed\n");
        exit(1);
    }
    m->dec[r] = (double)s.decode_us / 1e3 / n_dec;
    m->score_b = s.score_calls ? (double)s.score_bytes / (double)s.score_calls : 0.0;
    m->calls = s.score_calls;
    m->fallbacks += s.score_fallbacks;
    m->keys = (double)s.keys_bytes;
    m->rss = rss_bytes();
    free(ids);
}

/* Both modes at a history of nb blocks (a fresh namespace salt), REPS rounds alternating. */
static void measure(size_t nb, uint32_t n_dec, int reps, uint32_t pool, uint64_t salt,
                    bs_mode_t *loc, bs_mode_t *rem)
{
    size_t n = nb * 64 + 1, got = 0;
    uint32_t *tok = malloc(sizeof(uint32_t) * n);
    st_hash_t *chain = malloc(sizeof(*chain) * nb);
    uint64_t t0;
    bench_stats_t bs;

    for (size_t i = 0; tok && i < n; i++) {
        tok[i] = (uint32_t)(((i + 1) * 2654435761u) ^ (salt * 40503u)) % 512;
    }
    if (!tok || !chain || st_client_hash(client, tok, nb * 64, NULL, 0, chain, nb, &got) != ST_OK ||
        got != nb) {
        fprintf(stderr, "hashing the history failed\n");
        exit(1);
    }
    t0 = bench_now_ns();
    if (write_history(chain, nb, salt) != 0) {
        exit(1);
    }
    printf("  history of %zu tokens (%zu blocks) written in %.1f s\n", nb * 64, nb,
           (double)(bench_now_ns() - t0) / 1e9);
    fflush(stdout);
    memset(loc, 0, sizeof(*loc));
    memset(rem, 0, sizeof(*rem));
    for (int r = 0; r < reps; r++) { /* a fresh engine each round: its memory is its own */
        st_engine_t *el = engine(pool, 0), *er;

        run_mode(el, tok, n, n_dec, r, loc);
        st_engine_free(el);
        er = engine(pool, 1);
        run_mode(er, tok, n, n_dec, r, rem);
        st_engine_free(er);
    }
    bench_stats(loc->dec, (size_t)reps, &bs);
    loc->dec_med = bs.median;
    loc->dec_mad = bs.mad;
    bench_stats(rem->dec, (size_t)reps, &bs);
    rem->dec_med = bs.median;
    rem->dec_mad = bs.mad;
    free(tok);
    free(chain);
}

static void report(size_t tokens, const bs_mode_t *l, const bs_mode_t *r, double idx_layer)
{
    printf("  %zu tokens of context:\n", tokens);
    printf("    local scoring:  resume %.1f ms, %.1f MB fetched at %.2f GB/s; decode %.2f ms/token "
           "(mad %.2f); keys held %.1f MB, RSS %.1f MB\n",
           l->ttft_ms, l->fetched / 1e6, l->rate / 1e9, l->dec_med, l->dec_mad, l->keys / 1e6,
           l->rss / 1e6);
    printf("    near the data:  resume %.1f ms, %.1f MB fetched; decode %.2f ms/token (mad %.2f); "
           "keys held %.2f MB, RSS %.1f MB; %llu Score calls, %.0f B each (per token and DSA "
           "layer) = %.5f%% of the %.1f MB of IDX per layer a local resume fetches; "
           "fallbacks %llu\n",
           r->ttft_ms, r->fetched / 1e6, r->dec_med, r->dec_mad, r->keys / 1e6, r->rss / 1e6,
           (unsigned long long)r->calls, r->score_b, 100.0 * r->score_b / idx_layer,
           idx_layer / 1e6, (unsigned long long)r->fallbacks);
    printf("    decode near the data / local: %.2fx\n", r->dec_med / l->dec_med);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *stratad = argc > 1 ? argv[1] : getenv("STRATAD");
    size_t hist = argc > 2 ? (size_t)atol(argv[2]) : 1000000;
    uint32_t n_dec = argc > 3 ? (uint32_t)atoi(argv[3]) : 32;
    int reps = argc > 4 ? atoi(argv[4]) : 3;
    uint32_t pool = argc > 5 ? (uint32_t)atoi(argv[5]) : 8;
    const char *transport = argc > 6 ? argv[6] : "ucx";
    size_t nb = hist / 64, nb2 = nb / 8;
    st_client_params_t p = {0};
    st_model_config_t mc;
    tc_cluster_t cl;
    char extra[128];
    bs_mode_t l1, r1, l2, r2;

    if (!stratad || hist < 8192 || hist % 64 != 0 || n_dec < 1 || reps < 1 || reps > 16 ||
        pool < 1 || pool >= nb2) {
        fprintf(stderr, "usage: bench_engine_score STRATAD [HISTORY (a multiple of 64, >= 8192)] "
                        "[DECODE >= 1] [REPS 1..16] [POOL >= 1 blocks] [TRANSPORT]\n");
        return 2;
    }
    snprintf(extra, sizeof(extra), "--memory-limit 2G --transport %s",
             strcmp(transport, "inline") == 0 ? "ucx" : transport);
    if (tc_start(&cl, stratad, N_NODES, extra) != 0) {
        return 1;
    }
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_MODEL | ST_CLIENT_FIELD_TIMEOUT |
                   (strcmp(transport, "inline") ? ST_CLIENT_FIELD_TRANSPORT : 0);
    p.nodes = cl.peers;
    p.model = "bench-score";
    p.timeout_ms = 120000;
    p.transport = transport;
    st_model_config_default(&mc);
    if (st_client_connect(&p, &client) != ST_OK || st_model_create(&mc, &model) != ST_OK) {
        fprintf(stderr, "setup failed\n");
        tc_stop_all(&cl);
        return 1;
    }
    double idx_layer1 = (double)nb * (mc.block_tokens + 2) * mc.idx_dim * 4;
    double idx_layer2 = (double)nb2 * (mc.block_tokens + 2) * mc.idx_dim * 4;
    int n_dsa = 2;

    printf("near-data scoring in the engine: %s, d_model %u, top-k %u, indexer %ux%u, pool %u "
           "blocks; %d stratad, %s transport; decode %u tokens, %d rounds alternating\n",
           mc.pattern, mc.d_model, mc.topk, mc.idx_heads, mc.idx_dim, pool, N_NODES, transport,
           n_dec, reps);
    fflush(stdout);
    measure(nb2, n_dec, reps, pool, 2, &l2, &r2);
    report(nb2 * 64, &l2, &r2, idx_layer2);
    measure(nb, n_dec, reps, pool, 1, &l1, &r1);
    report(nb * 64, &l1, &r1, idx_layer1);
    {
        /* Per decoded token t(L) = a + b L on each side, from the two lengths;
         * the local side also pays the keys' transfer once: L x bytes per
         * token of every DSA layer / the streaming rate of its resume. */
        double L1 = (double)nb * 64, L2 = (double)nb2 * 64;
        double bl = (l1.dec_med - l2.dec_med) / (L1 - L2), al = l1.dec_med - bl * L1;
        double br = (r1.dec_med - r2.dec_med) / (L1 - L2), ar = r1.dec_med - br * L1;
        double per_tok = (double)(mc.block_tokens + 2) * mc.idx_dim * 4 / mc.block_tokens * n_dsa;
        double xfer = per_tok / (l1.rate > 0 ? l1.rate : 1.0) * 1e3; /* ms per token of history */
        const uint32_t ds[] = {1, n_dec};

        printf("  fits (ms/token): local %.3f + %.3g L, near the data %.3f + %.3g L; keys' "
               "transfer %.3g ms per token of history (%.0f B at %.2f GB/s)\n",
               al, bl, ar, br, xfer, per_tok, l1.rate / 1e9);
        for (int i = 0; i < 2; i++) {
            double d = ds[i], num = d * (ar - al), den = d * (bl - br) + xfer;

            if (den <= 0) {
                printf("  break-even for %u decoded tokens a resume: none (local scoring with the "
                       "keys' transfer costs less at every length)\n",
                       ds[i]);
            } else if (num <= 0) {
                printf("  break-even for %u decoded tokens a resume: near-data scoring costs less "
                       "at every length\n",
                       ds[i]);
            } else {
                printf("  break-even for %u decoded tokens a resume: %.0f tokens of context "
                       "(near-data scoring costs less above)\n",
                       ds[i], num / den);
            }
        }
        if (br > bl) {
            printf("  at long context (slopes): near-data scoring costs less while a resume "
                   "decodes fewer than %.1f tokens\n",
                   xfer / (br - bl));
        }
    }
    st_model_free(model);
    st_client_close(client);
    tc_stop_all(&cl);
    return 0;
}
