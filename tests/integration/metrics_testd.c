/*
 * metrics_testd.c - a stand-in for stratad's observability side: it registers
 * the metric families of docs/observability.md, serves them with the metrics
 * HTTP server and makes traffic whose hit rates it computes itself.
 *
 *   metrics_testd [--port N] [--node NAME] [--peers LIST] [--mode scrape|random]
 *                 [--batches N] [--seed S] [--exit-after SECONDS]
 *                 [--cors-origin LIST] [--token TOKEN] [--bind ADDR]
 *
 * --cors-origin, --token and --bind set the server's cors_origins, token and
 *   bind_addr (metrics_http.h).
 *
 * Every lookup also counts its blocks (strata_lookup_blocks_total) and one get
 * of its kind (strata_object_gets_total: a hit when it matched, every fourth
 * from SSD), so that the Grafana per-kind queries have data.
 *
 * --mode scrape: every scrape (/metrics or /stats) first adds one fixed batch
 *   of 5 lookups of 100 tokens each, 4 of them with 95 tokens matched and 80
 *   resumable: any window of scrapes shows a token hit rate of exactly 76 %,
 *   a request hit rate of 80 % and a resumable-token hit rate of 64 %; and
 *   /stats "kinds" (as stratad's) grows by fixed per-kind gets and lookup
 *   blocks: get hit rates kv 80 %, idx 50 %, kda 50 %, session 100 %, vis
 *   25 %, a quarter of kv's hits from SSD, lookup blocks kv 80 %, vis 50 %.
 * --mode random: after the first complete /metrics scrape (all counters still
 *   zero), a thread makes --batches random lookups, then sets done. /stats then
 *   carries "test": {"done", "token_hit_rate", "request_hit_rate",
 *   "resumable_hit_rate", "token_hit_rate_by_namespace", "lookups"},
 *   computed from the program's own tallies, and the gauge strata_test_done turns 1.
 *
 * Prints "port=N" on stdout once listening; exits on SIGTERM or SIGINT, or
 * after --exit-after seconds (default 300) so a failed test cannot leave it.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "metrics_http.h"

#define N_NS    2
#define N_KINDS 2

static const char *const namespaces[N_NS] = {"tenant-a", "tenant-b"};
static const char *const kinds[N_KINDS] = {"kv", "vis"};

typedef struct testd {
    mx_metrics_t *m;
    /* Per namespace × kind. */
    mx_counter_t *lookups[N_NS][N_KINDS], *hits[N_NS][N_KINDS], *tokens[N_NS][N_KINDS];
    mx_counter_t *matched[N_NS][N_KINDS], *resumable[N_NS][N_KINDS];
    /* Per namespace x kind: gets hit in DRAM, hit from SSD, missed; lookup blocks hit, missed. */
    mx_counter_t *gets[N_NS][N_KINDS][3], *blocks[N_NS][N_KINDS][2];
    mx_counter_t *bytes_ucx, *objects_ucx, *evictions, *spills, *promotions, *errors;
    mx_histogram_t *lat_lookup;
    mx_gauge_t *used[2], *limit[2], *leases, *done_gauge;
    /* The program's own tallies (random mode). */
    uint64_t t_lookups, t_hits, t_tokens, t_matched, t_resumable;
    uint64_t t_ns_tokens[N_NS], t_ns_matched[N_NS];
    atomic_int done;
    atomic_uint_fast64_t scrapes, stats_calls;
    /* Scrape mode: the per-kind gets and lookup blocks of /stats "kinds". */
    uint64_t k_dram[5], k_ssd[5], k_miss[5], k_block_hit[5], k_block_miss[5];
    int mode_scrape;
    int started;
    unsigned batches;
    unsigned seed;
    pthread_t traffic;
} testd_t;

static void die(const char *what, st_status_t st)
{
    fprintf(stderr, "metrics_testd: %s: %s\n", what, st_strerror(st));
    exit(1);
}

/* Dies with what unless st is ST_OK. */
static void must(st_status_t st, const char *what)
{
    if (st != ST_OK) {
        die(what, st);
    }
}

