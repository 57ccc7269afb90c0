/*
 * runner.c - strata-engine: runs a multi-turn long-context conversation
 * through the reference model beside a strata cluster, with engine sessions
 * (engine/session.c). The first turn is a long history; every later turn
 * adds tokens and is run over the whole conversation, so that the turns
 * before it are resumed from the cluster. It prints one line per turn
 * (prompt, reused and recomputed tokens, time to first token, decode time
 * per token, bytes fetched, overlap efficiency, local hit rate; with images
 * (runner_images.c) VIS hits and encoder time) and a summary, and can serve
 * its own metrics (docs/engine.md, "strata-engine").
 *
 * Exit codes: 0 success; 1 a runtime failure (the cluster is unreachable, a
 * turn or the session record failed); 2 a usage error.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "clock.h"
#include "runner.h"
#include "config.h"
#include "log.h"

typedef struct rn_conf {
    /* cluster */
    char *nodes, *tenant, *model, *token, *transport;
    char *tls_ca, *tls_cert, *tls_key;
    char *etcd; /* membership on etcd: the nodes from there (docs/membership.md) */
    uint64_t timeout_ms;
    int64_t replicas, write_quorum;
    int durable;
    /* model */
    char *pattern;
    int64_t d_model, vocab, block_tokens, topk, moe_experts, seed;
    int shape;
    /* engine */
    int64_t kda_interval, local_blocks, prefill_chunk;
    int device, remote_scoring;
    /* workload */
    int64_t turns, history_tokens, turn_tokens, decode_tokens, token_seed;
    char *image, *gen_image_size;
    int64_t gen_images, gen_image_seed;
    int vis_cache;
    char *session;
    uint64_t session_ttl_ms;
    int keep_session, compare, progress;
    /* metrics, logs */
    char *metrics_listen;
    char *metrics_tls_cert, *metrics_tls_key, *metrics_token_file;
    uint64_t metrics_linger_ms;
    int log_level;
} rn_conf_t;

/* docs/engine.md, "Numerical consistency": resumed against full recompute. */
#define RN_TOLERANCE           1e-5
/* On the CUDA path with a bounded pool the remote rows are a second bf16 partial
 * (docs/engine.md, "The CUDA path"): the split rounds differently. */
#define RN_TOLERANCE_CUDA_POOL 2e-2

static const char *const rn_shapes[] = {"default", "gpu", NULL};
/* In the order of st_engine_device_t. */
static const char *const rn_devices[] = {"cpu", "cuda", "auto", NULL};

