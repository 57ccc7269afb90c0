/*
 * cli_load_hist.c - what `strata load` computes without I/O: the latency
 * histogram, the random draws of the arrival schedule and of the workload,
 * the mix parser, merging statistics (cli_load.h).
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli_load.h"

const char *const load_kind_names[LK_N] = {"lookup", "get", "rows", "put", "big_get"};
const char *const load_session_names[LS_N] = {"chat", "doc", "agent"};

size_t load_hist_bucket(uint64_t ns)
{
    int msb, shift;
    size_t i;

    if (ns < LOAD_HIST_SUB) {
        return (size_t)ns;
    }
    msb = 63 - __builtin_clzll(ns);
    shift = msb - 6; /* 2^6 = LOAD_HIST_SUB: the mantissa keeps 6 bits below the top one */
    i = LOAD_HIST_SUB + (size_t)shift * LOAD_HIST_SUB + (size_t)((ns >> shift) - LOAD_HIST_SUB);
    return i < LOAD_HIST_BUCKETS ? i : LOAD_HIST_BUCKETS - 1;
}

uint64_t load_hist_bucket_high(size_t i)
{
    uint64_t shift, mant;

    if (i < LOAD_HIST_SUB) {
        return (uint64_t)i;
    }
    shift = (i - LOAD_HIST_SUB) / LOAD_HIST_SUB;
    mant = LOAD_HIST_SUB + (i - LOAD_HIST_SUB) % LOAD_HIST_SUB;
    return ((mant + 1) << shift) - 1;
}

void load_hist_add(load_hist_t *h, uint64_t ns)
{
    h->b[load_hist_bucket(ns)]++;
    h->n++;
    if (ns > h->max_ns) {
        h->max_ns = ns;
    }
}

void load_hist_merge(load_hist_t *into, const load_hist_t *from)
{
    for (size_t i = 0; i < LOAD_HIST_BUCKETS; i++) {
        into->b[i] += from->b[i];
    }
    into->n += from->n;
    if (from->max_ns > into->max_ns) {
        into->max_ns = from->max_ns;
    }
}

uint64_t load_hist_quantile(const load_hist_t *h, double q)
{
    uint64_t rank, seen = 0;

    if (h->n == 0) {
        return 0;
    }
    /* The smallest value with at least ceil(q * n) values at or below it. */
    rank = (uint64_t)ceil(q * (double)h->n);
    rank = rank < 1 ? 1 : rank;
    for (size_t i = 0; i < LOAD_HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= rank) {
            uint64_t high = load_hist_bucket_high(i);

            return high < h->max_ns ? high : h->max_ns;
        }
    }
    return h->max_ns;
}

void load_stats_merge(load_stats_t *into, const load_stats_t *from)
{
    for (int k = 0; k < LK_N; k++) {
        into->k[k].count += from->k[k].count;
        into->k[k].ok += from->k[k].ok;
        into->k[k].bytes += from->k[k].bytes;
        load_hist_merge(&into->k[k].lat, &from->k[k].lat);
        for (int e = 0; e < LOAD_N_STATUS; e++) {
            into->errors[k][e] += from->errors[k][e];
        }
    }
    into->lookup_asked += from->lookup_asked;
    into->lookup_hit += from->lookup_hit;
    into->get_asked += from->get_asked;
    into->get_hit += from->get_hit;
    into->wrong_bytes += from->wrong_bytes;
    into->issued += from->issued;
    if (from->elapsed > into->elapsed) {
        into->elapsed = from->elapsed;
    }
}

uint64_t load_rng_seed(uint64_t a, uint64_t b)
{
    uint64_t s = (a + 0x9e3779b97f4a7c15ull) * 0xbf58476d1ce4e5b9ull ^ (b * 0x94d049bb133111ebull);

    s ^= s >> 31;
    return s != 0 ? s : 1;
}