static mx_metric_family_t *family(testd_t *t, const char *name, mx_metric_type_t type,
                                  const char *help, const char *const *labels, size_t n)
{
    mx_metric_family_t *f;
    mx_metric_desc_t d = {.name = name,
                          .help = help,
                          .type = type,
                          .label_names = labels,
                          .n_labels = n,
                          .buckets = mx_latency_buckets,
                          .n_buckets = mx_latency_buckets_n,
                          .scale = 1e-9};
    must(mx_register(t->m, &d, &f), name);
    return f;
}

static mx_counter_t *counter(mx_metric_family_t *f, const char *const *values)
{
    mx_counter_t *c;

    must(mx_counter(f, values, &c), "counter");
    return c;
}

static mx_gauge_t *gauge(mx_metric_family_t *f, const char *const *values)
{
    mx_gauge_t *g;

    must(mx_gauge(f, values, &g), "gauge");
    return g;
}

static void setup_metrics(testd_t *t)
{
    const char *const nk[] = {"namespace", "kind"};
    mx_metric_family_t *fl =
        family(t, "strata_lookups_total", MX_METRIC_COUNTER, "Lookups served.", nk, 2);
    mx_metric_family_t *fh = family(t, "strata_lookups_with_hit_total", MX_METRIC_COUNTER,
                                    "Lookups that matched at least one block.", nk, 2);
    mx_metric_family_t *ft =
        family(t, "strata_lookup_tokens_total", MX_METRIC_COUNTER, "Tokens looked up.", nk, 2);
    mx_metric_family_t *fm = family(t, "strata_lookup_matched_tokens_total", MX_METRIC_COUNTER,
                                    "Looked-up tokens in the matched prefix.", nk, 2);
    mx_metric_family_t *fr = family(t, "strata_lookup_resumable_tokens_total", MX_METRIC_COUNTER,
                                    "Looked-up tokens in the resumable prefix.", nk, 2);
    for (int n = 0; n < N_NS; n++) {
        for (int k = 0; k < N_KINDS; k++) {
            const char *v[2] = {namespaces[n], kinds[k]};
            t->lookups[n][k] = counter(fl, v);
            t->hits[n][k] = counter(fh, v);
            t->tokens[n][k] = counter(ft, v);
            t->matched[n][k] = counter(fm, v);
            t->resumable[n][k] = counter(fr, v);
        }
    }
    /* Per object kind (docs/observability.md §2): each lookup also gets one object. */
    mx_metric_family_t *fg =
        family(t, "strata_object_gets_total", MX_METRIC_COUNTER, "Objects asked for by key.",
               MX_LABELS("namespace", "kind", "outcome", "tier"), 4);
    mx_metric_family_t *fb =
        family(t, "strata_lookup_blocks_total", MX_METRIC_COUNTER, "Blocks asked about.",
               MX_LABELS("namespace", "kind", "outcome"), 3);
    for (int n = 0; n < N_NS; n++) {
        for (int k = 0; k < N_KINDS; k++) {
            t->gets[n][k][0] = counter(fg, MX_LABELS(namespaces[n], kinds[k], "hit", "dram"));
            t->gets[n][k][1] = counter(fg, MX_LABELS(namespaces[n], kinds[k], "hit", "ssd"));
            t->gets[n][k][2] = counter(fg, MX_LABELS(namespaces[n], kinds[k], "miss", "none"));
            t->blocks[n][k][0] = counter(fb, MX_LABELS(namespaces[n], kinds[k], "hit"));
            t->blocks[n][k][1] = counter(fb, MX_LABELS(namespaces[n], kinds[k], "miss"));
        }
    }
    const char *const nkt[] = {"namespace", "kind", "transport"};
    const char *const v3[] = {"tenant-a", "kv", "ucx"};
    t->bytes_ucx = counter(family(t, "strata_served_bytes_total", MX_METRIC_COUNTER,
                                  "Bytes served to clients.", nkt, 3),
                           v3);
    t->objects_ucx = counter(family(t, "strata_served_objects_total", MX_METRIC_COUNTER,
                                    "Objects served to clients.", nkt, 3),
                             v3);
    const char *const ev[] = {"tenant-a", "kv", "dram"};
    t->evictions =
        counter(family(t, "strata_evictions_total", MX_METRIC_COUNTER,
                       "Objects evicted from a tier.", MX_LABELS("namespace", "kind", "tier"), 3),
                ev);
    t->spills = counter(family(t, "strata_spills_total", MX_METRIC_COUNTER,
                               "Objects spilled from DRAM to SSD.", nk, 2),
                        MX_LABELS("tenant-a", "kv"));
    t->promotions = counter(family(t, "strata_promotions_total", MX_METRIC_COUNTER,
                                   "Objects promoted from SSD to DRAM.", nk, 2),
                            MX_LABELS("tenant-a", "kv"));
    t->errors =
        counter(family(t, "strata_errors_total", MX_METRIC_COUNTER,
                       "Requests that failed, by status code.", MX_LABELS("method", "code"), 2),
                MX_LABELS("Lookup", "ST_ERR_NOT_FOUND"));
    mx_metric_family_t *fd = family(t, "strata_request_duration_seconds", MX_METRIC_HISTOGRAM,
                                    "Time to serve a request.", MX_LABELS("method"), 1);
    if (mx_histogram(fd, MX_LABELS("Lookup"), &t->lat_lookup) != ST_OK) {
        die("histogram", ST_ERR_INTERNAL);
    }
    mx_metric_family_t *fu = family(t, "strata_tier_used_bytes", MX_METRIC_GAUGE_INT,
                                    "Bytes held in a tier.", MX_LABELS("namespace", "tier"), 2);
    mx_metric_family_t *fli = family(t, "strata_tier_limit_bytes", MX_METRIC_GAUGE_INT,
                                     "Byte limit of a tier.", MX_LABELS("tier"), 1);
    const char *const tiers[2] = {"dram", "ssd"};
    for (int i = 0; i < 2; i++) {
        t->used[i] = gauge(fu, MX_LABELS("tenant-a", tiers[i]));
        t->limit[i] = gauge(fli, MX_LABELS(tiers[i])); /* process-wide: no namespace */
    }
    mx_gauge_set_int(t->limit[0], 64LL << 30);
    mx_gauge_set_int(t->limit[1], 1LL << 40);
    t->leases = gauge(family(t, "strata_leases_active", MX_METRIC_GAUGE_INT,
                             "Read leases held now.", MX_LABELS("namespace"), 1),
                      MX_LABELS("tenant-a"));
    t->done_gauge = gauge(family(t, "strata_test_done", MX_METRIC_GAUGE_INT,
                                 "1 once the test traffic is over.", NULL, 0),
                          NULL);
}