#define RN_OFF(m) offsetof(rn_conf_t, m)
static const cfg_option_t rn_options[] = {
    {"nodes", CFG_STRING, RN_OFF(nodes), "127.0.0.1:7700", 0, 0, 0, NULL, 'n',
     "the cluster's nodes, host:port,host:port (as for the strata command)"},
    {"etcd", CFG_STRING, RN_OFF(etcd), "", 0, 0, 0, NULL, 0,
     "etcd endpoints (http://host:port,...): find the cluster's members there, in place of "
     "--nodes (the cluster's prefix /strata/)"},
    {"tenant", CFG_STRING, RN_OFF(tenant), "default", 0, 0, 0, NULL, 0, "tenant name"},
    {"model", CFG_STRING, RN_OFF(model), "", 0, 0, 0, NULL, 0,
     "model name of the namespace, which must name the weights (default: "
     "reference-<fingerprint of shape and seed>)"},
    {"token", CFG_STRING, RN_OFF(token), "", 0, 0, CFG_SENSITIVE, NULL, 0, "authentication token"},
    {"timeout", CFG_DURATION, RN_OFF(timeout_ms), "30s", 10, 600000, 0, NULL, 0,
     "deadline of one cluster call"},
    {"replicas", CFG_INT, RN_OFF(replicas), "0", 0, 16, 0, NULL, 0,
     "copies of KDA and SESSION objects (0: the cluster's, from Hello)"},
    {"durable", CFG_BOOL, RN_OFF(durable), "false", 0, 0, 0, NULL, 0,
     "KDA checkpoints and the session record are durable writes: acknowledged when "
     "write_quorum replicas committed them to disk (the daemons need data_dir); fewer are "
     "logged and counted (strata_engine_partial_writes_total)"},
    {"write_quorum", CFG_INT, RN_OFF(write_quorum), "0", 0, 16, 0, NULL, 0,
     "replicas that must commit a durable write to disk (0: all of replicas)"},
    {"transport", CFG_STRING, RN_OFF(transport), "inline", 0, 0, 0, NULL, 0,
     "how object bytes move: inline (in the control plane), ucx, libfabric[:provider]"},
    {"tls_ca", CFG_STRING, RN_OFF(tls_ca), "", 0, 0, 0, NULL, 0,
     "PEM file of the CA of the daemons' certificates: talk TLS (empty: plaintext)"},
    {"tls_cert", CFG_STRING, RN_OFF(tls_cert), "", 0, 0, 0, NULL, 0,
     "PEM file of a client certificate, for daemons that ask for one (needs tls_ca)"},
    {"tls_key", CFG_STRING, RN_OFF(tls_key), "", 0, 0, 0, NULL, 0,
     "PEM file of tls_cert's private key"},
    {"shape", CFG_ENUM, RN_OFF(shape), "default", 0, 0, 0, rn_shapes, 0,
     "the model's dimensions: default (st_model_config_default, small for two CPU cores) or "
     "gpu (st_model_config_gpu: DSA 64 heads over rows of 512 + 64, indexer and KDA heads of "
     "128, the shapes the CUDA kernels take); the flags below set the rest"},
    {"pattern", CFG_STRING, RN_OFF(pattern), "KDKD", 0, 0, 0, NULL, 0,
     "the model's layers, one letter each: K a KDA layer, D a DSA layer"},
    {"d_model", CFG_INT, RN_OFF(d_model), "128", 16, 8192, 0, NULL, 0,
     "width of the residual stream"},
    {"vocab", CFG_INT, RN_OFF(vocab), "512", 2, 1 << 20, 0, NULL, 0,
     "vocabulary size; token ids are 0..vocab-1"},
    {"block_tokens", CFG_INT, RN_OFF(block_tokens), "64", 16, 4096, 0, NULL, 0,
     "tokens per block, a multiple of 16; must equal the cluster's"},
    {"topk", CFG_INT, RN_OFF(topk), "128", 1, 65536, 0, NULL, 0, "rows each DSA query attends to"},
    {"moe_experts", CFG_INT, RN_OFF(moe_experts), "4", 0, 256, 0, NULL, 0,
     "experts of the feed-forward (0: dense)"},
    {"seed", CFG_INT, RN_OFF(seed), "1", 0, INT64_MAX, 0, NULL, 0, "seed of the synthetic weights"},
    {"kda_interval", CFG_INT, RN_OFF(kda_interval), "16", 1, 65536, 0, NULL, 0,
     "blocks between KDA checkpoints"},
    {"prefill_chunk", CFG_INT, RN_OFF(prefill_chunk), "0", 0, ST_ENGINE_PREFILL_MAX, 0, NULL, 0,
     "tokens per chunk of the prefill, computed layer by layer: a multiple of block_tokens, 1 "
     "(token by token) or 0 (1024 rounded down to a multiple of block_tokens); with "
     "local_blocks or remote_scoring the prompt runs token by token"},
    {"local_blocks", CFG_INT, RN_OFF(local_blocks), "0", 0, 1 << 24, 0, NULL, 0,
     "closed blocks whose KV rows stay local per DSA layer; older rows are read from the "
     "cluster (0: every block stays local)"},
    {"remote_scoring", CFG_BOOL, RN_OFF(remote_scoring), "false", 0, 0, 0, NULL, 0,
     "near-data scoring: the DSA indexer scores the blocks outside the local pool on the nodes "
     "that hold their keys (Score calls), so the engine neither fetches nor holds their indexer "
     "keys; needs local_blocks and the cpu device (fallbacks: "
     "strata_engine_score_fallbacks_total)"},
    {"device", CFG_ENUM, RN_OFF(device), "cpu", 0, 0, 0, rn_devices, 0,
     "where attention runs: cpu (the C kernels), cuda (the CUDA kernels: needs a GPU, a CUDA "
     "build and --shape gpu), auto (cuda when all three hold)"},
    {"turns", CFG_INT, RN_OFF(turns), "4", 1, 100000, 0, NULL, 't', "turns of the conversation"},
    {"history_tokens", CFG_INT, RN_OFF(history_tokens), "8192", 1, 1 << 24, 0, NULL, 0,
     "tokens of the first turn (the long context)"},
    {"turn_tokens", CFG_INT, RN_OFF(turn_tokens), "512", 0, 1 << 24, 0, NULL, 0,
     "tokens the user adds in each later turn"},
    {"decode_tokens", CFG_INT, RN_OFF(decode_tokens), "32", 0, 1 << 20, 0, NULL, 0,
     "tokens generated in each turn (greedy)"},
    {"token_seed", CFG_INT, RN_OFF(token_seed), "1", 0, INT64_MAX, 0, NULL, 0,
     "seed of the deterministic user tokens"},
    {"image", CFG_STRING, RN_OFF(image), "", 0, 0, 0, NULL, 0,
     "image files in the turns, comma-separated FILE@POS (turn 1) or FILE@TURN:POS, POS a "
     "position in the turn's text tokens; binary PGM/PPM (maxval 255) or PNG"},
    {"gen_images", CFG_INT, RN_OFF(gen_images), "0", 0, 64, 0, NULL, 0,
     "generated images in every turn, spread evenly over its text (the same images each turn)"},
    {"gen_image_size", CFG_STRING, RN_OFF(gen_image_size), "64x64", 0, 0, 0, NULL, 0,
     "size of the generated images, WxH pixels (16 x 16 pixels make one image token)"},
    {"gen_image_seed", CFG_INT, RN_OFF(gen_image_seed), "1", 0, INT64_MAX, 0, NULL, 0,
     "seed of the generated images (image k: seed + k)"},
    {"vis_cache", CFG_BOOL, RN_OFF(vis_cache), "true", 0, 0, 0, NULL, 0,
     "look up and write each image's embeddings as a VIS object (a hit skips the vision "
     "encoder)"},
    {"session", CFG_STRING, RN_OFF(session), "strata-engine", 0, 0, 0, NULL, 's',
     "session id in the cluster (1..63 bytes)"},
    {"session_ttl", CFG_DURATION, RN_OFF(session_ttl_ms), "0", 0, 2592000000ll, 0, NULL, 0,
     "time to live of the session record (0: the cluster's session_ttl)"},
    {"keep_session", CFG_BOOL, RN_OFF(keep_session), "false", 0, 0, 0, NULL, 0,
     "leave the session record in the cluster at the end instead of closing it"},
    {"compare", CFG_BOOL, RN_OFF(compare), "false", 0, 0, 0, NULL, 0,
     "also compute every later turn in full without the cache: its time, and the largest "
     "relative difference of the logits (above 1e-5 is a failure; 2e-2 on cuda with "
     "local_blocks)"},
    {"progress", CFG_BOOL, RN_OFF(progress), "false", 0, 0, 0, NULL, 0,
     "draw the prefill progress bar on stderr even when it is not a terminal"},
    {"metrics_listen", CFG_STRING, RN_OFF(metrics_listen), "", 0, 0, 0, NULL, 0,
     "HTTP address of the engine's /metrics and /stats, host:port (empty: off)"},
    {"metrics_linger", CFG_DURATION, RN_OFF(metrics_linger_ms), "0", 0, 3600000, 0, NULL, 0,
     "keep serving /metrics this long after the last turn"},
    {"metrics_tls_cert", CFG_STRING, RN_OFF(metrics_tls_cert), "", 0, 0, 0, NULL, 0,
     "PEM certificate of the metrics server: HTTPS (empty: HTTP)"},
    {"metrics_tls_key", CFG_STRING, RN_OFF(metrics_tls_key), "", 0, 0, 0, NULL, 0,
     "PEM private key of metrics_tls_cert"},
    {"metrics_token_file", CFG_STRING, RN_OFF(metrics_token_file), "", 0, 0, 0, NULL, 0,
     "file of the bearer token that /metrics and /stats require (empty: none)"},
    {"log_level", CFG_ENUM, RN_OFF(log_level), "warn", 0, 0, 0, lg_level_names, 0,
     "lowest level logged on stderr"},
};