uint64_t load_rng_next(uint64_t *s)
{
    uint64_t x = *s;

    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545f4914f6cdd1dull;
}

uint64_t load_rng_range(uint64_t *s, uint64_t lo, uint64_t hi)
{
    if (hi <= lo) {
        return lo;
    }
    return lo + load_rng_next(s) % (hi - lo + 1);
}

uint64_t load_rng_exp(uint64_t *s, double mean_ns)
{
    /* u in (0, 1]: 53 random bits, never 0, so that log(u) is finite. */
    double u = ((double)(load_rng_next(s) >> 11) + 1.0) / 9007199254740992.0;

    return (uint64_t)(-log(u) * mean_ns);
}

int load_rng_pick(uint64_t *s, const uint32_t *w, int n)
{
    uint64_t sum = 0, x;

    for (int i = 0; i < n; i++) {
        sum += w[i];
    }
    x = load_rng_next(s) % (sum ? sum : 1);
    for (int i = 0; i < n; i++) {
        if (x < w[i]) {
            return i;
        }
        x -= w[i];
    }
    return n - 1;
}

/* One "name=weight" of a mix, len bytes at p: into w[0..n). Returns 0 or -1 with err. */
static int load_mix_item(const char *p, size_t len, const char *const *names, int n, uint32_t *w,
                         int *seen, char *err, size_t err_len)
{
    const char *eq = memchr(p, '=', len);
    char num[16], *end;
    long v;
    int i;

    if (eq == NULL) {
        snprintf(err, err_len, "'%.*s' is not name=weight", (int)len, p);
        return -1;
    }
    for (i = 0; i < n; i++) {
        if (strlen(names[i]) == (size_t)(eq - p) && memcmp(names[i], p, (size_t)(eq - p)) == 0) {
            break;
        }
    }
    if (i == n) {
        snprintf(err, err_len, "unknown name '%.*s' (one of %s%s%s%s%s%s%s)", (int)(eq - p), p,
                 names[0], n > 1 ? ", " : "", n > 1 ? names[1] : "", n > 2 ? ", " : "",
                 n > 2 ? names[2] : "", n > 3 ? ", " : "", n > 3 ? names[3] : "");
        return -1;
    }
    if (seen[i]) {
        snprintf(err, err_len, "'%s' given twice", names[i]);
        return -1;
    }
    len -= (size_t)(eq + 1 - p);
    if (len == 0 || len >= sizeof(num)) {
        snprintf(err, err_len, "weight of '%s' is not a number from 0 to 1000000", names[i]);
        return -1;
    }
    memcpy(num, eq + 1, len);
    num[len] = '\0';
    errno = 0;
    v = strtol(num, &end, 10);
    if (*end != '\0' || errno != 0 || v < 0 || v > 1000000 || num[0] == '-' || num[0] == '+') {
        snprintf(err, err_len, "weight '%s' of '%s' is not a number from 0 to 1000000", num,
                 names[i]);
        return -1;
    }
    seen[i] = 1;
    w[i] = (uint32_t)v;
    return 0;
}

int load_mix_parse(const char *text, const char *const *names, int n, uint32_t *w, char *err,
                   size_t err_len)
{
    uint32_t tmp[8] = {0};
    int seen[8] = {0};
    const char *p = text;
    uint64_t sum = 0;

    if (n > 8 || text == NULL || text[0] == '\0') {
        snprintf(err, err_len, "empty mix");
        return -1;
    }
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);

        if (load_mix_item(p, len, names, n, tmp, seen, err, err_len) != 0) {
            return -1;
        }
        if (comma == NULL) {
            break;
        }
        p = comma + 1;
    }
    for (int i = 0; i < n; i++) {
        sum += tmp[i];
    }
    if (sum == 0) {
        snprintf(err, err_len, "every weight is 0");
        return -1;
    }
    memcpy(w, tmp, sizeof(*w) * (size_t)n);
    return 0;
}
