/*
 * test_load_hist.c - what `strata load` computes without I/O
 * (client/cli/cli_load_hist.c): the histogram's buckets and quantiles
 * against exact sorted values, the Poisson gaps' mean and spread, the
 * weighted pick, and the mix parser's answers and refusals: a table of
 * refusals, then 200,000 random mixes over its own alphabet against a second
 * parser written another way.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_load.h"
#include "unit_main.h"

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return (x > y) - (x < y);
}

/* Every value lands in a bucket that holds it, no wider than 1/64 of it. */
static void test_buckets(void **state)
{
    (void)state;
    for (uint64_t v = 0; v < (1ull << 42); v = v < 200 ? v + 1 : v + v / 7 + 1) {
        size_t i = load_hist_bucket(v);
        uint64_t lo = i == 0 ? 0 : load_hist_bucket_high(i - 1) + 1;

        assert_true(i < LOAD_HIST_BUCKETS);
        assert_true(lo <= v && v <= load_hist_bucket_high(i));
        assert_true(load_hist_bucket_high(i) - lo <= (v >> 6));
    }
    assert_int_equal(load_hist_bucket(UINT64_MAX), LOAD_HIST_BUCKETS - 1);
}

/* Quantiles of a histogram are within a bucket's width of the exact ones. */
static void test_quantiles(void **state)
{
    static load_hist_t h, h2;
    enum { N = 100000 };
    uint64_t *v = malloc(sizeof(*v) * N), rng = load_rng_seed(7, 7);
    const double qs[] = {0.5, 0.9, 0.99, 0.999, 1.0};

    (void)state;
    assert_non_null(v);
    memset(&h, 0, sizeof(h));
    memset(&h2, 0, sizeof(h2));
    assert_int_equal(load_hist_quantile(&h, 0.99), 0);
    for (int i = 0; i < N; i++) {
        v[i] = 1000 + load_rng_exp(&rng, 200000.0); /* µs-scale latencies with a tail */
        load_hist_add(i % 2 ? &h : &h2, v[i]);
    }
    load_hist_merge(&h, &h2);
    assert_int_equal(h.n, N);
    qsort(v, N, sizeof(*v), cmp_u64);
    assert_int_equal(h.max_ns, v[N - 1]);
    for (size_t j = 0; j < sizeof(qs) / sizeof(qs[0]); j++) {
        uint64_t want = v[(size_t)ceil(qs[j] * N) - 1], got = load_hist_quantile(&h, qs[j]);

        assert_true(got >= want);
        assert_true(got - want <= (want >> 6));
    }
    free(v);
}

/* Gaps of mean m: mean within 2%, and an exponential's spread (sd = mean). */
static void test_exp(void **state)
{
    uint64_t rng = load_rng_seed(1, 2);
    double sum = 0, sq = 0, m = 5e6;
    enum { N = 200000 };

    (void)state;
    for (int i = 0; i < N; i++) {
        double x = (double)load_rng_exp(&rng, m);

        sum += x;
        sq += x * x;
    }
    assert_true(fabs(sum / N - m) < 0.02 * m);
    assert_true(fabs(sqrt(sq / N - (sum / N) * (sum / N)) - m) < 0.03 * m);
}

static void test_pick(void **state)
{
    const uint32_t w[4] = {40, 0, 50, 10};
    uint64_t rng = load_rng_seed(3, 4), n[4] = {0};

    (void)state;
    for (int i = 0; i < 100000; i++) {
        n[load_rng_pick(&rng, w, 4)]++;
    }
    assert_int_equal(n[1], 0);
    assert_true(n[0] > 39000 && n[0] < 41000);
    assert_true(n[2] > 49000 && n[2] < 51000);
    assert_true(n[3] > 9300 && n[3] < 10700);
}

