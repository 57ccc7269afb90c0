/*
 * cli_bench.c - `strata bench`: a multi-turn long-context workload.
 *
 * Each conversation starts with a long prompt; every later turn appends
 * tokens to the whole history and sends it again, as chat and agent
 * frontends do. For every turn the client hashes the history, looks it up,
 * "prefills" what was not cached by writing the KV and IDX objects of every
 * layer of the new blocks (and KDA checkpoints every 16 blocks and at the
 * end of the turn), records the session's new head, and reads a sample of
 * the reused objects back to check them byte by byte. It prints each turn
 * and a summary: token, request and resumable hit rates, lookup latency,
 * write and read throughput, and the count of wrong bytes (which must be 0).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cli.h"
#include "cli_metrics.h"
#include "clock.h"
#include "log.h"

#define CLI_OFF(m) offsetof(cli_conf_t, m)

/*
 * The options of `strata bench`, after the connection flags. Unsized here, so
 * that the compiler checks the count against cli.h's CLI_BENCH_N_OPTS.
 */
const cfg_option_t cli_bench_opts[] = {
    {"sessions", CFG_INT, CLI_OFF(sessions), "4", 1, 10000, 0, NULL, 0,
     "conversations, run one after another"},
    {"turns", CFG_INT, CLI_OFF(turns), "4", 1, 10000, 0, NULL, 0, "turns per conversation"},
    {"prompt_tokens", CFG_INT, CLI_OFF(prompt_tokens), "32768", 64, 1 << 24, 0, NULL, 0,
     "tokens of the first turn (the long context)"},
    {"turn_tokens", CFG_INT, CLI_OFF(turn_tokens), "2048", 1, 1 << 24, 0, NULL, 0,
     "tokens each later turn adds"},
    {"layers", CFG_INT, CLI_OFF(layers), "2", 1, 128, 0, NULL, 0,
     "DSA layers: KV and IDX objects per block"},
    {"kv_bytes", CFG_INT, CLI_OFF(kv_bytes), "41984", 1, 1 << 24, 0, NULL, 0,
     "bytes of one KV object (64 rows x 656 B)"},
    {"idx_bytes", CFG_INT, CLI_OFF(idx_bytes), "8448", 1, 1 << 24, 0, NULL, 0,
     "bytes of one IDX object (64 rows x 132 B)"},
    {"kda_bytes", CFG_INT, CLI_OFF(kda_bytes), "65536", 1, 1 << 26, 0, NULL, 0,
     "bytes of one KDA checkpoint object"},
    {"verify", CFG_INT, CLI_OFF(verify), "64", 0, 1 << 20, 0, NULL, 0,
     "reused blocks per turn read back and compared byte by byte"},
    {"seed", CFG_INT, CLI_OFF(seed), "1", 0, INT64_MAX, 0, NULL, 0,
     "seed of the conversations' tokens (a new seed: new conversations)"},
    {"metrics_listen", CFG_STRING, CLI_OFF(metrics_listen), "", 0, 0, 0, NULL, 0,
     "serve this client's own metrics (strata_client_*) on host:port while running"},
    {"metrics_linger", CFG_DURATION, CLI_OFF(metrics_linger_ms), "0", 0, 3600000, 0, NULL, 0,
     "keep serving them this long after the workload (for a last scrape)"},
    {"durable", CFG_BOOL, CLI_OFF(durable), "false", 0, 0, 0, NULL, 0,
     "KDA puts and session writes succeed only when --write-quorum replicas committed them "
     "to disk (the daemons need data_dir); fewer are counted and exit with 3"},
    {"metrics_tls_cert", CFG_STRING, CLI_OFF(metrics_tls_cert), "", 0, 0, 0, NULL, 0,
     "PEM certificate of the metrics server: HTTPS (empty: HTTP)"},
    {"metrics_tls_key", CFG_STRING, CLI_OFF(metrics_tls_key), "", 0, 0, 0, NULL, 0,
     "PEM private key of --metrics-tls-cert"},
    {"metrics_token_file", CFG_STRING, CLI_OFF(metrics_token_file), "", 0, 0, 0, NULL, 0,
     "file of the bearer token that /metrics and /stats require (empty: none)"},
};