static const cfg_table_t rn_table = {
    "strata-engine",
    "runs a multi-turn long-context conversation through the reference model beside a strata "
    "cluster and prints, per turn, reused and recomputed tokens, time to first token, decode "
    "time, bytes fetched, overlap efficiency and local hit rate",
    NULL,
    rn_options,
    sizeof(rn_options) / sizeof(rn_options[0]),
};

/* ------------------------------------------------------------ progress -- */

typedef struct rn_progress {
    int on;
    unsigned turn;
    uint64_t t0_ns, last_ns;
    int drawn;
} rn_progress_t;

/* The engine's on_progress hook: a bar on stderr, at most 10 times a second. */
static void rn_progress_cb(void *arg, size_t done, size_t total)
{
    rn_progress_t *p = arg;
    uint64_t now = cm_mono_ns();
    int width = 30, filled;

    if (!p->on || total == 0 || (done < total && now - p->last_ns < 100000000ull)) {
        return;
    }
    p->last_ns = now;
    filled = (int)((double)done / (double)total * width);
    fprintf(stderr, "\rturn %u prefill [%.*s%*s] %3d%% %zu/%zu tokens %.1fs", p->turn, filled,
            "##############################", width - filled, "",
            (int)(100.0 * (double)done / (double)total), done, total,
            (double)(now - p->t0_ns) / 1e9);
    p->drawn = 1;
}

