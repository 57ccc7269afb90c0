/*
 * bench_engine_gpu.c - the engine's CUDA path against its CPU path at long
 * context, the "gpu" shape (st_model_config_gpu, top-k TOPK), one stratad on
 * loopback, the resume's reads over TRANSPORT (default ucx; inline: the gRPC
 * calls themselves):
 *
 *  1. the GPU engine computes a HISTORY-token turn by chunked prefill and
 *     writes its objects (prefill time, tokens/s, its matrix products'
 *     rate against the bf16 roofline); 1b. the token-by-token path and the
 *     chunked one on min(HISTORY, 4096) tokens without the cache; 1c. the
 *     chunked prefill of the whole prompt without the cache (what a resume
 *     saves);
 *  2. the GPU engine answers HISTORY + 32 tokens by resuming the history
 *     (TTFT), then decodes DECODE tokens at that context (ms/token), REPS
 *     times, the median; 2b. that TTFT against 1c;
 *     2a. the resume's load rate (bytes over the time from the first read
 *     posted to the last upload done) against the two limits measured first,
 *     in the same run: the pinned host-to-device copy (cudaMemcpy from
 *     cudaMallocHost memory) and the transport's own streaming rate (the bare
 *     loop of bench_transport_loop.h: one-sided gets of one KV object each,
 *     32 in flight, from a spawned target on this host);
 *  3. the CPU engine does the same from the objects the GPU engine wrote
 *     (once: its decode at long context is slow), and the difference of its
 *     logits from the GPU's;
 *  4. decode at that context with 10% of the blocks in the device pool
 *     (local_blocks), the older selected rows read from the cluster while the
 *     GPU computes the local partial, against every block in HBM; and the
 *     same pool with the reads waited for first (serial_rows): overlap
 *     efficiency T(pipelined) / max(T(fetch only), T(all local)) with
 *     T(fetch only) = T(serial) - T(all local); the three alternate, REPS
 *     rounds;
 *  5. batched decode (st_engine_run_batch): 1, 8 and 32 GPU engines, each
 *     resuming the first min(HISTORY, 32768) tokens of the history with a
 *     32-token tail of its own, then DECODE tokens in lockstep: tokens per
 *     second (all engines) and ms per step, the median of REPS.
 *
 * usage: bench_engine_gpu STRATAD [HISTORY=32768] [DECODE=32] [REPS=3] [TOPK=2048]
 *                         [TRANSPORT=ucx|libfabric|inline] [COPY_THREADS=8]
 * (BENCH_NO_CPU=1 skips 3; BENCH_NO_RECOMPUTE=1 skips 1b and 1c, and 2b then compares with
 * 1's prefill scaled to the prompt.)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda_runtime_api.h>

#include "bench_transport_loop.h"
#include "bench_util.h"
#include "cluster.h"
#include "strata/engine.h"

#define TAIL 32

static st_model_t *model;
static st_client_t *client;

/* An engine on device; cached: with the cluster; chunk: prefill_chunk (1: token by token). */
static st_engine_t *engine_ex(uint32_t device, int cached, uint32_t chunk)
{
    st_engine_params_t ep = {0};
    st_engine_t *e = NULL;

    ep.field_mask = ST_ENGINE_FIELD_DEVICE | ST_ENGINE_FIELD_PREFILL_CHUNK;
    if (cached) {
        ep.field_mask |= ST_ENGINE_FIELD_CLIENT;
        ep.client = client;
    }
    ep.device = device;
    ep.prefill_chunk = chunk;
    if (st_engine_create(model, &ep, &e) != ST_OK) {
        fprintf(stderr, "engine create failed (device %u)\n", device);
        exit(1);
    }
    return e;
}

static st_engine_t *engine(uint32_t device)
{
    return engine_ex(device, 1, 0);
}

