/*
 * bench_cached.c - the daemon's storage core against its floors.
 *
 * Runs, in one process, round by round:
 *   lookup  a 16,384-block chain (1M tokens, 1,024 segments of 16) through
 *           cd_store_lookup(), without and with a lease; floor: 16,384 probes
 *           of the same hash table alone (what any hashed index must pay);
 *   put     inline puts of 42 KB objects (one block, one DSA layer of KV);
 *           floor: memcpy + XXH3-64 of the same bytes;
 *   get     inline gets with checksum verification; same floor.
 * Later put rounds fill the store, so they include eviction.
 * Prints medians, p99 and MAD, and the ratios to the floors.
 *
 * usage: bench_cached [--rounds N]
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "bench_util.h"
#include "store_internal.h"
#include "mkhash.h"

#define NB   16384
#define SEG  16
#define OBJ  (42 * 1024)
#define NPUT 2048

static volatile uint64_t sink;
static uint64_t fake_now = 1;

static uint64_t clock_ms(void *ctx)
{
    (void)ctx;
    return fake_now;
}

static void report(const char *name, double *v, size_t n, const char *unit)
{
    bench_stats_t s;

    bench_stats(v, n, &s);
    printf("%-28s median %10.3f  p99 %10.3f  mad %8.3f %s\n", name, s.median, s.p99, s.mad, unit);
}

static double median_of(double *v, size_t n)
{
    bench_stats_t s;

    bench_stats(v, n, &s);
    return s.median;
}

int main(int argc, char **argv)
{
    static const uint8_t secret[32] = "bench-secret-bench-secret-bench!";
    size_t rounds = 41;
    cd_store_config_t cfg;
    cd_store_t *s;
    cd_err_t err;
    uint32_t ns;
    st_hash_t *hs = malloc(NB * sizeof(*hs));
    cd_segment_t *segs = malloc((NB / SEG) * sizeof(*segs));
    cd_seg_answer_t *ans = malloc((NB / SEG) * sizeof(*ans));
    uint64_t *kda = malloc(NB * sizeof(*kda));
    uint8_t *obj = malloc(OBJ), *out = malloc(OBJ), *dst = malloc((size_t)OBJ * NPUT);
    double *t_lk, *t_lkl, *t_floor, *t_put, *t_get, *t_copy;
    size_t kn;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--rounds") == 0) {
            rounds = strtoul(argv[i + 1], NULL, 10);
        }
    }
    if (argc % 2 == 0 || rounds == 0) {
        fprintf(stderr, "usage: bench_cached [--rounds N]\n");
        return 2;
    }
    t_lk = calloc(rounds, sizeof(double));
    t_lkl = calloc(rounds, sizeof(double));
    t_floor = calloc(rounds, sizeof(double));
    t_put = calloc(rounds, sizeof(double));
    t_get = calloc(rounds, sizeof(double));
    t_copy = calloc(rounds, sizeof(double));
    if (!hs || !segs || !ans || !kda || !obj || !out || !dst || !t_lk || !t_lkl || !t_floor ||
        !t_put || !t_get || !t_copy) {
        fprintf(stderr, "bench_cached: out of memory\n");
        return 1;
    }
    for (size_t i = 0; i < OBJ; i++) {
        obj[i] = (uint8_t)(i * 131 + 7);
    }
    cd_store_config_defaults(&cfg);
    cfg.memory_limit = 512ull << 20; /* room for NPUT x 42 KB twice over, then churn */
    cfg.cluster_secret = secret;
    cfg.cluster_secret_len = sizeof(secret);
    cfg.clock_ms = clock_ms;
    if (cd_store_create(&cfg, &s, &err) != ST_OK ||
        cd_store_ns_create(s, "bench", "m", 64, &ns, &err) != ST_OK) {
        fprintf(stderr, "bench_cached: %s\n", err.msg);
        return 1;
    }
    /* The 1M-token chain: 2 layers of small KV objects per block. */
    for (uint32_t i = 0; i < NB; i++) {
        hs[i] = mh_hash(1, i);
        for (uint32_t layer = 0; layer < 2; layer++) {
            cd_key_t k = {hs[i], CD_KIND_KV, layer};

            if (cd_store_put(s, ns, &k, i ? &hs[i - 1] : NULL, obj, 128, &err) != ST_OK) {
                fprintf(stderr, "bench_cached: %s\n", err.msg);
                return 1;
            }
        }
    }
    for (uint32_t i = 0; i < NB / SEG; i++) {
        segs[i] = (cd_segment_t){(uint64_t)i * SEG, SEG, &hs[i * SEG]};
    }
    cd_require_t req = {1u << CD_KIND_KV, {3, 0}};
    cd_ns_t *nsp = cd_ns_get(s, ns);

    for (size_t r = 0; r < rounds; r++) {
        uint64_t t0, lease = 0;

        t0 = bench_now_ns();
        cd_store_lookup(s, ns, segs, NB / SEG, &req, CD_LEASE_NONE, ans, kda, NB, &kn, NULL, NULL,
                        &err);
        t_lk[r] = (double)(bench_now_ns() - t0) / 1e3;
        if (ans[NB / SEG - 1].matched != SEG) {
            fprintf(stderr, "bench_cached: lookup did not match\n");
            return 1;
        }
        t0 = bench_now_ns();
        cd_store_lookup(s, ns, segs, NB / SEG, &req, CD_LEASE_DEFAULT, ans, kda, NB, &kn, &lease,
                        NULL, &err);
        cd_store_release(s, ns, lease);
        t_lkl[r] = (double)(bench_now_ns() - t0) / 1e3;
        t0 = bench_now_ns();
        for (uint32_t i = 0; i < NB; i++) {
            sink += (uintptr_t)cd_radix_find(&nsp->ns_radix, &hs[i]);
        }
        t_floor[r] = (double)(bench_now_ns() - t0) / 1e3;
    }
    printf("lookup of a 16,384-block chain (1M tokens), 1,024 segments, KV layers 0-1 required\n");
    report("  lookup", t_lk, rounds, "us");
    report("  lookup + lease + release", t_lkl, rounds, "us");
    report("  floor: 16,384 table probes", t_floor, rounds, "us");
    printf("  ratio lookup/floor %.2f\n\n", median_of(t_lk, rounds) / median_of(t_floor, rounds));

    /* Inline put/get of 42 KB objects, fresh keys each round. */
    for (size_t r = 0; r < rounds; r++) {
        uint64_t t0 = bench_now_ns(), len;

        for (uint32_t i = 0; i < NPUT; i++) {
            cd_key_t k = {mh_hash(2 + (uint32_t)r, i), CD_KIND_KV, 0};

            obj[0] = (uint8_t)i;
            if (cd_store_put(s, ns, &k, NULL, obj, OBJ, &err) != ST_OK) {
                fprintf(stderr, "bench_cached: %s\n", err.msg);
                return 1;
            }
        }
        t_put[r] = (double)OBJ * NPUT / (double)(bench_now_ns() - t0); /* GB/s */
        t0 = bench_now_ns();
        for (uint32_t i = 0; i < NPUT; i++) {
            cd_key_t k = {mh_hash(2 + (uint32_t)r, i), CD_KIND_KV, 0};

            cd_store_get(s, ns, &k, out, OBJ, &len, NULL, &err);
            sink += out[0];
        }
        t_get[r] = (double)OBJ * NPUT / (double)(bench_now_ns() - t0);
        t0 = bench_now_ns();
        for (uint32_t i = 0; i < NPUT; i++) {
            memcpy(dst + (size_t)i * OBJ, obj, OBJ);
            sink += XXH3_64bits(dst + (size_t)i * OBJ, OBJ);
        }
        t_copy[r] = (double)OBJ * NPUT / (double)(bench_now_ns() - t0);
    }
    printf("inline objects of 42 KB (2,048 per round; later rounds evict earlier ones)\n");
    report("  put (GB/s)", t_put, rounds, "GB/s");
    report("  get + verify (GB/s)", t_get, rounds, "GB/s");
    report("  floor: memcpy + XXH3 (GB/s)", t_copy, rounds, "GB/s");
    printf("  ratio put/floor %.2f  get/floor %.2f\n",
           median_of(t_put, rounds) / median_of(t_copy, rounds),
           median_of(t_get, rounds) / median_of(t_copy, rounds));
    cd_stats_t st;
    cd_store_stats(s, ns, &st);
    printf("  evicted blocks %llu, memory used %llu of %llu\n",
           (unsigned long long)st.evicted_blocks, (unsigned long long)st.memory_used,
           (unsigned long long)st.memory_limit);
    cd_store_destroy(s);
    free(hs), free(segs), free(ans), free(kda), free(obj), free(out), free(dst);
    free(t_lk), free(t_lkl), free(t_floor), free(t_put), free(t_get), free(t_copy);
    return (int)(sink & 0);
}
