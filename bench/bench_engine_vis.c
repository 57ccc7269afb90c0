/*
 * bench_engine_vis.c - images across turns and sessions (docs/engine.md,
 * "Images"): a multi-turn workload whose turns each bring an image from a
 * small pool, so that images recur at new positions in later turns and in
 * other sessions, run by an engine with the VIS cache and, in the same run,
 * by one without it (its peer: the same KV cache, every image encoded).
 * Reports the VIS hit rate, the encoder time saved, and time to first token
 * with and without the VIS cache (medians and spreads over every turn after
 * the first of each session, the order of the two engines alternating per
 * round, each round in fresh namespaces).
 *
 * usage: bench_engine_vis STRATAD [--sessions 3] [--turns 4] [--history 256]
 *        [--turn-tokens 128] [--image-size 256] [--pool 3] [--decode 8] [--rounds 3]
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cluster.h"
#include "image.h"
#include "log.h"
#include "strata/engine.h"

#define MAX_SAMPLES 4096

typedef struct bv_conf {
    size_t sessions, turns, history, turn_tokens, image_size, pool, decode, rounds;
} bv_conf_t;

/* What one engine did over the rounds. */
typedef struct bv_side {
    const char *name;
    int vis;
    double ttft[MAX_SAMPLES]; /* ms, turns after the first of each session */
    size_t n;
    uint64_t hits, misses, encoder_us, images, turns;
} bv_side_t;

static uint32_t bv_token(uint64_t stream, uint64_t i)
{
    uint64_t x = (stream + 1) * 0x9e3779b97f4a7c15ull ^ (i + 1) * 0xbf58476d1ce4e5b9ull;

    x ^= x >> 31;
    return (uint32_t)(x % 511); /* text: never the placeholder 511 */
}

/* One session of the workload on engine e. Returns 0 or 1. */
static int bv_session(st_engine_t *e, const bv_conf_t *cf, const im_image_t *pool, size_t s,
                      unsigned round, bv_side_t *side)
{
    st_engine_session_t *sess;
    char id[64];
    uint32_t *text = malloc(sizeof(uint32_t) * (cf->history + cf->turn_tokens));
    uint32_t ids[256];
    uint64_t next = 0;

    snprintf(id, sizeof(id), "vis-%s-r%u-s%zu", side->name, round, s);
    if (!text || st_engine_session_open(e, id, 0, &sess) != ST_OK) {
        free(text);
        return 1;
    }
    for (size_t t = 0; t < cf->turns; t++) {
        size_t add = t == 0 ? cf->history : cf->turn_tokens;
        const im_image_t *im = &pool[(s + t) % cf->pool];
        st_engine_image_t ei = {0, im->width, im->height, im->channels, im->pixels};
        st_engine_stats_t st;

        for (size_t i = 0; i < add; i++) {
            text[i] = bv_token(s, next++);
        }
        /* The image after half the turn's text. */
        if (st_engine_session_append(sess, text, add / 2) != ST_OK ||
            st_engine_session_append_image(sess, &ei) != ST_OK ||
            st_engine_session_append(sess, text + add / 2, add - add / 2) != ST_OK ||
            st_engine_session_generate(sess, (uint32_t)cf->decode, ids, NULL, &st) != ST_OK) {
            st_engine_session_free(sess);
            free(text);
            return 1;
        }
        side->hits += st.vis_hits;
        side->misses += st.vis_misses;
        side->encoder_us += st.encoder_us;
        side->images++;
        side->turns++;
        if (t > 0 && side->n < MAX_SAMPLES) {
            side->ttft[side->n++] = (double)st.ttft_us / 1e3;
        }
    }
    st_engine_session_close(sess);
    free(text);
    return 0;
}

/* One round of the workload for one side, in a namespace of its own. */
static int bv_round(const char *peers, const bv_conf_t *cf, const st_model_t *m,
                    const im_image_t *pool, unsigned round, bv_side_t *side)
{
    st_client_params_t p = {0};
    st_client_t *c = NULL;
    st_engine_params_t ep = {0};
    st_engine_t *e = NULL;
    char model[64];
    int rc = 0;

    snprintf(model, sizeof(model), "bench-vis-%s-%u", side->name, round);
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_MODEL;
    p.nodes = peers;
    p.model = model;
    ep.field_mask =
        ST_ENGINE_FIELD_CLIENT | ST_ENGINE_FIELD_KDA_INTERVAL | ST_ENGINE_FIELD_VIS_CACHE;
    ep.kda_interval = 4;
    ep.vis_cache = (uint32_t)side->vis;
    if (st_client_connect(&p, &c) != ST_OK) {
        return 1;
    }
    ep.client = c;
    if (st_engine_create(m, &ep, &e) != ST_OK) {
        st_client_close(c);
        return 1;
    }
    for (size_t s = 0; rc == 0 && s < cf->sessions; s++) {
        rc = bv_session(e, cf, pool, s, round, side);
    }
    st_engine_free(e);
    st_client_close(c);
    return rc;
}