/* Erases the bar before a turn's line is printed. */
static void rn_progress_clear(rn_progress_t *p)
{
    if (p->drawn) {
        fprintf(stderr, "\r%*s\r", 79, "");
        p->drawn = 0;
    }
}

/* -------------------------------------------------------------- helpers -- */

/* User token i of the workload: a pure function of (token_seed, i). */
static uint32_t rn_token(const rn_conf_t *cf, uint64_t i)
{
    return (uint32_t)(XXH3_64bits_withSeed(&i, sizeof(i), (uint64_t)cf->token_seed) %
                      (uint64_t)cf->vocab);
}

static void rn_fmt(char *buf, size_t len, int ok, const char *fmt, double v)
{
    if (ok) {
        snprintf(buf, len, fmt, v);
    } else {
        snprintf(buf, len, "-");
    }
}

/* Checks what the table cannot; prints the message. Returns 0 or 2. */
static int rn_check(const rn_conf_t *cf)
{
    size_t sl = strlen(cf->session);

    if (cf->nodes[0] == '\0' && cf->etcd[0] == '\0') {
        fprintf(stderr, "strata-engine: --nodes is empty (give host:port,host:port)\n");
        return 2;
    }
    if (sl == 0 || sl > 63) {
        fprintf(stderr, "strata-engine: --session '%s' must be 1..63 bytes\n", cf->session);
        return 2;
    }
    if (strlen(cf->pattern) == 0 || strlen(cf->pattern) > ST_MODEL_MAX_LAYERS ||
        strspn(cf->pattern, "KD") != strlen(cf->pattern)) {
        fprintf(stderr,
                "strata-engine: --pattern '%s' must be 1..%d letters, each K (KDA) or D (DSA)\n",
                cf->pattern, ST_MODEL_MAX_LAYERS);
        return 2;
    }
    if (cf->block_tokens % 16 != 0) {
        fprintf(stderr, "strata-engine: --block-tokens %" PRId64 " is not a multiple of 16\n",
                cf->block_tokens);
        return 2;
    }
    if (cf->metrics_listen[0] != '\0') {
        const char *colon = strrchr(cf->metrics_listen, ':');
        char *end = NULL;
        long port = colon ? strtol(colon + 1, &end, 10) : -1;

        if (colon == NULL || colon == cf->metrics_listen || end == colon + 1 || *end != '\0' ||
            port < 0 || port > 65535) {
            fprintf(stderr, "strata-engine: --metrics-listen '%s' is not host:port\n",
                    cf->metrics_listen);
            return 2;
        }
    }
    if (cf->local_blocks > 0 && strchr(cf->pattern, 'D') == NULL) {
        fprintf(stderr, "strata-engine: --local-blocks needs a DSA layer in --pattern\n");
        return 2;
    }
    if (cf->remote_scoring && cf->local_blocks == 0) {
        fprintf(stderr, "strata-engine: --remote-scoring needs --local-blocks\n");
        return 2;
    }
    return 0;
}

/* -------------------------------------------------------------- the run -- */

typedef struct rn_run {
    const rn_conf_t *cf;
    st_model_t *model;
    st_client_t *client;
    st_engine_t *engine, *ref;
    st_engine_session_t *sess;
    rn_metrics_t *mx;
    rn_progress_t prog;
    uint32_t bt;
    float *logits, *ref_logits;
    uint32_t *user;  /* a turn's user tokens */
    double *ttft_ms; /* per turn */
    rn_images_t imgs;
    uint64_t vis[4]; /* images, VIS hits, VIS misses, encoder us: the run's */
} rn_run_t;

static void rn_header(const rn_run_t *r, const char *model_name)
{
    const rn_conf_t *cf = r->cf;

    printf("strata-engine: model %s (pattern %s, d_model %" PRId64 ", top-k %" PRId64
           ", block %u tokens), namespace %s/%s\n",
           model_name, cf->pattern, cf->d_model, cf->topk, r->bt, cf->tenant, model_name);
    printf("engine on %s\n", st_engine_device_used(r->engine) == ST_ENGINE_DEVICE_CUDA
                                 ? "cuda (DSA and KDA attention on the GPU)"
                                 : "cpu");
    printf("cluster %s (transport %s); session %s; %" PRId64 " turns: %" PRId64
           " tokens of history, +%" PRId64 " per turn, %" PRId64 " decoded per turn",
           cf->nodes, cf->transport, cf->session, cf->turns, cf->history_tokens, cf->turn_tokens,
           cf->decode_tokens);
    if (cf->local_blocks > 0) {
        printf(", %" PRId64 " local blocks%s", cf->local_blocks,
               cf->remote_scoring ? ", near-data scoring" : "");
    }
    printf("\n\n%4s %8s %8s %10s %9s %13s %10s %7s %9s", "turn", "prompt", "reused", "recomputed",
           "ttft_ms", "decode_ms/tok", "fetched_MB", "overlap", "local_hit");
    if (r->imgs.n > 0) {
        printf(" %7s %10s", "vis_hit", "encoder_ms");
    }
    if (cf->compare) {
        printf(" %9s %8s %12s", "full_ms", "speedup", "max_rel_diff");
    }
    printf("\n");
    fflush(stdout);
}