/* One lookup: tokens looked up, matched, resumable. */
static void lookup(testd_t *t, int ns, int kind, uint64_t tokens, uint64_t matched,
                   uint64_t resumable)
{
    mx_counter_add(t->tokens[ns][kind], tokens);
    mx_counter_add(t->matched[ns][kind], matched);
    mx_counter_add(t->resumable[ns][kind], resumable);
    if (matched > 0) {
        mx_counter_inc(t->hits[ns][kind]);
        mx_counter_add(t->bytes_ucx, matched * 656 * 24);
        mx_counter_add(t->objects_ucx, matched / 64 * 24);
    } else {
        mx_counter_inc(t->errors);
    }
    mx_counter_inc(t->lookups[ns][kind]);
    /* Its blocks, and one object of its kind: a hit when anything matched, from SSD
     * every fourth lookup. */
    mx_counter_add(t->blocks[ns][kind][0], matched / 64);
    mx_counter_add(t->blocks[ns][kind][1], (tokens - matched) / 64);
    mx_counter_inc(t->gets[ns][kind][matched == 0 ? 2 : t->t_lookups % 4 == 0 ? 1 : 0]);
    mx_histogram_observe(t->lat_lookup, 30000 + matched * 100);
    t->t_lookups++, t->t_hits += matched > 0, t->t_tokens += tokens;
    t->t_matched += matched, t->t_resumable += resumable;
    t->t_ns_tokens[ns] += tokens, t->t_ns_matched[ns] += matched;
}