#define KDA_EVERY 16

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* One run of the workload: its client, its buffers and its counts. */
typedef struct bench {
    const cli_conf_t *cf;
    st_client_t *c;
    cli_metrics_t *mx;
    uint32_t bt, layers;
    uint32_t *tok;     /* the conversation's tokens so far */
    double *lookup_ms; /* per turn */
    size_t n_turns, turn_i;
    size_t obj_max;  /* the largest object */
    unsigned sflags; /* session writes */
    uint64_t t_start;
    uint64_t looked, matched, resumable, req_hits, wrong, verified;
    uint64_t put_bytes, put_ns, get_bytes, get_ns, failed;
    uint64_t partial; /* durable writes short of write_quorum */
} bench_t;

/* Allocates the buffers, connects, starts the metrics server and prints the header. */
static int bench_open(bench_t *b, const cli_conf_t *cf)
{
    size_t max_tokens = (size_t)cf->prompt_tokens + (size_t)cf->turn_tokens * (size_t)cf->turns;

    memset(b, 0, sizeof(*b));
    b->cf = cf;
    b->layers = (uint32_t)cf->layers;
    b->n_turns = (size_t)(cf->sessions * cf->turns);
    b->sflags = cf->durable ? ST_SESSION_DURABLE : 0;
    b->t_start = cm_mono_ns();
    b->obj_max = (size_t)(cf->kv_bytes > cf->idx_bytes ? cf->kv_bytes : cf->idx_bytes);
    if (b->obj_max < (size_t)cf->kda_bytes) {
        b->obj_max = (size_t)cf->kda_bytes;
    }
    b->tok = malloc(sizeof(uint32_t) * max_tokens);
    b->lookup_ms = calloc(b->n_turns, sizeof(double));
    if (b->tok == NULL || b->lookup_ms == NULL || cli_connect(cf, &b->c) != ST_OK) {
        return 1;
    }
    if (cf->metrics_listen[0] != '\0') {
        char ns[300];
        int port = 0;

        snprintf(ns, sizeof(ns), "%s/%s", cf->conn.tenant, cf->conn.model);
        if (cli_metrics_start(cf->metrics_listen, ns, cf->metrics_tls_cert, cf->metrics_tls_key,
                              cf->metrics_token_file, &b->mx, &port) != ST_OK) {
            fprintf(stderr, "strata bench: cannot serve metrics on %s\n", cf->metrics_listen);
            return 1;
        }
        printf("metrics_port=%d\n", port);
        fflush(stdout);
    }
    b->bt = st_client_block_tokens(b->c);
    printf("strata bench: %lld sessions x %lld turns, first prompt %lld tokens, +%lld per turn, "
           "%u layers, block %u tokens, KV %lld B, IDX %lld B per block and layer\n",
           (long long)cf->sessions, (long long)cf->turns, (long long)cf->prompt_tokens,
           (long long)cf->turn_tokens, b->layers, b->bt, (long long)cf->kv_bytes,
           (long long)cf->idx_bytes);
    printf("%-8s %4s %9s %9s %9s %9s %10s %10s %9s\n", "session", "turn", "prompt", "reused",
           "resumable", "computed", "lookup_ms", "write_ms", "write_MB");
    return 0;
}