/* Computes the turn in full without the cache; prints its columns. */
static int rn_compare(rn_run_t *r, unsigned turn, size_t prompt, double ttft_ms)
{
    const uint32_t *conv = st_engine_session_tokens(r->sess);
    st_engine_stats_t sr;
    double diff = 0.0, ref = 0.0;
    st_status_t st;

    if (turn == 1) {
        printf(" %9s %8s %12s", "-", "-", "-");
        return 0;
    }
    st = st_engine_run_images(r->ref, conv, prompt, r->imgs.placed, r->imgs.n_placed, 0,
                              r->ref_logits, NULL, &sr);
    if (st != ST_OK) {
        fprintf(stderr, "strata-engine: the full recompute of turn %u failed: %s\n", turn,
                st_strerror(st));
        return 1;
    }
    for (int64_t v = 0; v < r->cf->vocab; v++) {
        diff = fmax(diff, fabs((double)r->logits[v] - r->ref_logits[v]));
        ref = fmax(ref, fabs((double)r->ref_logits[v]));
    }
    diff = ref > 0 ? diff / ref : diff;
    printf(" %9.1f %7.1fx %12.3g", (double)sr.ttft_us / 1e3, (double)sr.ttft_us / 1e3 / ttft_ms,
           diff);
    double tol =
        st_engine_device_used(r->engine) == ST_ENGINE_DEVICE_CUDA && r->cf->local_blocks > 0
            ? RN_TOLERANCE_CUDA_POOL
            : RN_TOLERANCE;

    if (diff > tol) {
        fflush(stdout);
        fprintf(stderr,
                "\nstrata-engine: turn %u: the resumed logits differ from the full recompute by "
                "%.3g (max |diff| / max |logit|), above the tolerance %g\n",
                turn, diff, tol);
        return 1;
    }
    return 0;
}

/* One turn: the user's tokens, the reply, the line. Returns 0 or 1. */
static int rn_turn(rn_run_t *r, unsigned turn, uint64_t *next_user, uint64_t sums[4])
{
    const rn_conf_t *cf = r->cf;
    size_t add = (size_t)(turn == 1 ? cf->history_tokens : cf->turn_tokens), prompt;
    uint32_t n_decode = (uint32_t)cf->decode_tokens;
    st_engine_stats_t st;
    char dec[32], ovl[32], loc[32];
    uint64_t reused, rows;
    st_status_t s;

    size_t n_img = 0;

    for (size_t i = 0; i < add; i++) {
        r->user[i] = rn_token(cf, (*next_user)++);
    }
    if (rn_images_append(&r->imgs, r->sess, turn, r->user, add, &n_img) != 0) {
        return 1;
    }
    prompt = st_engine_session_length(r->sess);
    r->prog.turn = turn;
    r->prog.t0_ns = cm_mono_ns();
    r->prog.last_ns = 0;
    s = st_engine_session_generate(r->sess, n_decode, NULL, r->logits, &st);
    rn_progress_clear(&r->prog);
    if (s != ST_OK) {
        fprintf(stderr, "strata-engine: turn %u failed: %s (the error line above says why)\n", turn,
                st_strerror(s));
        return 1;
    }
    reused = st.resumed_blocks * r->bt;
    rows = st.rows_local + st.rows_remote;
    r->ttft_ms[turn - 1] = (double)st.ttft_us / 1e3;
    sums[0] += prompt;
    sums[1] += reused;
    sums[2] += st.computed_tokens;
    sums[3] += st.bytes_fetched;
    /* Counted before the line is printed: a scrape that saw the line sees the turn. */
    rn_metrics_turn(r->mx, prompt, &st, n_decode, r->bt);
    rn_fmt(dec, sizeof(dec), n_decode > 0, "%.2f", (double)st.decode_us / 1e3 / n_decode);
    rn_fmt(ovl, sizeof(ovl), st.fetch_us > 0, "%.2f", st_engine_overlap(&st));
    rn_fmt(loc, sizeof(loc), rows > 0, "%.1f%%", 100.0 * (double)st.rows_local / (double)rows);
    printf("%4u %8zu %8" PRIu64 " %10" PRIu64 " %9.1f %13s %10.2f %7s %9s", turn, prompt, reused,
           st.computed_tokens, r->ttft_ms[turn - 1], dec, (double)st.bytes_fetched / 1e6, ovl, loc);
    if (r->imgs.n > 0) {
        char vh[32];

        snprintf(vh, sizeof(vh), "%" PRIu64 "/%" PRIu64, st.vis_hits, st.vis_hits + st.vis_misses);
        printf(" %7s %10.1f", st.vis_hits + st.vis_misses ? vh : "-", (double)st.encoder_us / 1e3);
    }
    r->vis[0] += n_img;
    r->vis[1] += st.vis_hits;
    r->vis[2] += st.vis_misses;
    r->vis[3] += st.encoder_us;
    if (cf->compare && rn_compare(r, turn, prompt, r->ttft_ms[turn - 1]) != 0) {
        printf("\n");
        return 1;
    }
    printf("\n");
    fflush(stdout);
    if (st.write_failures > 0 || st.fetch_misses > 0) {
        fprintf(stderr,
                "strata-engine: turn %u: %" PRIu64 " objects not stored, %" PRIu64
                " fetches missed (the engine recomputed; see the warnings above)\n",
                turn, st.write_failures, st.fetch_misses);
    }
    if (st.partial_writes > 0) {
        fprintf(stderr,
                "strata-engine: turn %u: %" PRIu64 " durable writes reached fewer replicas than "
                "write_quorum %u of %u (stored, but not as durable as asked)\n",
                turn, st.partial_writes, st_client_write_quorum(r->client),
                st_client_replicas(r->client));
    }
    return 0;
}