/* The GPU engine with a device pool of local_blocks blocks; serial: rows waited for first. */
static st_engine_t *engine_pool(uint32_t local_blocks, int serial)
{
    st_engine_params_t ep = {0};
    st_engine_t *e = NULL;

    ep.field_mask = ST_ENGINE_FIELD_DEVICE | ST_ENGINE_FIELD_CLIENT | ST_ENGINE_FIELD_LOCAL_BLOCKS |
                    ST_ENGINE_FIELD_SERIAL_ROWS;
    ep.client = client;
    ep.device = ST_ENGINE_DEVICE_CUDA;
    ep.local_blocks = local_blocks;
    ep.serial_rows = (uint32_t)serial;
    if (st_engine_create(model, &ep, &e) != ST_OK) {
        fprintf(stderr, "engine create failed (pool of %u blocks)\n", local_blocks);
        exit(1);
    }
    return e;
}

/* Pinned host-to-device copy: GB/s, the median of reps copies of len bytes (mad in *mad). */
static double h2d_gbps(size_t len, int reps, double *mad)
{
    void *h = NULL, *d = NULL;
    double v[16];
    bench_stats_t b;

    if (cudaMallocHost(&h, len) != cudaSuccess || cudaMalloc(&d, len) != cudaSuccess) {
        fprintf(stderr, "cannot allocate %zu bytes of pinned and device memory\n", len);
        exit(1);
    }
    memset(h, 1, len);
    (void)cudaMemcpy(d, h, len, cudaMemcpyHostToDevice); /* warm-up */
    for (int r = 0; r < reps; r++) {
        uint64_t t0 = bench_now_ns();

        if (cudaMemcpy(d, h, len, cudaMemcpyHostToDevice) != cudaSuccess) {
            fprintf(stderr, "cudaMemcpy failed\n");
            exit(1);
        }
        v[r] = (double)len / (double)(bench_now_ns() - t0);
    }
    cudaFree(d);
    cudaFreeHost(h);
    bench_stats(v, (size_t)reps, &b);
    *mad = b.mad;
    return b.median;
}

/* The transport's own streaming rate from a target spawned before any transport of this process
 * (peer): gets of op bytes, 32 in flight, total bytes a round; GB/s median of reps rounds. */