/* Reads back a sample of the blocks the lookup r claims, and checks them. */
static void bench_verify(bench_t *b, const st_hash_t *chain, size_t nb, const st_lookup_result_t *r)
{
    const cli_conf_t *cf = b->cf;
    size_t kv = (size_t)cf->kv_bytes;
    size_t nv = r->matched_blocks < (uint64_t)cf->verify ? r->matched_blocks : (size_t)cf->verify;
    st_get_op_t *g = calloc(nv, sizeof(*g));
    uint8_t *buf = malloc(nv * kv), *want = malloc(b->obj_max);
    st_handle_t *h;
    uint64_t g0 = cm_mono_ns();

    for (size_t i = 0; g && buf && i < nv; i++) {
        g[i].block = r->matched_blocks - 1 - i * (r->matched_blocks / nv);
        g[i].kind = ST_KIND_KV;
        g[i].layer = (uint16_t)(i % b->layers);
        g[i].dst = buf + i * kv;
        g[i].dst_len = kv;
    }
    if (g && buf && want && st_client_get(b->c, chain, nb, g, nv, &h) == ST_OK) {
        st_handle_wait(h, -1);
        st_handle_release(h);
        b->get_ns += cm_mono_ns() - g0;
        for (size_t i = 0; i < nv; i++) {
            if (g[i].status != ST_OK) {
                continue; /* evicted since the lookup: a miss, not an error */
            }
            cli_fill(want, kv, &chain[g[i].block], ST_KIND_KV, g[i].layer);
            b->verified++;
            b->get_bytes += g[i].length;
            cli_metrics_bytes(b->mx, g[i].length, 0);
            if (g[i].length != kv || memcmp(want, g[i].dst, g[i].length) != 0) {
                b->wrong++;
            }
        }
    }
    free(g), free(buf), free(want);
}

/* The puts that "prefill" blocks [first_new, nb): KV and IDX of every layer, KDA checkpoints. */
static size_t bench_prefill_ops(const bench_t *b, const st_hash_t *chain, size_t first_new,
                                size_t nb, st_put_op_t *ops, uint8_t *data)
{
    const cli_conf_t *cf = b->cf;
    size_t n_ops = 0;

    for (size_t blk = first_new; blk < nb; blk++) {
        for (uint32_t l = 0; l < b->layers; l++) {
            for (int k = ST_KIND_KV; k <= ST_KIND_IDX; k++) {
                size_t len = (size_t)(k == ST_KIND_KV ? cf->kv_bytes : cf->idx_bytes);
                uint8_t *d = data + n_ops * b->obj_max;

                cli_fill(d, len, &chain[blk], k, (int)l);
                ops[n_ops++] = (st_put_op_t){blk, (uint8_t)k, (uint16_t)l, d, len, 0, 0};
            }
        }
        if ((blk + 1) % KDA_EVERY == 0 || blk + 1 == nb) {
            uint8_t *d = data + n_ops * b->obj_max;

            cli_fill(d, (size_t)cf->kda_bytes, &chain[blk], ST_KIND_KDA, 0);
            ops[n_ops++] = (st_put_op_t){blk, ST_KIND_KDA, 0, d, (size_t)cf->kda_bytes, 0, 0};
        }
    }
    return n_ops;
}

/* Writes the blocks after the resumable prefix; adds the bytes stored to *turn_bytes. */
static int bench_prefill(bench_t *b, const st_hash_t *chain, size_t nb, size_t first_new,
                         uint64_t *turn_bytes)
{
    size_t cap = (nb - first_new) * (2 * b->layers + 1) + 1, n_ops;
    st_put_op_t *ops = calloc(cap, sizeof(*ops));
    uint8_t *data = malloc(cap * b->obj_max);
    st_handle_t *h;
    int rc = 0;

    if (ops == NULL || data == NULL) {
        free(ops), free(data);
        return -1;
    }
    n_ops = bench_prefill_ops(b, chain, first_new, nb, ops, data);
    if (n_ops > 0 && st_client_put(b->c, chain, nb, ops, n_ops, b->cf->durable ? ST_PUT_DURABLE : 0,
                                   &h) != ST_OK) {
        fprintf(stderr, "strata bench: put: %s\n", st_client_last_error());
        rc = 1;
    } else if (n_ops > 0) {
        st_handle_wait(h, -1);
        st_handle_release(h);
        for (size_t i = 0; i < n_ops; i++) {
            if (ops[i].status == ST_OK) {
                b->put_bytes += ops[i].len;
                cli_metrics_bytes(b->mx, 0, ops[i].len);
                *turn_bytes += ops[i].len;
            } else if (ops[i].status == ST_ERR_PARTIAL) {
                b->partial++; /* stored, but durable on fewer than W replicas */
            } else {
                b->failed++;
            }
        }
    }
    free(ops), free(data);
    return rc;
}

/* Counts a session write that came back st. */
static void bench_session_write(bench_t *b, st_status_t st, const char *what, const char *sid)
{
    if (st == ST_ERR_PARTIAL) {
        b->partial++; /* stored on fewer replicas than asked: counted, reported */
        lg_warn("bench session %s short of write_quorum session=%s: %s", what, sid,
                st_client_last_error());
    } else if (st != ST_OK) {
        b->failed++;
    }
}