static void rn_summary(const rn_run_t *r, unsigned turns, const uint64_t sums[4], uint64_t t0)
{
    printf("\nsummary over %u turns (%.1f s):\n", turns, (double)(cm_mono_ns() - t0) / 1e9);
    printf("  token hit rate  %.1f%%  (%" PRIu64 " of %" PRIu64 " prompt tokens reused, %" PRIu64
           " recomputed)\n",
           sums[0] ? 100.0 * (double)sums[1] / (double)sums[0] : 0.0, sums[1], sums[0], sums[2]);
    printf("  ttft vs turn 1 ");
    for (unsigned t = 1; t < turns; t++) {
        printf(" turn %u: %.3fx%s", t + 1, r->ttft_ms[t] / r->ttft_ms[0], t + 1 < turns ? "," : "");
    }
    printf(turns > 1 ? "  (turn 1: %.1f ms)\n" : " turn 1: %.1f ms\n", r->ttft_ms[0]);
    /* One line for scripts and tests. */
    if (r->imgs.n > 0) {
        printf("  images          %" PRIu64 " in the turns; VIS %" PRIu64 " hits, %" PRIu64
               " misses (encoded); encoder %.1f ms\n",
               r->vis[0], r->vis[1], r->vis[2], (double)r->vis[3] / 1e3);
    }
    printf("result turns=%u prompt_tokens=%" PRIu64 " reused_tokens=%" PRIu64
           " computed_tokens=%" PRIu64 " fetched_bytes=%" PRIu64 " token_hit_rate=%.6f",
           turns, sums[0], sums[1], sums[2], sums[3],
           sums[0] ? (double)sums[1] / (double)sums[0] : 0.0);
    if (r->imgs.n > 0) {
        printf(" images=%" PRIu64 " vis_hits=%" PRIu64 " vis_misses=%" PRIu64 " encoder_ms=%.1f",
               r->vis[0], r->vis[1], r->vis[2], (double)r->vis[3] / 1e3);
    }
    printf("\n");
    fflush(stdout);
}