static void *traffic(void *arg)
{
    testd_t *t = arg;
    unsigned s = t->seed;
    for (unsigned i = 0; i < t->batches; i++) {
        uint64_t blocks = 1 + rand_r(&s) % 32;
        uint64_t hit = rand_r(&s) % 4 == 0 ? 0 : rand_r(&s) % (blocks + 1);
        int kind = (int)(rand_r(&s) % N_KINDS);
        /* kv resumes at the last KDA checkpoint (every 16 blocks); vis needs none. */
        uint64_t res = kind == 0 ? hit / 16 * 16 : hit;
        lookup(t, (int)(rand_r(&s) % N_NS), kind, blocks * 64, hit * 64, res * 64);
        mx_counter_add(t->evictions, rand_r(&s) % 3);
        if (i % 50 == 0) {
            usleep(1000);
        }
    }
    atomic_store(&t->done, 1);
    return NULL;
}

/* Runs at the start of every scrape, one scrape at a time. */
static void collect(mx_metrics_t *m, void *arg)
{
    testd_t *t = arg;
    uint64_t before = atomic_fetch_add(&t->scrapes, 1);
    if (t->mode_scrape) {
        for (int i = 0; i < 5; i++) {
            lookup(t, 0, 0, 100, i < 4 ? 95 : 0, i < 4 ? 80 : 0);
        }
        mx_counter_add(t->evictions, 3);
        mx_counter_add(t->bytes_ucx, 1 << 20);
        /* Per kind (kv idx kda session vis), gets: hits 4/5, 2/4, 1/2, 1/1,
         * 1/4, a quarter of kv's from SSD; lookup blocks: kv 8/10, vis 1/2. */
        static const uint64_t dram[5] = {3, 2, 1, 1, 1}, ssd[5] = {1, 0, 0, 0, 0},
                              miss[5] = {1, 2, 1, 0, 3}, bh[5] = {8, 0, 0, 0, 1},
                              bm[5] = {2, 0, 0, 0, 1};
        for (int k = 0; k < 5; k++) {
            t->k_dram[k] += dram[k];
            t->k_ssd[k] += ssd[k];
            t->k_miss[k] += miss[k];
            t->k_block_hit[k] += bh[k];
            t->k_block_miss[k] += bm[k];
        }
    } else if (!t->started && before - atomic_load(&t->stats_calls) >= 1) {
        /* A whole /metrics scrape has finished with every counter at zero. */
        t->started = 1;
        if (pthread_create(&t->traffic, NULL, traffic, t) != 0) {
            die("pthread_create", ST_ERR_NOMEM);
        }
    }
    uint64_t n = atomic_load(&t->scrapes);
    mx_gauge_set_int(t->used[0], (int64_t)((20 + n % 40) << 30));
    mx_gauge_set_int(t->used[1], (int64_t)(300LL << 30) + (int64_t)n * (1 << 28));
    mx_gauge_set_int(t->leases, (int64_t)(n % 7));
    mx_gauge_set_int(t->done_gauge, atomic_load(&t->done));
}

static double ratio(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 0.0;
}