static void test_mix(void **state)
{
    static const char *const names[4] = {"lookup", "get", "rows", "put"};
    static const char *const bad[] = {
        "",
        "lookup",
        "lookup=",
        "lookup=x",
        "lookup=-1",
        "lookup=+1",
        "lookup=1,",
        "look=1",
        "lookup=1,lookup=2",
        "lookup=0,get=0",
        "get=2000000",
        "get=1 ",
        ",get=1",
        "get=99999999999999999999",
    };
    uint32_t w[4] = {9, 9, 9, 9};
    char err[256];

    (void)state;
    assert_int_equal(load_mix_parse("get=3,lookup=1", names, 4, w, err, sizeof(err)), 0);
    assert_int_equal(w[0], 1);
    assert_int_equal(w[1], 3);
    assert_int_equal(w[2], 0);
    assert_int_equal(w[3], 0);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint32_t keep[4] = {5, 6, 7, 8};

        err[0] = '\0';
        assert_int_equal(load_mix_parse(bad[i], names, 4, keep, err, sizeof(err)), -1);
        assert_true(err[0] != '\0');
        assert_int_equal(keep[0], 5); /* untouched */
        assert_int_equal(keep[3], 8);
    }
    assert_int_equal(load_mix_parse("look=1", names, 4, w, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "'look'"));
    assert_int_equal(load_mix_parse("lookup=1,lookup=2", names, 4, w, err, sizeof(err)), -1);
    assert_non_null(strstr(err, "twice"));
}

/*
 * A second parser, written another way, as the oracle of the fuzz below: items split at
 * commas, each NAME=DIGITS with a known name, at most once, 1 to 15 digits, at most 1000000,
 * and not every weight 0.
 */
static int ref_mix(const char *text, const char *const *names, int n, uint32_t *w)
{
    int seen[4] = {0};
    uint64_t sum = 0;
    const char *p = text;

    memset(w, 0, sizeof(*w) * (size_t)n);
    for (;;) {
        size_t len = strcspn(p, ","), nl, nd;
        uint64_t v = 0;
        int k = -1;

        for (int i = 0; i < n; i++) {
            nl = strlen(names[i]);
            if (len > nl && strncmp(p, names[i], nl) == 0 && p[nl] == '=') {
                k = i;
            }
        }
        if (k < 0 || seen[k]) {
            return -1;
        }
        nl = strlen(names[k]) + 1;
        nd = len - nl;
        if (nd < 1 || nd > 15 || strspn(p + nl, "0123456789") < nd) {
            return -1;
        }
        for (size_t j = 0; j < nd; j++) {
            v = v * 10 + (uint64_t)(p[nl + j] - '0');
        }
        if (v > 1000000) {
            return -1;
        }
        seen[k] = 1;
        w[k] = (uint32_t)v;
        sum += v;
        if (p[len] == '\0') {
            break;
        }
        p += len + 1;
    }
    return sum > 0 ? 0 : -1;
}

/* Random mixes over the parser's own alphabet: both parsers agree, and a refusal names why. */
static void test_mix_fuzz(void **state)
{
    static const char *const names[4] = {"lookup", "get", "rows", "put"};
    static const char *const parts[] = {"lookup",  "get", "rows", "put", "=",      ",",
                                        "0",       "1",   "7",    "00",  "999999", "1000000",
                                        "1000001", "-",   "+",    " ",   "x",      "look"};
    uint64_t rng = load_rng_seed(11, 13);
    int accepted = 0;

    (void)state;
    for (int it = 0; it < 200000; it++) {
        char text[128] = "", err[256];
        uint32_t got[4] = {7, 7, 7, 7}, want[4];
        int n = 1 + (int)(load_rng_next(&rng) % 12), rc, ref;

        for (int i = 0; i < n; i++) {
            /* mostly well-formed items, so that acceptance is not rare */
            if (load_rng_next(&rng) % 3 != 0) {
                snprintf(text + strlen(text), sizeof(text) - strlen(text), "%s%s=%s", i ? "," : "",
                         names[load_rng_next(&rng) % 4], parts[6 + load_rng_next(&rng) % 7]);
            } else {
                snprintf(text + strlen(text), sizeof(text) - strlen(text), "%s",
                         parts[load_rng_next(&rng) % (sizeof(parts) / sizeof(parts[0]))]);
            }
        }
        err[0] = '\0';
        rc = load_mix_parse(text, names, 4, got, err, sizeof(err));
        ref = ref_mix(text, names, 4, want);
        if (rc != ref) {
            fail_msg("'%s': parser %d, reference %d (%s)", text, rc, ref, err);
        }
        if (rc == 0) {
            accepted++;
            assert_memory_equal(got, want, sizeof(want));
        } else {
            assert_true(err[0] != '\0');
            assert_int_equal(got[0], 7);
        }
    }
    assert_true(accepted > 1000);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_buckets), cmocka_unit_test(test_quantiles),
             cmocka_unit_test(test_exp), cmocka_unit_test(test_pick), cmocka_unit_test(test_mix),
             cmocka_unit_test(test_mix_fuzz));
}