/* Connects, builds the model and the engines, opens the session. Returns 0, 1 or 2. */
static int rn_setup(rn_run_t *r, char *model_name, size_t name_len)
{
    const rn_conf_t *cf = r->cf;
    st_model_config_t mc;
    st_client_params_t cp = {0};
    st_engine_params_t ep = {0};
    st_status_t s;

    s = rn_images_load(&r->imgs, cf->image, cf->gen_images, cf->gen_image_size, cf->gen_image_seed,
                       cf->turns);
    if (s != 0) {
        return (int)s;
    }
    if (cf->shape == 1) {
        st_model_config_gpu(&mc);
    } else {
        st_model_config_default(&mc);
    }
    snprintf(mc.pattern, sizeof(mc.pattern), "%s", cf->pattern);
    mc.d_model = (uint32_t)cf->d_model;
    mc.vocab = (uint32_t)cf->vocab;
    mc.block_tokens = (uint32_t)cf->block_tokens;
    mc.topk = (uint32_t)cf->topk;
    mc.moe_experts = (uint32_t)cf->moe_experts;
    mc.moe_topk = mc.moe_experts == 0 ? 0 : (mc.moe_experts < 2 ? 1 : 2);
    mc.seed = (uint64_t)cf->seed;
    s = st_model_create(&mc, &r->model);
    if (s != ST_OK) {
        fprintf(stderr,
                "strata-engine: the model shape is refused: %s (the line above names "
                "the field)\n",
                st_strerror(s));
        return s == ST_ERR_INVALID ? 2 : 1;
    }
    if (cf->model[0] != '\0') {
        snprintf(model_name, name_len, "%s", cf->model);
    } else {
        snprintf(model_name, name_len, "reference-%016" PRIx64, st_model_fingerprint(r->model));
    }
    cp.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TENANT | ST_CLIENT_FIELD_MODEL |
                    ST_CLIENT_FIELD_TOKEN | ST_CLIENT_FIELD_TIMEOUT | ST_CLIENT_FIELD_REPLICAS |
                    ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_WRITE_QUORUM;
    cp.write_quorum = (uint32_t)cf->write_quorum;
    cp.nodes = cf->nodes;
    cp.tenant = cf->tenant;
    cp.model = model_name;
    cp.token = cf->token;
    cp.timeout_ms = (uint32_t)cf->timeout_ms;
    cp.replicas = (uint32_t)cf->replicas;
    cp.transport = cf->transport;
    cp.field_mask |= ST_CLIENT_FIELD_TLS_CA | ST_CLIENT_FIELD_TLS_CERT | ST_CLIENT_FIELD_TLS_KEY;
    cp.tls_ca = cf->tls_ca;
    cp.tls_cert = cf->tls_cert;
    cp.tls_key = cf->tls_key;
    if (cf->etcd[0] != '\0') {
        cp.field_mask |= ST_CLIENT_FIELD_ETCD;
        cp.etcd = cf->etcd;
    }
    s = st_client_connect(&cp, &r->client);
    if (s != ST_OK) {
        fprintf(stderr, "strata-engine: cannot connect to the cluster at %s: %s (%s)\n",
                cf->etcd[0] != '\0' ? cf->etcd : cf->nodes, st_client_last_error(), st_strerror(s));
        return s == ST_ERR_INVALID ? 2 : 1;
    }
    r->bt = st_client_block_tokens(r->client);
    if (r->bt != (uint32_t)cf->block_tokens) {
        fprintf(stderr,
                "strata-engine: --block-tokens %" PRId64
                " differs from the cluster's %u tokens per block\n",
                cf->block_tokens, r->bt);
        return 2;
    }
    ep.field_mask = ST_ENGINE_FIELD_CLIENT | ST_ENGINE_FIELD_KDA_INTERVAL |
                    ST_ENGINE_FIELD_ON_PROGRESS | ST_ENGINE_FIELD_LOCAL_BLOCKS |
                    ST_ENGINE_FIELD_DEVICE;
    ep.device = (uint32_t)cf->device;
    ep.field_mask |= ST_ENGINE_FIELD_DURABLE | ST_ENGINE_FIELD_VIS_CACHE;
    ep.durable = cf->durable != 0;
    ep.vis_cache = cf->vis_cache != 0;
    ep.client = r->client;
    ep.kda_interval = (uint32_t)cf->kda_interval;
    ep.on_progress = rn_progress_cb;
    ep.on_progress_arg = &r->prog;
    ep.local_blocks = (uint32_t)cf->local_blocks;
    ep.field_mask |= ST_ENGINE_FIELD_REMOTE_SCORING | ST_ENGINE_FIELD_PREFILL_CHUNK;
    ep.remote_scoring = cf->remote_scoring != 0;
    ep.prefill_chunk = (uint32_t)cf->prefill_chunk;
    s = st_engine_create(r->model, &ep, &r->engine);
    if (s == ST_OK && cf->compare) {
        /* The full recompute runs on the same device (its rounding is the path's). */
        st_engine_params_t rp = {.field_mask = ST_ENGINE_FIELD_DEVICE,
                                 .device = (uint32_t)st_engine_device_used(r->engine)};

        s = st_engine_create(r->model, &rp, &r->ref);
    }
    if (s != ST_OK) {
        fprintf(stderr, "strata-engine: cannot create the engine on --device %s: %s%s\n",
                rn_devices[cf->device], st_strerror(s),
                s == ST_ERR_INVALID || s == ST_ERR_UNSUPPORTED
                    ? " (the line above names the field and the constraint)"
                    : "");
        return s == ST_ERR_INVALID || s == ST_ERR_UNSUPPORTED ? 2 : 1;
    }
    r->logits = malloc(sizeof(float) * (size_t)cf->vocab);
    r->ref_logits = malloc(sizeof(float) * (size_t)cf->vocab);
    r->user =
        malloc(sizeof(uint32_t) * (size_t)(cf->history_tokens > cf->turn_tokens ? cf->history_tokens
                                                                                : cf->turn_tokens));
    r->ttft_ms = calloc((size_t)cf->turns, sizeof(double));
    if (!r->logits || !r->ref_logits || !r->user || !r->ttft_ms) {
        fprintf(stderr, "strata-engine: out of memory\n");
        return 1;
    }
    return 0;
}