static void stats_hook(mx_json_t *j, void *arg)
{
    testd_t *t = arg;
    atomic_fetch_add(&t->stats_calls, 1);
    int done = t->mode_scrape || atomic_load(&t->done);
    mx_json_key(j, "test");
    mx_json_begin_object(j);
    mx_json_key(j, "done");
    mx_json_bool(j, done);
    if (done) {
        mx_json_key(j, "lookups");
        mx_json_uint(j, t->t_lookups);
        mx_json_key(j, "token_hit_rate");
        mx_json_double(j, ratio(t->t_matched, t->t_tokens));
        mx_json_key(j, "request_hit_rate");
        mx_json_double(j, ratio(t->t_hits, t->t_lookups));
        mx_json_key(j, "resumable_hit_rate");
        mx_json_double(j, ratio(t->t_resumable, t->t_tokens));
        mx_json_key(j, "token_hit_rate_by_namespace");
        mx_json_begin_object(j);
        for (int n = 0; n < N_NS; n++) {
            mx_json_key(j, namespaces[n]);
            mx_json_double(j, ratio(t->t_ns_matched[n], t->t_ns_tokens[n]));
        }
        mx_json_end_object(j);
    }
    mx_json_end_object(j);
    if (t->mode_scrape) { /* as stratad's /stats "kinds" (docs/observability.md §3) */
        static const char *const kn[5] = {"kv", "idx", "kda", "session", "vis"};

        mx_json_key(j, "kinds");
        mx_json_begin_object(j);
        for (int k = 0; k < 5; k++) {
            mx_json_key(j, kn[k]);
            mx_json_begin_object(j);
            mx_json_key(j, "get_hits_dram");
            mx_json_uint(j, t->k_dram[k]);
            mx_json_key(j, "get_hits_ssd");
            mx_json_uint(j, t->k_ssd[k]);
            mx_json_key(j, "get_misses");
            mx_json_uint(j, t->k_miss[k]);
            mx_json_key(j, "lookup_block_hits");
            mx_json_uint(j, t->k_block_hit[k]);
            mx_json_key(j, "lookup_block_misses");
            mx_json_uint(j, t->k_block_miss[k]);
            mx_json_end_object(j);
        }
        mx_json_end_object(j);
    }
}

int main(int argc, char **argv)
{
    testd_t t = {.batches = 20000, .seed = 42};
    mx_http_opts_t o = {.stats = {.node = "testd"}};
    long port = 0, exit_after = 300;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL) {
            fprintf(stderr, "metrics_testd: %s needs a value\n", a);
            return 2;
        }
        i++;
        if (strcmp(a, "--port") == 0) {
            port = strtol(v, NULL, 10);
        } else if (strcmp(a, "--node") == 0) {
            o.stats.node = v;
        } else if (strcmp(a, "--peers") == 0) {
            o.stats.peers = v;
        } else if (strcmp(a, "--mode") == 0 && (!strcmp(v, "scrape") || !strcmp(v, "random"))) {
            t.mode_scrape = strcmp(v, "scrape") == 0;
        } else if (strcmp(a, "--batches") == 0) {
            t.batches = (unsigned)strtoul(v, NULL, 10);
        } else if (strcmp(a, "--seed") == 0) {
            t.seed = (unsigned)strtoul(v, NULL, 10);
        } else if (strcmp(a, "--exit-after") == 0) {
            exit_after = strtol(v, NULL, 10);
        } else if (strcmp(a, "--cors-origin") == 0) {
            o.cors_origins = v;
        } else if (strcmp(a, "--token") == 0) {
            o.token = v;
        } else if (strcmp(a, "--bind") == 0) {
            o.bind_addr = v;
        } else {
            fprintf(stderr, "metrics_testd: unknown option or value: %s %s\n", a, v);
            return 2;
        }
    }
    if (port < 0 || port > 65535) {
        fprintf(stderr, "metrics_testd: --port must be 0..65535, got %ld\n", port);
        return 2;
    }
    o.port = (uint16_t)port;
    o.stats.fn = stats_hook;
    o.stats.arg = &t;

    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL); /* before any thread starts */

    must(mx_create(&t.m), "mx_create");
    setup_metrics(&t);
    must(mx_add_collector(t.m, collect, &t), "mx_add_collector");
    mx_http_t *h;
    must(mx_http_start(t.m, &o, &h), "mx_http_start");
    printf("port=%u\n", (unsigned)mx_http_port(h));
    fflush(stdout);

    struct timespec limit = {.tv_sec = exit_after};
    int sig = sigtimedwait(&set, NULL, &limit);
    if (sig < 0 && errno == EAGAIN) {
        fprintf(stderr, "metrics_testd: --exit-after %ld s reached, exiting\n", exit_after);
    }
    mx_http_stop(h);
    if (t.started) {
        pthread_join(t.traffic, NULL);
    }
    mx_destroy(t.m);
    return 0;
}