static void bv_report(const bv_side_t *on, const bv_side_t *off, bench_stats_t *son,
                      bench_stats_t *soff)
{
    printf("  %-22s %8s %9s %9s %11s %11s %12s\n", "engine", "turns", "VIS hits", "hit rate",
           "encoder ms", "TTFT med", "TTFT mad");
    printf("  %-22s %8" PRIu64 " %9" PRIu64 " %8.1f%% %11.1f %8.1f ms %9.1f ms\n",
           "with the VIS cache", on->turns, on->hits,
           on->hits + on->misses ? 100.0 * (double)on->hits / (double)(on->hits + on->misses) : 0.0,
           (double)on->encoder_us / 1e3, son->median, son->mad);
    printf("  %-22s %8" PRIu64 " %9" PRIu64 " %8s %11.1f %8.1f ms %9.1f ms\n", "without (peer)",
           off->turns, off->hits, "-", (double)off->encoder_us / 1e3, soff->median, soff->mad);
    printf("  encoder time saved: %.1f ms of %.1f ms (%.0f%%), %.2f ms per turn\n",
           (double)(off->encoder_us - on->encoder_us) / 1e3, (double)off->encoder_us / 1e3,
           off->encoder_us
               ? 100.0 * (double)(off->encoder_us - on->encoder_us) / (double)off->encoder_us
               : 0.0,
           (double)(off->encoder_us - on->encoder_us) / 1e3 / (double)on->turns);
    printf("  TTFT without / with the VIS cache (later turns): %.3fx (medians %.1f / %.1f ms; "
           "p99 %.1f / %.1f ms)\n",
           soff->median / son->median, soff->median, son->median, soff->p99, son->p99);
}

int main(int argc, char **argv)
{
    const char *stratad = argc > 1 ? argv[1] : NULL;
    bv_conf_t cf = {3, 4, 256, 128, 256, 3, 8, 3};
    bench_opt_t opts[] = {
        {"--sessions", BENCH_OPT_SIZE, &cf.sessions},
        {"--turns", BENCH_OPT_SIZE, &cf.turns},
        {"--history", BENCH_OPT_SIZE, &cf.history},
        {"--turn-tokens", BENCH_OPT_SIZE, &cf.turn_tokens},
        {"--image-size", BENCH_OPT_SIZE, &cf.image_size},
        {"--pool", BENCH_OPT_SIZE, &cf.pool},
        {"--decode", BENCH_OPT_SIZE, &cf.decode},
        {"--rounds", BENCH_OPT_SIZE, &cf.rounds},
    };
    bv_side_t *on = calloc(1, sizeof(*on)), *off = calloc(1, sizeof(*off));
    im_image_t *pool;
    st_model_config_t mc;
    st_model_t *m = NULL;
    tc_cluster_t cl;
    bench_stats_t son, soff;
    int rc = 0;

    if (!stratad || stratad[0] == '-' ||
        bench_opts(argc, argv, 2, opts, sizeof(opts) / sizeof(opts[0])) != 0 || cf.turns < 2 ||
        cf.sessions < 1 || cf.pool < 1 || cf.rounds < 1 || cf.decode > 256 || cf.image_size < 16 ||
        cf.image_size > 2048 || !on || !off) {
        fprintf(stderr, "usage: bench_engine_vis STRATAD [--sessions N] [--turns N>=2] "
                        "[--history N] [--turn-tokens N] [--image-size 16..2048] [--pool N] "
                        "[--decode 0..256] [--rounds N]\n");
        return 2;
    }
    lg_set_level(LG_WARN);
    on->name = "on", on->vis = 1;
    off->name = "off", off->vis = 0;
    pool = calloc(cf.pool, sizeof(*pool));
    st_model_config_default(&mc);
    for (size_t k = 0; pool && k < cf.pool; k++) {
        if (im_generate(100 + k, (uint32_t)cf.image_size, (uint32_t)cf.image_size, 3, &pool[k]) !=
            ST_OK) {
            return 1;
        }
    }
    if (!pool || st_model_create(&mc, &m) != ST_OK || tc_start(&cl, stratad, 3, NULL) != 0) {
        fprintf(stderr, "bench_engine_vis: setup failed\n");
        return 1;
    }
    printf("engine images: default shape (%s, d_model %u), 3 stratad, inline transport; %zu "
           "rounds x %zu sessions x %zu turns (%zu + %zu text tokens, %zu decoded), each turn "
           "one %zux%zu image (%" PRIu64 " tokens) of a pool of %zu\n",
           mc.pattern, mc.d_model, cf.rounds, cf.sessions, cf.turns, cf.history, cf.turn_tokens,
           cf.decode, cf.image_size, cf.image_size,
           st_engine_image_tokens((uint32_t)cf.image_size, (uint32_t)cf.image_size), cf.pool);
    for (unsigned r = 0; rc == 0 && r < cf.rounds; r++) {
        /* Alternate which engine runs first. */
        bv_side_t *a = r % 2 ? off : on, *b = r % 2 ? on : off;

        rc = bv_round(cl.peers, &cf, m, pool, r, a);
        if (rc == 0) {
            rc = bv_round(cl.peers, &cf, m, pool, r, b);
        }
    }
    if (rc != 0) {
        fprintf(stderr, "bench_engine_vis: a turn failed\n");
    } else {
        bench_stats(on->ttft, on->n, &son);
        bench_stats(off->ttft, off->n, &soff);
        bv_report(on, off, &son, &soff);
    }
    tc_stop_all(&cl);
    for (size_t k = 0; k < cf.pool; k++) {
        im_free(&pool[k]);
    }
    free(pool);
    st_model_free(m);
    free(on);
    free(off);
    return rc;
}