static int rn_open_session(rn_run_t *r)
{
    st_status_t s =
        st_engine_session_open(r->engine, r->cf->session, r->cf->session_ttl_ms, &r->sess);

    if (s != ST_OK) {
        fprintf(stderr, "strata-engine: cannot open session %s: %s (%s)\n", r->cf->session,
                st_client_last_error(), st_strerror(s));
        return 1;
    }
    if (st_engine_session_info(r->sess)->length > 0) {
        printf("session %s reopened (its record covered %" PRIu64
               " tokens); this run starts a new conversation in it\n",
               r->cf->session, st_engine_session_info(r->sess)->length);
    }
    return 0;
}

static void rn_teardown(rn_run_t *r)
{
    if (r->sess != NULL && !r->cf->keep_session) {
        st_engine_session_close(r->sess);
    } else {
        st_engine_session_free(r->sess);
    }
    st_engine_free(r->ref);
    st_engine_free(r->engine);
    if (r->client != NULL) {
        st_client_close(r->client);
    }
    st_model_free(r->model);
    free(r->logits);
    free(r->ref_logits);
    free(r->user);
    free(r->ttft_ms);
    rn_images_free(&r->imgs);
}

static int rn_main(const rn_conf_t *cf)
{
    rn_run_t r = {0};
    char model_name[128], ns[300];
    uint64_t sums[4] = {0}, next_user = 0, t0 = cm_mono_ns();
    unsigned t = 0;
    int rc, port = 0;

    r.cf = cf;
    r.prog.on = cf->progress || isatty(STDERR_FILENO);
    rc = rn_setup(&r, model_name, sizeof(model_name));
    if (rc == 0 && cf->metrics_listen[0] != '\0') {
        snprintf(ns, sizeof(ns), "%s/%s", cf->tenant, model_name);
        if (rn_metrics_start(cf->metrics_listen, ns, cf->metrics_tls_cert, cf->metrics_tls_key,
                             cf->metrics_token_file, &r.mx, &port) != ST_OK) {
            fprintf(stderr, "strata-engine: cannot serve metrics on %s\n", cf->metrics_listen);
            rc = 1;
        } else {
            printf("metrics_port=%d\n", port);
        }
    }
    if (rc == 0) {
        rc = rn_open_session(&r);
    }
    if (rc == 0) {
        rn_header(&r, model_name);
        for (t = 1; t <= (unsigned)cf->turns && rc == 0; t++) {
            rc = rn_turn(&r, t, &next_user, sums);
        }
        if (rc == 0) {
            rn_summary(&r, (unsigned)cf->turns, sums, t0);
        }
    }
    /* The session is closed and the client gone before the metrics linger. */
    rn_teardown(&r);
    if (r.mx != NULL && cf->metrics_linger_ms > 0) {
        fflush(stdout);
        nanosleep(&(struct timespec){(time_t)(cf->metrics_linger_ms / 1000),
                                     (long)(cf->metrics_linger_ms % 1000) * 1000000L},
                  NULL);
    }
    rn_metrics_stop(r.mx);
    return rc;
}

int main(int argc, char **argv)
{
    rn_conf_t cf;
    int rc;

    lg_set_ident("strata-engine");
    rc = cfg_main(&rn_table, &cf, sizeof(cf), argc, argv, "STRATA_ENGINE_MARKDOWN");
    if (rc >= 0) {
        return rc;
    }
    if ((rc = rn_check(&cf)) == 0) {
        lg_set_level((lg_level_t)cf.log_level);
        rc = rn_main(&cf);
    }
    cfg_free(&rn_table, &cf);
    return rc;
}