static double tp_gbps(const tp_config_t *cfg, const bench_tp_peer_t *peer, size_t op, size_t total,
                      int reps, double *mad)
{
    size_t local_len = 32 * op;
    uint8_t *local = mmap(NULL, local_len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    bench_tp_loop_t loop = {
        .local = local, .local_len = local_len, .remote_base = peer->base, .remote_len = peer->len};
    double v[16], sec;
    bench_stats_t b;

    if (local == MAP_FAILED || tp_create(cfg, &loop.tp) != ST_OK ||
        tp_mem_register(loop.tp, local, local_len, &loop.local_mem) != ST_OK ||
        tp_connect(loop.tp, peer->addr, peer->addr_len, &loop.ep) != ST_OK ||
        tp_rkey_unpack(loop.ep, peer->rkey, peer->rkey_len, &loop.rkey) != ST_OK ||
        bench_tp_stream_gets(&loop, op, 32, total / 4, &sec) != ST_OK) {
        fprintf(stderr, "the bare transport loop failed\n");
        exit(1);
    }
    for (int r = 0; r < reps; r++) {
        if (bench_tp_stream_gets(&loop, op, 32, total, &sec) != ST_OK) {
            fprintf(stderr, "the bare transport loop failed\n");
            exit(1);
        }
        v[r] = (double)total / sec / 1e9;
    }
    tp_destroy(loop.tp);
    munmap(local, local_len);
    bench_stats(v, (size_t)reps, &b);
    *mad = b.mad;
    return b.median;
}

/* Floating-point operations of one token's matrix products in a prefill span (the products of
 * engine/prefill_cuda.c: projections, feed-forward with every expert, the DSA output). */
static double span_flops(const st_model_config_t *c)
{
    double d = c->d_model, row = c->dsa_latent + c->dsa_rope, hk = c->kda_heads * 128.0;
    double E = c->moe_experts ? c->moe_experts : 1, F = c->ffn_hidden, f = 0.0;

    for (const char *p = c->pattern; *p; p++) {
        if (*p == 'K') {
            f += 2 * d * (4 * hk + c->kda_heads) + 2 * hk * d;
        } else {
            f += 2 * d * (row + 128 + c->idx_heads * 128.0 + c->idx_heads + c->dsa_heads * row) +
                 2 * c->dsa_heads * (double)c->dsa_latent * d;
        }
        f += 2 * d * E + E * 3 * 2 * d * F;
    }
    return f;
}

static void run(st_engine_t *e, const uint32_t *tok, size_t n, uint32_t n_decode, float *logits,
                st_engine_stats_t *s)
{
    uint32_t *ids = malloc(sizeof(uint32_t) * (n_decode + 1));

    if (!ids || st_engine_run(e, tok, n, n_decode, logits, ids, s) != ST_OK) {
        fprintf(stderr, "st_engine_run failed\n");
        exit(1);
    }
    free(ids);
}

int main(int argc, char **argv)
{
    const char *stratad = argc > 1 ? argv[1] : getenv("STRATAD");
    size_t hist = argc > 2 ? (size_t)atol(argv[2]) : 32768;
    uint32_t n_dec = argc > 3 ? (uint32_t)atoi(argv[3]) : 32;
    int reps = argc > 4 ? atoi(argv[4]) : 3;
    uint32_t topk = argc > 5 ? (uint32_t)atoi(argv[5]) : 2048;
    const char *transport = argc > 6 ? argv[6] : "ucx";
    uint32_t copiers = argc > 7 ? (uint32_t)atoi(argv[7]) : 8;
    int no_cpu = getenv("BENCH_NO_CPU") != NULL, no_rc = getenv("BENCH_NO_RECOMPUTE") != NULL;
    char extra[128];
    size_t n = hist + TAIL;
    st_client_params_t p = {0};
    st_model_config_t mc;
    st_engine_stats_t s;
    tc_cluster_t cl;
    uint32_t *tok;
    float *lg, *lc;
    double ttft[16], dec[16], diff = 0.0, ref = 0.0, recompute_ms = 0.0;
    double h2d, h2d_mad, tpr, tpr_mad;
    bench_stats_t bt, bd;
    tp_config_t tcfg = {.backend = TP_UCX};
    bench_tp_peer_t peer;

    if (!stratad || hist < 1024 || hist % 64 != 0 || n_dec < 1 || reps < 1 || reps > 16 ||
        topk < 1 || copiers < 1 || copiers > 16) {
        fprintf(stderr, "usage: bench_engine_gpu STRATAD [HISTORY (a multiple of 64, >= 1024)] "
                        "[DECODE >= 1] [REPS 1..16] [TOPK >= 1] [TRANSPORT ucx|libfabric|inline] "
                        "[COPY_THREADS 1..16]\n");
        return 2;
    }
    /* The limits first; the bare loop's target forks before this process has a transport. */
    if (strcmp(transport, "libfabric") == 0) {
        tcfg.backend = TP_FABRIC;
    }
    if (bench_tp_spawn_target(&tcfg, (size_t)1 << 30, false, &peer) != ST_OK) {
        fprintf(stderr, "cannot spawn the bare transport loop's target\n");
        return 1;
    }
    tpr = tp_gbps(&tcfg, &peer, 147456, (size_t)1 << 30, 5, &tpr_mad);
    bench_tp_stop_target(&peer);
    h2d = h2d_gbps((size_t)256 << 20, 5, &h2d_mad);
    printf("limits: pinned host-to-device copy %.1f GB/s (mad %.1f, 256 MB copies); %s bare "
           "streaming gets %.1f GB/s (mad %.1f, 147,456-byte gets, 32 in flight, one thread)\n",
           h2d, h2d_mad, tp_backend_name(tcfg.backend), tpr, tpr_mad);
    fflush(stdout);
    tok = malloc(sizeof(uint32_t) * n);
    lg = malloc(sizeof(float) * 512);
    lc = malloc(sizeof(float) * 512);
    for (size_t i = 0; tok && i < n; i++) {
        tok[i] = (uint32_t)((i + 1) * 2654435761u >> 9) % 512;
    }
    snprintf(extra, sizeof(extra), "--memory-limit 16G --transport %s",
             strcmp(transport, "inline") == 0 ? "ucx" : transport);
    if (!tok || !lg || !lc || tc_start(&cl, stratad, 1, extra) != 0) {
        return 1;
    }
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_MODEL | ST_CLIENT_FIELD_TIMEOUT |
                   ST_CLIENT_FIELD_COPY_THREADS |
                   (strcmp(transport, "inline") ? ST_CLIENT_FIELD_TRANSPORT : 0);
    p.copy_threads = copiers;
    p.transport = transport;
    p.nodes = cl.peers;
    p.model = "bench-gpu";
    p.timeout_ms = 120000;
    st_model_config_gpu(&mc);
    mc.topk = topk;
    if (st_client_connect(&p, &client) != ST_OK || st_model_create(&mc, &model) != ST_OK) {
        fprintf(stderr, "setup failed\n");
        tc_stop_all(&cl);
        return 1;
    }
    printf("engine on the GPU: gpu shape (%s, d_model %u, DSA %u heads x (%u + %u), indexer "
           "%ux%u, KDA %ux%u, top-k %u); %zu-token history + %d; 1 stratad, %s transport, %u copy "
           "threads\n",
           mc.pattern, mc.d_model, mc.dsa_heads, mc.dsa_latent, mc.dsa_rope, mc.idx_heads,
           mc.idx_dim, mc.kda_heads, mc.kda_head_dim, mc.topk, hist, TAIL, transport, copiers);
    fflush(stdout);

    st_engine_t *gpu = engine(ST_ENGINE_DEVICE_CUDA), *cpu = engine(ST_ENGINE_DEVICE_CPU);

    run(gpu, tok, hist, 0, NULL, &s);
    double pf_s = s.ttft_us / 1e6, fl = span_flops(&mc);
    printf("1. gpu chunked prefill, %zu tokens computed and written: %.2f s (%.0f tokens/s; its "
           "matrix products %.2f GFLOP/token: %.2f TFLOP/s, %.4f of the 800 TFLOP/s bf16 "
           "roofline), %llu objects\n",
           hist, pf_s, hist / pf_s, fl / 1e9, fl * hist / pf_s / 1e12, fl * hist / pf_s / 800e12,
           (unsigned long long)s.objects_written);
    fflush(stdout);
    if (no_rc) {
        recompute_ms = pf_s * 1e3 * (double)n / (double)hist;
        printf("1b, 1c skipped (BENCH_NO_RECOMPUTE): the recompute taken as 1's prefill scaled "
               "to %zu tokens, %.1f ms\n",
               n, recompute_ms);
    } else {
        /* The token-by-token path on a shorter history (its rate is flat in the context). */
        size_t nt = hist < 4096 ? hist : 4096;
        st_engine_t *tk = engine_ex(ST_ENGINE_DEVICE_CUDA, 0, 1), *ch;

        run(tk, tok, nt, 0, NULL, &s);
        double tk_rate = nt / (s.ttft_us / 1e6);
        st_engine_free(tk);
        ch = engine_ex(ST_ENGINE_DEVICE_CUDA, 0, 0);
        run(ch, tok, nt, 0, NULL, &s);
        printf("1b. %zu tokens without the cache: token by token %.0f tokens/s, chunked %.0f "
               "tokens/s (%.1fx); chunked at %zu tokens %.0f tokens/s (%.1fx the token path)\n",
               nt, tk_rate, nt / (s.ttft_us / 1e6), nt / (s.ttft_us / 1e6) / tk_rate, hist,
               hist / pf_s, hist / pf_s / tk_rate);
        /* The recompute the resume competes with: the whole prompt chunked, no cache. */
        run(ch, tok, n, 0, NULL, &s);
        recompute_ms = s.ttft_us / 1e3;
        printf("1c. gpu chunked prefill of the whole %zu-token prompt, no cache: TTFT %.1f ms\n", n,
               recompute_ms);
        st_engine_free(ch);
    }
    fflush(stdout);
    for (int r = 0; r < reps; r++) {
        run(gpu, tok, n, n_dec, lg, &s);
        ttft[r] = s.ttft_us / 1e3;
        dec[r] = s.decode_us / 1e3 / n_dec;
    }
    bench_stats(ttft, (size_t)reps, &bt);
    bench_stats(dec, (size_t)reps, &bd);
    printf("2. gpu, %zu tokens, %llu blocks resumed, %llu computed: TTFT %.1f ms median (mad "
           "%.1f); decode %.3f ms/token median (mad %.3f) over %u tokens at %zu tokens of "
           "context\n",
           n, (unsigned long long)s.resumed_blocks, (unsigned long long)s.computed_tokens,
           bt.median, bt.mad, bd.median, bd.mad, n_dec, n);
    {
        double rate = s.bytes_fetched / (s.fetch_us * 1e3), lim = h2d < tpr ? h2d : tpr;

        printf("2a. the last resume loaded %.1f MB into the device in %.1f ms, from the first "
               "read posted to the last upload done: %.2f GB/s; %.2f of the pinned "
               "host-to-device copy, %.2f of the transport's streaming rate, %.2f of the lower "
               "(goal >= 0.6)\n",
               s.bytes_fetched / 1e6, s.fetch_us / 1e3, rate, rate / h2d, rate / tpr, rate / lim);
    }
    printf("2b. turn-2 TTFT resumed against the chunked gpu prefill of the same prompt: %.1f ms "
           "vs %.1f ms (%.1fx)\n",
           bt.median, recompute_ms, recompute_ms / bt.median);
    fflush(stdout);
    {
        size_t blocks = hist / 64;
        uint32_t lb = (uint32_t)(blocks / 10);
        st_engine_t *pe = engine_pool(lb, 0), *se = engine_pool(lb, 1);
        st_engine_stats_t sa, sp, ss;
        double va[16], vp[16], vs[16];
        bench_stats_t ba, bp, bs;

        for (int r = 0; r < reps; r++) { /* alternating: the same load on all three */
            run(gpu, tok, n, n_dec, NULL, &sa);
            va[r] = sa.decode_us / 1e3 / n_dec;
            run(pe, tok, n, n_dec, NULL, &sp);
            vp[r] = sp.decode_us / 1e3 / n_dec;
            run(se, tok, n, n_dec, NULL, &ss);
            vs[r] = ss.decode_us / 1e3 / n_dec;
        }
        bench_stats(va, (size_t)reps, &ba);
        bench_stats(vp, (size_t)reps, &bp);
        bench_stats(vs, (size_t)reps, &bs);
        double tf = bs.median - ba.median > 0 ? bs.median - ba.median : 0.0;
        double lo = tf > ba.median ? tf : ba.median;
        double hit = (double)sp.rows_local / ((double)(sp.rows_local + sp.rows_remote) + 1e-9);

        printf("4. decode at %zu tokens with %u of %zu blocks in the device pool: pipelined %.3f "
               "ms/token (mad %.3f), every block in HBM %.3f (mad %.3f): %.2fx (goal <= 1.3); "
               "serial %.3f (mad %.3f) -> fetch only %.3f, overlap efficiency %.2f (goal <= "
               "1.15); local row hit rate %.2f, %.0f remote rows and %.1f us of row reads per "
               "computed token\n",
               n, lb, blocks, bp.median, bp.mad, ba.median, ba.mad, bp.median / ba.median,
               bs.median, bs.mad, tf, bp.median / lo, hit,
               (double)sp.rows_remote / (double)(n_dec + TAIL),
               (double)sp.rows_us / (double)(n_dec + TAIL));
        fflush(stdout);
        st_engine_free(pe);
        st_engine_free(se);
    }
    {
        enum { NBMAX = 32 };
        static const size_t bs[] = {1, 8, 32};
        size_t hb = hist < 32768 ? hist : 32768, nb[NBMAX];
        st_engine_t *be[NBMAX];
        uint32_t *btok[NBMAX], *bids[NBMAX];
        st_engine_stats_t bst[NBMAX];
        double one = 0.0;

        for (int i = 0; i < NBMAX; i++) {
            be[i] = engine(ST_ENGINE_DEVICE_CUDA);
            nb[i] = hb + TAIL;
            btok[i] = malloc(sizeof(uint32_t) * nb[i]);
            bids[i] = malloc(sizeof(uint32_t) * n_dec);
            if (!btok[i] || !bids[i]) {
                fprintf(stderr, "out of memory\n");
                exit(1);
            }
            memcpy(btok[i], tok, sizeof(uint32_t) * hb);
            for (size_t j = 0; j < TAIL; j++) {
                btok[i][hb + j] = (uint32_t)((j + 7) * 40503u + (uint32_t)i * 2654435761u) % 512;
            }
        }
        for (size_t k = 0; k < sizeof(bs) / sizeof(bs[0]); k++) {
            double v[16];
            bench_stats_t b;

            for (int r = 0; r < reps; r++) {
                if (st_engine_run_batch(be, bs[k], (const uint32_t *const *)btok, nb, n_dec, NULL,
                                        bids, bst) != ST_OK) {
                    fprintf(stderr, "st_engine_run_batch failed\n");
                    exit(1);
                }
                v[r] = bst[0].decode_us / 1e3 / n_dec;
            }
            bench_stats(v, (size_t)reps, &b);
            one = k == 0 ? b.median : one;
            printf("5. batched decode, %2zu sequences of %zu tokens (each resumed %llu blocks): "
                   "%.3f ms a step (mad %.3f), %.0f tokens/s, %.2fx batch 1's\n",
                   bs[k], hb + TAIL, (unsigned long long)bst[0].resumed_blocks, b.median, b.mad,
                   bs[k] * 1e3 / b.median, bs[k] * one / b.median);
            fflush(stdout);
        }
        for (int i = 0; i < NBMAX; i++) {
            st_engine_free(be[i]);
            free(btok[i]);
            free(bids[i]);
        }
    }
    if (no_cpu) {
        printf("3. skipped (BENCH_NO_CPU)\n");
        goto out;
    }
    run(cpu, tok, n, n_dec, lc, &s);
    for (int v = 0; v < 512; v++) {
        diff = fmax(diff, fabs((double)lg[v] - lc[v]));
        ref = fmax(ref, fabs((double)lc[v]));
    }
    printf("3. cpu from the gpu's objects, %llu blocks resumed, %llu computed: TTFT %.1f ms; "
           "decode %.3f ms/token over %u tokens (%.1fx the gpu's); logits of the last prompt "
           "token within %.3g of the gpu's (max |diff| / max |logit|)\n",
           (unsigned long long)s.resumed_blocks, (unsigned long long)s.computed_tokens,
           s.ttft_us / 1e3, s.decode_us / 1e3 / n_dec, n_dec, s.decode_us / 1e3 / n_dec / bd.median,
           diff / ref);
out:
    st_engine_free(gpu);
    st_engine_free(cpu);
    st_model_free(model);
    st_client_close(client);
    tc_stop_all(&cl);
    free(tok);
    free(lg);
    free(lc);
    return 0;
}
