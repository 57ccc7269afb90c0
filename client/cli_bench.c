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
#include "st_log.h"

#define KDA_EVERY 16

static uint64_t bench_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* The bytes an object of (block hash, kind, layer) holds in this workload. */
static void bench_fill(uint8_t *buf, size_t len, const st_hash_t *h, int kind, int layer)
{
    uint64_t x = XXH3_64bits_withSeed(h->b, ST_HASH_BYTES, (uint64_t)(kind * 256 + layer));

    for (size_t i = 0; i + 8 <= len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(buf + i, &x, 8);
    }
    for (size_t i = len & ~(size_t)7; i < len; i++) {
        buf[i] = (uint8_t)(x >> (8 * (i & 7)));
    }
}

static int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

int cli_bench(const cli_conf_t *cf, int argc, char **argv)
{
    st_client_t *c;
    uint32_t bt, L = (uint32_t)cf->layers;
    size_t max_tokens = (size_t)cf->prompt_tokens + (size_t)cf->turn_tokens * (size_t)cf->turns;
    size_t n_turns = (size_t)(cf->sessions * cf->turns), turn_i = 0;
    uint32_t *tok = malloc(sizeof(uint32_t) * max_tokens);
    double *lookup_ms = calloc(n_turns, sizeof(double));
    uint64_t looked = 0, matched = 0, resumable = 0, req_hits = 0, wrong = 0, verified = 0;
    uint64_t put_bytes = 0, put_ns = 0, get_bytes = 0, get_ns = 0, failed = 0;
    uint64_t partial = 0; /* durable writes short of write_quorum */
    unsigned sflags = cf->durable ? ST_SESSION_DURABLE : 0;
    st_status_t st;
    uint64_t t_start = bench_ns();
    size_t obj_max = (size_t)(cf->kv_bytes > cf->idx_bytes ? cf->kv_bytes : cf->idx_bytes);
    cli_metrics_t *mx = NULL;
    int rc = 0;

    if (tok == NULL || lookup_ms == NULL) {
        free(tok);
        free(lookup_ms);
        return 1;
    }
    if (obj_max < (size_t)cf->kda_bytes) {
        obj_max = (size_t)cf->kda_bytes;
    }
    if (cli_connect(cf, &c) != ST_OK) {
        free(tok);
        free(lookup_ms);
        return 1;
    }
    if (cf->metrics_listen[0] != '\0') {
        char ns[300];
        int port = 0;

        snprintf(ns, sizeof(ns), "%s/%s", cf->tenant, cf->model);
        if (cli_metrics_start(cf->metrics_listen, ns, cf->metrics_tls_cert, cf->metrics_tls_key,
                              cf->metrics_token_file, &mx, &port) != ST_OK) {
            fprintf(stderr, "strata bench: cannot serve metrics on %s\n", cf->metrics_listen);
            st_client_close(c);
            free(tok);
            free(lookup_ms);
            return 1;
        }
        printf("metrics_port=%d\n", port);
        fflush(stdout);
    }
    bt = st_client_block_tokens(c);
    printf("strata bench: %lld sessions x %lld turns, first prompt %lld tokens, +%lld per turn, "
           "%u layers, block %u tokens, KV %lld B, IDX %lld B per block and layer\n",
           (long long)cf->sessions, (long long)cf->turns, (long long)cf->prompt_tokens,
           (long long)cf->turn_tokens, L, bt, (long long)cf->kv_bytes, (long long)cf->idx_bytes);
    printf("%-8s %4s %9s %9s %9s %9s %10s %10s %9s\n", "session", "turn", "prompt", "reused",
           "resumable", "computed", "lookup_ms", "write_ms", "write_MB");

    for (int64_t s = 0; s < cf->sessions && rc == 0; s++) {
        char sid[64];
        size_t n = 0;
        st_session_info_t info;

        snprintf(sid, sizeof(sid), "bench-%lld-%lld", (long long)cf->seed, (long long)s);
        st = st_session_open_ex(c, sid, 0, sflags, &info, NULL);
        if (st == ST_ERR_PARTIAL) {
            partial++; /* stored on fewer replicas than asked: counted, reported */
            st_warn("bench session open short of write_quorum session=%s: %s", sid,
                    st_client_last_error());
        } else if (st != ST_OK) {
            fprintf(stderr, "strata bench: session open: %s\n", st_client_last_error());
            rc = 1;
            break;
        }
        for (int64_t t = 0; t < cf->turns; t++) {
            size_t add = (size_t)(t == 0 ? cf->prompt_tokens : cf->turn_tokens);
            size_t nb, n_ops = 0, first_new;
            uint64_t turn_bytes = 0;
            st_hash_t *chain;
            st_lookup_result_t r;
            st_put_op_t *ops;
            uint8_t *data;
            uint64_t t0, t1, t2;

            for (size_t i = 0; i < add; i++, n++) {
                uint64_t key = ((uint64_t)s << 40) ^ n;

                tok[n] = (uint32_t)(XXH3_64bits_withSeed(&key, 8, (uint64_t)cf->seed) % 150000);
            }
            chain = malloc(sizeof(*chain) * (n / bt + 1));
            if (chain == NULL || st_client_hash(c, tok, n, NULL, 0, chain, n / bt + 1, &nb)) {
                free(chain);
                rc = 1;
                break;
            }
            t0 = bench_ns();
            if (st_client_lookup(c, chain, nb, L, &r) != ST_OK) {
                fprintf(stderr, "strata bench: lookup: %s\n", st_client_last_error());
                free(chain);
                rc = 1;
                break;
            }
            t1 = bench_ns();
            lookup_ms[turn_i++] = (double)(t1 - t0) / 1e6;
            looked += (uint64_t)nb * bt; /* the tokens of the blocks asked about */
            matched += r.matched_blocks * bt;
            resumable += r.resumable_blocks * bt;
            req_hits += r.matched_blocks > 0;
            cli_metrics_lookup(mx, (uint64_t)nb * bt, r.matched_blocks * bt,
                               r.resumable_blocks * bt, t1 - t0);

            /* Read back a sample of what the cache claims, and check it. */
            if (cf->verify > 0 && r.matched_blocks > 0) {
                size_t nv =
                    r.matched_blocks < (uint64_t)cf->verify ? r.matched_blocks : (size_t)cf->verify;
                st_get_op_t *g = calloc(nv, sizeof(*g));
                uint8_t *buf = malloc(nv * (size_t)cf->kv_bytes), *want = malloc(obj_max);
                st_handle_t *h;
                uint64_t g0 = bench_ns();

                for (size_t i = 0; g && buf && i < nv; i++) {
                    g[i].block = r.matched_blocks - 1 - i * (r.matched_blocks / nv);
                    g[i].kind = ST_KIND_KV;
                    g[i].layer = (uint16_t)(i % L);
                    g[i].dst = buf + i * (size_t)cf->kv_bytes;
                    g[i].dst_len = (size_t)cf->kv_bytes;
                }
                if (g && buf && want && st_client_get(c, chain, nb, g, nv, &h) == ST_OK) {
                    st_handle_wait(h, -1);
                    st_handle_release(h);
                    get_ns += bench_ns() - g0;
                    for (size_t i = 0; i < nv; i++) {
                        if (g[i].status != ST_OK) {
                            continue; /* evicted since the lookup: a miss, not an error */
                        }
                        bench_fill(want, (size_t)cf->kv_bytes, &chain[g[i].block], ST_KIND_KV,
                                   g[i].layer);
                        verified++;
                        get_bytes += g[i].length;
                        cli_metrics_bytes(mx, g[i].length, 0);
                        if (g[i].length != (size_t)cf->kv_bytes ||
                            memcmp(want, g[i].dst, g[i].length) != 0) {
                            wrong++;
                        }
                    }
                }
                free(g), free(buf), free(want);
            }

            /* "Prefill" the blocks after the resumable prefix: write them. */
            first_new = (size_t)r.resumable_blocks;
            ops = calloc((nb - first_new) * (2 * L + 1) + 1, sizeof(*ops));
            data = malloc(((nb - first_new) * (2 * L + 1) + 1) * obj_max);
            if (ops == NULL || data == NULL) {
                free(ops), free(data), free(chain);
                rc = 1;
                break;
            }
            for (size_t b = first_new; b < nb; b++) {
                for (uint32_t l = 0; l < L; l++) {
                    for (int k = ST_KIND_KV; k <= ST_KIND_IDX; k++) {
                        size_t len = (size_t)(k == ST_KIND_KV ? cf->kv_bytes : cf->idx_bytes);
                        uint8_t *d = data + n_ops * obj_max;

                        bench_fill(d, len, &chain[b], k, (int)l);
                        ops[n_ops++] = (st_put_op_t){b, (uint8_t)k, (uint16_t)l, d, len, 0, 0};
                    }
                }
                if ((b + 1) % KDA_EVERY == 0 || b + 1 == nb) {
                    uint8_t *d = data + n_ops * obj_max;

                    bench_fill(d, (size_t)cf->kda_bytes, &chain[b], ST_KIND_KDA, 0);
                    ops[n_ops++] = (st_put_op_t){b, ST_KIND_KDA, 0, d, (size_t)cf->kda_bytes, 0, 0};
                }
            }
            if (n_ops > 0) {
                st_handle_t *h;

                if (st_client_put(c, chain, nb, ops, n_ops, cf->durable ? ST_PUT_DURABLE : 0, &h) !=
                    ST_OK) {
                    fprintf(stderr, "strata bench: put: %s\n", st_client_last_error());
                    rc = 1;
                } else {
                    st_handle_wait(h, -1);
                    st_handle_release(h);
                    for (size_t i = 0; i < n_ops; i++) {
                        if (ops[i].status == ST_OK) {
                            put_bytes += ops[i].len;
                            cli_metrics_bytes(mx, 0, ops[i].len);
                            turn_bytes += ops[i].len;
                        } else if (ops[i].status == ST_ERR_PARTIAL) {
                            partial++; /* stored, but durable on fewer than W replicas */
                        } else {
                            failed++;
                        }
                    }
                }
            }
            t2 = bench_ns();
            put_ns += t2 - t1;
            if (nb > 0) {
                st = st_session_append_ex(c, sid, &chain[nb - 1], nb * bt, sflags, NULL);
                if (st == ST_ERR_PARTIAL) {
                    partial++;
                    st_warn("bench session append short of write_quorum session=%s: %s", sid,
                            st_client_last_error());
                } else if (st != ST_OK) {
                    failed++;
                }
            }
            printf("%-8lld %4lld %9zu %9" PRIu64 " %9" PRIu64 " %9zu %10.2f %10.1f %9.1f\n",
                   (long long)s, (long long)t, n, r.matched_blocks * bt, r.resumable_blocks * bt,
                   n - (size_t)r.resumable_blocks * bt, (double)(t1 - t0) / 1e6,
                   (double)(t2 - t1) / 1e6, (double)turn_bytes / 1e6);
            fflush(stdout);
            cli_progress("bench", turn_i, n_turns, t_start);
            free(ops), free(data), free(chain);
        }
    }
    if (turn_i > 0) {
        qsort(lookup_ms, turn_i, sizeof(double), bench_cmp_double);
        printf("\nsummary over %zu turns (%.1f s):\n", turn_i,
               (double)(bench_ns() - t_start) / 1e9);
        printf("  token hit rate      %.1f%%  (%" PRIu64 " of %" PRIu64 " looked-up tokens)\n",
               looked ? 100.0 * (double)matched / (double)looked : 0.0, matched, looked);
        printf("  resumable hit rate  %.1f%%\n",
               looked ? 100.0 * (double)resumable / (double)looked : 0.0);
        printf("  request hit rate    %.1f%%  (%" PRIu64 " of %zu lookups)\n",
               100.0 * (double)req_hits / (double)turn_i, req_hits, turn_i);
        printf("  lookup latency      p50 %.2f ms, p99 %.2f ms\n", lookup_ms[turn_i / 2],
               lookup_ms[(turn_i * 99) / 100 < turn_i ? (turn_i * 99) / 100 : turn_i - 1]);
        printf("  writes              %.1f MB at %.0f MB/s (%" PRIu64 " refused)\n",
               (double)put_bytes / 1e6, put_ns ? (double)put_bytes / ((double)put_ns / 1e3) : 0.0,
               failed);
        if (cf->durable) {
            printf("  durable writes      write_quorum %u of %u replicas; %" PRIu64
                   " short of it (ST_ERR_PARTIAL)\n",
                   st_client_write_quorum(c), st_client_replicas(c), partial);
        }
        printf("  verified reads      %" PRIu64 " objects, %.1f MB at %.0f MB/s, wrong bytes: "
               "%" PRIu64 "\n",
               verified, (double)get_bytes / 1e6,
               get_ns ? (double)get_bytes / ((double)get_ns / 1e3) : 0.0, wrong);
    }
    if (turn_i > 0) {
        /* One line for scripts and tests. */
        printf("result token_hit_rate=%.9f lookup_tokens=%" PRIu64 " matched_tokens=%" PRIu64
               " resumable_tokens=%" PRIu64 " lookups=%zu lookups_with_hit=%" PRIu64
               " wrong_bytes=%" PRIu64 " partial_writes=%" PRIu64 "\n",
               looked ? (double)matched / (double)looked : 0.0, looked, matched, resumable, turn_i,
               req_hits, wrong, partial);
    }
    if (wrong != 0) {
        fprintf(stderr, "strata bench: %" PRIu64 " objects came back wrong\n", wrong);
        rc = 1;
    } else if (rc == 0 && partial != 0) {
        fprintf(stderr,
                "strata bench: %" PRIu64 " durable writes reached fewer replicas than "
                "--write-quorum\n",
                partial);
        rc = CLI_EXIT_PARTIAL;
    }
    free(tok);
    free(lookup_ms);
    st_client_close(c);
    if (mx != NULL && cf->metrics_linger_ms > 0) {
        fflush(stdout);
        nanosleep(&(struct timespec){(time_t)(cf->metrics_linger_ms / 1000),
                                     (long)(cf->metrics_linger_ms % 1000) * 1000000L},
                  NULL);
    }
    cli_metrics_stop(mx);
    return rc;
}