/*
 * Turn t of conversation s, whose first *n tokens are in b->tok: adds the
 * turn's tokens, looks the history up, verifies a sample, prefills the rest
 * and moves the session's head. Returns 0; 1 when the put failed (the
 * conversation goes on); -1 when the turn could not run (it stops).
 */
static int bench_turn(bench_t *b, int64_t s, int64_t t, const char *sid, size_t *n_p)
{
    const cli_conf_t *cf = b->cf;
    size_t add = (size_t)(t == 0 ? cf->prompt_tokens : cf->turn_tokens), n = *n_p, nb;
    uint64_t turn_bytes = 0, t0, t1, t2, bt = b->bt;
    st_lookup_result_t r;
    st_hash_t *chain;
    int rc;

    for (size_t i = 0; i < add; i++, n++) {
        uint64_t key = ((uint64_t)s << 40) ^ n;

        b->tok[n] = (uint32_t)(XXH3_64bits_withSeed(&key, 8, (uint64_t)cf->seed) % 150000);
    }
    *n_p = n;
    chain = malloc(sizeof(*chain) * (n / bt + 1));
    if (chain == NULL || st_client_hash(b->c, b->tok, n, NULL, 0, chain, n / bt + 1, &nb)) {
        free(chain);
        return -1;
    }
    t0 = cm_mono_ns();
    if (st_client_lookup(b->c, chain, nb, b->layers, &r) != ST_OK) {
        fprintf(stderr, "strata bench: lookup: %s\n", st_client_last_error());
        free(chain);
        return -1;
    }
    t1 = cm_mono_ns();
    b->lookup_ms[b->turn_i++] = (double)(t1 - t0) / 1e6;
    b->looked += (uint64_t)nb * bt; /* the tokens of the blocks asked about */
    b->matched += r.matched_blocks * bt;
    b->resumable += r.resumable_blocks * bt;
    b->req_hits += r.matched_blocks > 0;
    cli_metrics_lookup(b->mx, (uint64_t)nb * bt, r.matched_blocks * bt, r.resumable_blocks * bt,
                       t1 - t0);
    if (cf->verify > 0 && r.matched_blocks > 0) {
        bench_verify(b, chain, nb, &r);
    }
    rc = bench_prefill(b, chain, nb, (size_t)r.resumable_blocks, &turn_bytes);
    if (rc < 0) {
        free(chain);
        return -1;
    }
    t2 = cm_mono_ns();
    b->put_ns += t2 - t1;
    if (nb > 0) {
        bench_session_write(
            b, st_session_append_ex(b->c, sid, &chain[nb - 1], nb * bt, b->sflags, NULL), "append",
            sid);
    }
    printf("%-8lld %4lld %9zu %9" PRIu64 " %9" PRIu64 " %9zu %10.2f %10.1f %9.1f\n", (long long)s,
           (long long)t, n, r.matched_blocks * bt, r.resumable_blocks * bt,
           n - (size_t)(r.resumable_blocks * bt), (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6,
           (double)turn_bytes / 1e6);
    fflush(stdout);
    cli_progress("bench", b->turn_i, b->n_turns, b->t_start);
    free(chain);
    return rc;
}

/* Conversation s: opens its session and runs its turns. Returns 0, or 1 to end the run. */
static int bench_session(bench_t *b, int64_t s)
{
    char sid[64];
    size_t n = 0;
    st_session_info_t info;
    st_status_t st;
    int rc = 0;

    snprintf(sid, sizeof(sid), "bench-%lld-%lld", (long long)b->cf->seed, (long long)s);
    st = st_session_open_ex(b->c, sid, 0, b->sflags, &info, NULL);
    if (st != ST_OK && st != ST_ERR_PARTIAL) {
        fprintf(stderr, "strata bench: session open: %s\n", st_client_last_error());
        return 1;
    }
    bench_session_write(b, st, "open", sid);
    for (int64_t t = 0; t < b->cf->turns; t++) {
        int turn_rc = bench_turn(b, s, t, sid, &n);

        rc = turn_rc != 0 ? 1 : rc; /* a failed put ends the run after this conversation */
        if (turn_rc < 0) {
            break;
        }
    }
    return rc;
}

/* Prints the summary and the result line of the turns run. */
static void bench_summary(const bench_t *b)
{
    double *ms = b->lookup_ms;
    size_t n = b->turn_i;
    uint64_t looked = b->looked;

    qsort(ms, n, sizeof(double), bench_cmp_double);
    printf("\nsummary over %zu turns (%.1f s):\n", n, (double)(cm_mono_ns() - b->t_start) / 1e9);
    printf("  token hit rate      %.1f%%  (%" PRIu64 " of %" PRIu64 " looked-up tokens)\n",
           looked ? 100.0 * (double)b->matched / (double)looked : 0.0, b->matched, looked);
    printf("  resumable hit rate  %.1f%%\n",
           looked ? 100.0 * (double)b->resumable / (double)looked : 0.0);
    printf("  request hit rate    %.1f%%  (%" PRIu64 " of %zu lookups)\n",
           100.0 * (double)b->req_hits / (double)n, b->req_hits, n);
    printf("  lookup latency      p50 %.2f ms, p99 %.2f ms\n", ms[n / 2],
           ms[(n * 99) / 100 < n ? (n * 99) / 100 : n - 1]);
    printf("  writes              %.1f MB at %.0f MB/s (%" PRIu64 " refused)\n",
           (double)b->put_bytes / 1e6,
           b->put_ns ? (double)b->put_bytes / ((double)b->put_ns / 1e3) : 0.0, b->failed);
    if (b->cf->durable) {
        printf("  durable writes      write_quorum %u of %u replicas; %" PRIu64
               " short of it (ST_ERR_PARTIAL)\n",
               st_client_write_quorum(b->c), st_client_replicas(b->c), b->partial);
    }
    printf("  verified reads      %" PRIu64 " objects, %.1f MB at %.0f MB/s, wrong bytes: "
           "%" PRIu64 "\n",
           b->verified, (double)b->get_bytes / 1e6,
           b->get_ns ? (double)b->get_bytes / ((double)b->get_ns / 1e3) : 0.0, b->wrong);
    /* One line for scripts and tests. */
    printf("result token_hit_rate=%.9f lookup_tokens=%" PRIu64 " matched_tokens=%" PRIu64
           " resumable_tokens=%" PRIu64 " lookups=%zu lookups_with_hit=%" PRIu64
           " wrong_bytes=%" PRIu64 " partial_writes=%" PRIu64 "\n",
           looked ? (double)b->matched / (double)looked : 0.0, looked, b->matched, b->resumable, n,
           b->req_hits, b->wrong, b->partial);
}

/* Frees the run; keeps the metrics server up for --metrics-linger first. */
static void bench_close(bench_t *b)
{
    free(b->tok);
    free(b->lookup_ms);
    st_client_close(b->c);
    if (b->mx != NULL && b->cf->metrics_linger_ms > 0) {
        fflush(stdout);
        nanosleep(&(struct timespec){(time_t)(b->cf->metrics_linger_ms / 1000),
                                     (long)(b->cf->metrics_linger_ms % 1000) * 1000000L},
                  NULL);
    }
    cli_metrics_stop(b->mx);
}

int cli_bench(const cli_conf_t *cf, int argc, char **argv)
{
    bench_t b;
    int rc = bench_open(&b, cf);

    for (int64_t s = 0; s < cf->sessions && rc == 0; s++) {
        rc = bench_session(&b, s);
    }
    if (b.turn_i > 0) {
        bench_summary(&b);
    }
    if (b.wrong != 0) {
        fprintf(stderr, "strata bench: %" PRIu64 " objects came back wrong\n", b.wrong);
        rc = 1;
    } else if (rc == 0 && b.partial != 0) {
        fprintf(stderr,
                "strata bench: %" PRIu64 " durable writes reached fewer replicas than "
                "--write-quorum\n",
                b.partial);
        rc = CLI_EXIT_PARTIAL;
    }
    bench_close(&b);
    return rc;
}
