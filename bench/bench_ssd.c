/*
 * bench_ssd.c - the SSD tier against the disk it sits on.
 *
 * 1. Restart: an environment with --blocks blocks indexed (one KV object per
 *    block, a KDA checkpoint every 16 blocks) is created once; then
 *    open + recovery iteration (ssd_iterate over every object) is timed
 *    --opens times, warm (file in the page cache) and cold (the file's pages
 *    dropped with posix_fadvise first).
 * 2. Throughput: --total-mb of 42 KB KV values are spilled (queued, batched,
 *    then a durable flush) and promoted back, against a plain sequential
 *    write of the same bytes to a file (write(2), fsync at the end) and a
 *    sequential read of it, in the same round. Reads are timed warm and cold.
 *    The two writes alternate in order from round to round (even rounds
 *    write the plain file first): on a virtual disk whichever of two large
 *    writes comes second can run at half speed. Reported as GB/s and as the
 *    ratio tier / plain file, median and MAD over --rounds rounds, and for
 *    spill also order-balanced over pairs of rounds (bench_balanced).
 * 3. Durable puts: --durable 4 KB SESSION puts with SSD_DURABLE from 1 and
 *    from 8 threads (group commit), against pwrite + fdatasync per record on
 *    a plain file: puts per second, p50 and p99 latency.
 *
 * usage: bench_ssd [--dir DIR] [--blocks N] [--opens N] [--total-mb N]
 *                  [--rounds N] [--batch-mb N] [--sync-none] [--durable N (0: skip)] [--skip-restart] [--skip-throughput]
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include <xxhash.h>

#include "bench_util.h"
#include "log.h"
#include "ssd.h"

#define VALUE_BYTES 43008 /* one 64-token block of one DSA layer: 42 KB */
#define SMALL_BYTES 128

static uint64_t batch_mb = 64;
static ssd_sync_t sync_mode = SSD_SYNC_DURABLE;

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

static void rm_tree(const char *dir)
{
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

static void die(const char *what, st_status_t status)
{
    fprintf(stderr, "bench_ssd: %s: %s\n", what, st_strerror(status));
    exit(1);
}

/* Drops the page cache of every file in dir (and of path when a file). */
static void drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY);

    if (fd < 0) {
        return;
    }
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static void drop_env_cache(const char *dir)
{
    char path[1024];

    if (snprintf(path, sizeof(path), "%s/data.mdb", dir) >= (int)sizeof(path)) {

        fprintf(stderr, "bench_ssd: path too long\n");

        exit(2);
    }
    drop_cache(path);
}

static ssd_key_t bkey(uint64_t ns, uint64_t n, unsigned kind, uint16_t layer)
{
    ssd_key_t k;
    uint64_t h1 = XXH3_64bits(&n, sizeof(n)), h2 = XXH3_64bits_withSeed(&n, sizeof(n), ns);

    memset(&k, 0, sizeof(k));
    k.ns = ns;
    memcpy(k.id.b, &h1, 8);
    memcpy(k.id.b + 8, &h2, 8);
    k.kind = (uint8_t)kind;
    k.layer = layer;
    return k;
}

static ssd_t *open_env(const char *dir, uint64_t map_size, uint64_t budget)
{
    ssd_params_t p = {0};
    ssd_t *ssd = NULL;
    st_status_t status;

    p.dir = dir;
    p.map_size = map_size;
    p.spill_budget = budget;
    p.batch_bytes = batch_mb << 20;
    p.sync = sync_mode;
    p.queue_bytes = 2 * p.batch_bytes;
    status = ssd_open(&p, &ssd);
    if (status != ST_OK) {
        die("open", status);
    }
    return ssd;
}

typedef struct recov {
    uint64_t n;
    uint64_t sum;
    uint64_t bytes;
} recov_t;

static int recov_cb(void *arg, const ssd_key_t *key, const ssd_meta_t *meta)
{
    recov_t *r = arg;

    /* What an index rebuild needs per object: key, kind, layer, length, checksum. */
    r->n++;
    r->sum += meta->checksum ^ key->id.b[0] ^ key->layer;
    r->bytes += meta->length;
    return 0;
}

static void print_stats(const char *name, double *s, size_t n, const char *unit)
{
    bench_stats_t st;

    bench_stats(s, n, &st);
    printf("  %-34s median %8.3f %s  min %8.3f  max %8.3f  MAD %6.3f\n", name, st.median, unit,
           st.min, st.max, st.mad);
}

static void bench_restart(const char *top, uint64_t blocks, int opens)
{
    char dir[1024];
    uint8_t payload[SMALL_BYTES];
    ssd_t *ssd;
    double *warm = calloc((size_t)opens, sizeof(double));
    double *cold = calloc((size_t)opens, sizeof(double));
    double *openonly = calloc((size_t)opens, sizeof(double));
    uint64_t t0, expect = blocks + (blocks + 15) / 16;
    ssd_stats_t st;
    st_status_t status;

    if (snprintf(dir, sizeof(dir), "%s/restart", top) >= (int)sizeof(dir)) {

        fprintf(stderr, "bench_ssd: path too long\n");

        exit(2);
    }
    ssd = open_env(dir, 8ull << 30, 4ull << 30);
    t0 = bench_now_ns();
    for (uint64_t i = 0; i < blocks; i++) {
        ssd_key_t k = bkey(1 + i / 65536, i, SSD_KV, 0);

        memset(payload, (int)(i & 0xff), sizeof(payload));
        memcpy(payload, &i, sizeof(i));
        status = ssd_spill(ssd, &k, payload, sizeof(payload), 0, NULL, NULL);
        if (status != ST_OK) {
            die("spill", status);
        }
        if (i % 16 == 0) {
            k.kind = SSD_KDA;
            status = ssd_put(ssd, &k, payload, sizeof(payload), 0, NULL, NULL);
            if (status != ST_OK) {
                die("put", status);
            }
        }
    }
    status = ssd_flush(ssd, 1);
    if (status != ST_OK) {
        die("flush", status);
    }
    ssd_stats(ssd, &st);
    printf("restart: %llu blocks, %llu objects, data file %.1f MB, built in %.1f s\n",
           (unsigned long long)blocks, (unsigned long long)expect, (double)st.map_used / 1e6,
           (double)(bench_now_ns() - t0) / 1e9);
    ssd_close(ssd);

    for (int cold_run = 0; cold_run < 2; cold_run++) {
        for (int r = 0; r < opens; r++) {
            recov_t rc = {0};
            uint64_t t1;

            if (cold_run) {
                drop_env_cache(dir);
            }
            t0 = bench_now_ns();
            ssd = open_env(dir, 8ull << 30, 4ull << 30);
            t1 = bench_now_ns();
            status = ssd_iterate(ssd, recov_cb, &rc, NULL);
            if (status != ST_OK) {
                die("iterate", status);
            }
            (cold_run ? cold : warm)[r] = (double)(bench_now_ns() - t0) / 1e9;
            if (!cold_run) {
                openonly[r] = (double)(t1 - t0) / 1e3;
            }
            if (rc.n != expect) {
                fprintf(stderr, "bench_ssd: recovery saw %llu objects, expected %llu\n",
                        (unsigned long long)rc.n, (unsigned long long)expect);
                exit(1);
            }
            ssd_close(ssd);
        }
    }
    printf("restart (open + recovery iteration of %llu objects), %d opens each:\n",
           (unsigned long long)expect, opens);
    print_stats("warm page cache", warm, (size_t)opens, "s");
    print_stats("cold (data.mdb dropped from cache)", cold, (size_t)opens, "s");
    print_stats("ssd_open alone (warm)", openonly, (size_t)opens, "us");
    rm_tree(dir);
    free(warm);
    free(cold);
    free(openonly);
}

static uint64_t spills_done, spills_failed;

static void count_done(void *arg, const ssd_key_t *key, st_status_t status)
{
    if (status == ST_OK) {
        spills_done++;
    } else {
        spills_failed++;
    }
}

typedef struct rbuf {
    uint8_t *buf;
} rbuf_t;

static void *rbuf_alloc(void *arg, size_t length, const ssd_meta_t *meta)
{
    return length <= VALUE_BYTES ? ((rbuf_t *)arg)->buf : NULL;
}

/* One round; fills the four rates (GB/s). */
/* Plain file: a sequential write of the bytes, fsync at the end. GB/s. */
static double plain_write(const char *path, uint64_t n, const uint8_t *src, double gb)
{
    uint64_t t0 = bench_now_ns();
    int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);

    if (fd < 0) {
        perror(path);
        exit(1);
    }
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *p = src + (i % 64) * 4096;

        if (write(fd, p, VALUE_BYTES) != VALUE_BYTES) {
            perror("write");
            exit(1);
        }
    }
    fsync(fd);
    close(fd);
    return gb / ((double)(bench_now_ns() - t0) / 1e9);
}

/* The tier: spill everything, then a durable flush. GB/s. */
static double tier_spill(const char *dir, uint64_t n, const uint8_t *src, double gb, int round)
{
    ssd_t *ssd = open_env(dir, 16ull << 30, 12ull << 30);
    uint64_t t0 = bench_now_ns();
    st_status_t status;
    double rate;

    for (uint64_t i = 0; i < n; i++) {
        ssd_key_t k = bkey(9, i, SSD_KV, (uint16_t)(i % 24));

        /* As the daemon spills: not copied, the buffer stays valid until done. */
        status = ssd_spill(ssd, &k, src + (i % 64) * 4096, VALUE_BYTES, 0, count_done, NULL);
        if (status != ST_OK) {
            die("spill", status);
        }
    }
    status = ssd_flush(ssd, 1);
    if (status != ST_OK) {
        die("flush", status);
    }
    rate = gb / ((double)(bench_now_ns() - t0) / 1e9);
    if (spills_done != n || spills_failed != 0) {
        fprintf(stderr, "bench_ssd: %llu spills done, %llu failed, of %llu\n",
                (unsigned long long)spills_done, (unsigned long long)spills_failed,
                (unsigned long long)n);
        exit(1);
    }
    spills_done = 0;
    {
        ssd_stats_t st;

        ssd_stats(ssd, &st);
        printf("  round %d: spill committed %llu values in %llu write transactions\n", round,
               (unsigned long long)st.spills, (unsigned long long)st.txns);
    }
    ssd_close(ssd);
    return rate;
}

static void bench_round(const char *top, uint64_t n, const uint8_t *src, int round, double *spill,
                        double *file_w, double *prom_warm, double *file_r_warm, double *prom_cold,
                        double *file_r_cold)
{
    char dir[1024], path[1024];
    double gb = (double)n * VALUE_BYTES / 1e9;
    uint8_t *buf = malloc(VALUE_BYTES);
    rbuf_t rb = {buf};
    ssd_t *ssd;
    uint64_t t0;
    int fd;
    st_status_t status;

    if (snprintf(dir, sizeof(dir), "%s/tp%d", top, round) >= (int)sizeof(dir)) {

        fprintf(stderr, "bench_ssd: path too long\n");

        exit(2);
    }
    if (snprintf(path, sizeof(path), "%s/plain%d.bin", top, round) >= (int)sizeof(path)) {
        fprintf(stderr, "bench_ssd: path too long\n");
        exit(2);
    }

    /* The writes alternate in order from round to round: on this virtual
     * disk a second write of a gigabyte runs at half the speed of the first
     * (the host is still writing the first back), whichever it is. */
    if (round % 2 == 0) {
        *file_w = plain_write(path, n, src, gb);
        *spill = tier_spill(dir, n, src, gb, round);
    } else {
        *spill = tier_spill(dir, n, src, gb, round);
        *file_w = plain_write(path, n, src, gb);
    }

    for (int cold = 0; cold < 2; cold++) {
        if (cold) {
            drop_cache(path);
            drop_env_cache(dir);
        }
        t0 = bench_now_ns();
        fd = open(path, O_RDONLY);
        for (uint64_t i = 0; i < n; i++) {
            if (read(fd, buf, VALUE_BYTES) != VALUE_BYTES) {
                perror("read");
                exit(1);
            }
        }
        close(fd);
        *(cold ? file_r_cold : file_r_warm) = gb / ((double)(bench_now_ns() - t0) / 1e9);

        /* Promote the first pass only reads (get); the second promotes
         * (get + queued delete), timed up to the flush of those deletes. */
        ssd = open_env(dir, 16ull << 30, 12ull << 30);
        t0 = bench_now_ns();
        for (uint64_t i = 0; i < n; i++) {
            ssd_key_t k = bkey(9, i, SSD_KV, (uint16_t)(i % 24));

            status = cold ? ssd_promote(ssd, &k, rbuf_alloc, &rb, NULL)
                          : ssd_get(ssd, &k, rbuf_alloc, &rb, NULL);
            if (status != ST_OK) {
                die("promote", status);
            }
        }
        ssd_flush(ssd, 0);
        *(cold ? prom_cold : prom_warm) = gb / ((double)(bench_now_ns() - t0) / 1e9);
        ssd_close(ssd);
    }
    unlink(path);
    rm_tree(dir);
    free(buf);
}

static void bench_throughput(const char *top, uint64_t total_mb, int rounds)
{
    uint64_t n = total_mb * 1000000ull / VALUE_BYTES;
    uint8_t *src = malloc(64 * 4096 + VALUE_BYTES);
    double *v[8];
    const char *names[8] = {"tier spill (+ durable flush)",
                            "plain write + fsync",
                            "tier get, warm",
                            "plain read, warm",
                            "tier promote, cold",
                            "plain read, cold",
                            "",
                            ""};

    for (int i = 0; i < 8; i++) {
        v[i] = calloc((size_t)rounds, sizeof(double));
    }
    /* Incompressible bytes; each value starts at a different offset. */
    for (size_t i = 0; i < 64 * 4096 + VALUE_BYTES; i++) {
        src[i] = (uint8_t)(XXH3_64bits(&i, sizeof(i)) >> 7);
    }
    printf("throughput: %llu values of %d B = %.2f GB per round, %d rounds\n",
           (unsigned long long)n, VALUE_BYTES, (double)n * VALUE_BYTES / 1e9, rounds);
    for (int r = 0; r < rounds; r++) {
        bench_round(top, n, src, r, &v[0][r], &v[1][r], &v[2][r], &v[3][r], &v[4][r], &v[5][r]);
        printf("  round %d: spill %.3f / write %.3f GB/s; get warm %.3f / read warm %.3f; "
               "promote cold %.3f / read cold %.3f\n",
               r, v[0][r], v[1][r], v[2][r], v[3][r], v[4][r], v[5][r]);
    }
    for (int i = 0; i < 6; i++) {
        double *copy = calloc((size_t)rounds, sizeof(double));

        memcpy(copy, v[i], (size_t)rounds * sizeof(double));
        print_stats(names[i], copy, (size_t)rounds, "GB/s");
        free(copy);
    }
    for (int i = 0; i < 3; i++) {
        double *ratio = calloc((size_t)rounds, sizeof(double));
        static const char *rn[3] = {"ratio spill / plain write", "ratio get / plain read, warm",
                                    "ratio promote / plain read, cold"};

        for (int r = 0; r < rounds; r++) {
            ratio[r] = v[2 * i][r] / v[2 * i + 1][r];
        }
        print_stats(rn[i], ratio, (size_t)rounds, "x");
        free(ratio);
    }
    if (rounds >= 2) {
        /* The writes alternate in order (bench_round): the spill against the
         * plain write over each pair of rounds, both orders weighed alike. */
        double *bal = calloc((size_t)rounds, sizeof(double));
        size_t k = bench_balanced(v[0], v[1], (size_t)rounds, bal);

        print_stats("ratio spill / plain write, order-balanced", bal, k, "x");
        free(bal);
    }
    for (int i = 0; i < 8; i++) {
        free(v[i]);
    }
    free(src);
}

/* ---- durable puts: latency and group commit ------------------------------- */

#define DUR_BYTES 4096

typedef struct dur_arg {
    ssd_t *ssd; /* NULL: the plain-file baseline on fd */
    int fd;
    int id;
    int n;
    double *lat_us; /* n samples */
} dur_arg_t;

static void *dur_thread(void *p)
{
    dur_arg_t *a = p;
    uint8_t buf[DUR_BYTES];

    memset(buf, a->id + 1, sizeof(buf));
    for (int i = 0; i < a->n; i++) {
        uint64_t t0 = bench_now_ns();

        memcpy(buf, &i, sizeof(i));
        if (a->ssd != NULL) {
            ssd_key_t k = bkey(30 + (uint64_t)a->id, (uint64_t)i, SSD_SESSION, 0);
            st_status_t status = ssd_put(a->ssd, &k, buf, sizeof(buf), SSD_DURABLE, NULL, NULL);

            if (status != ST_OK) {
                die("durable put", status);
            }
        } else {
            off_t off = ((off_t)a->id * a->n + i) * DUR_BYTES;

            if (pwrite(a->fd, buf, sizeof(buf), off) != (ssize_t)sizeof(buf) ||
                fdatasync(a->fd) != 0) {
                perror("pwrite/fdatasync");
                exit(1);
            }
        }
        a->lat_us[i] = (double)(bench_now_ns() - t0) / 1e3;
    }
    return NULL;
}

/* Runs threads x n durable writes; returns writes per second, fills *p50 and *p99. */
static double dur_run(ssd_t *ssd, int fd, int threads, int n, double *p50, double *p99)
{
    pthread_t th[16];
    dur_arg_t args[16];
    double *all = calloc((size_t)threads * (size_t)n, sizeof(double));
    bench_stats_t st;
    uint64_t t0 = bench_now_ns();
    double secs;

    for (int t = 0; t < threads; t++) {
        args[t] = (dur_arg_t){ssd, fd, t, n, all + (size_t)t * (size_t)n};
        pthread_create(&th[t], NULL, dur_thread, &args[t]);
    }
    for (int t = 0; t < threads; t++) {
        pthread_join(th[t], NULL);
    }
    secs = (double)(bench_now_ns() - t0) / 1e9;
    bench_stats(all, (size_t)threads * (size_t)n, &st);
    *p50 = st.median;
    *p99 = st.p99;
    free(all);
    return (double)threads * n / secs;
}

static void bench_durable(const char *top, int n)
{
    char dir[1024], path[1024];
    static const int thread_counts[2] = {1, 8};

    if (snprintf(dir, sizeof(dir), "%s/durable", top) >= (int)sizeof(dir) ||
        snprintf(path, sizeof(path), "%s/durable.bin", top) >= (int)sizeof(path)) {
        fprintf(stderr, "bench_ssd: path too long\n");
        exit(2);
    }
    printf("durable puts of %d B (SESSION), each returning after its sync; plain: pwrite + "
           "fdatasync per record:\n",
           DUR_BYTES);
    for (int c = 0; c < 2; c++) {
        int threads = thread_counts[c], per = n / threads;
        double tier, plain, t50, t99, f50, f99;
        ssd_t *ssd = open_env(dir, 1ull << 30, 1ull << 29);
        int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);

        if (fd < 0) {
            perror(path);
            exit(1);
        }
        plain = dur_run(NULL, fd, threads, per, &f50, &f99);
        tier = dur_run(ssd, -1, threads, per, &t50, &t99);
        close(fd);
        unlink(path);
        ssd_close(ssd);
        rm_tree(dir);
        printf("  %d thread(s): tier %7.0f puts/s (p50 %6.0f us, p99 %6.0f us); plain %7.0f "
               "writes/s (p50 %6.0f us, p99 %6.0f us); ratio %.2f\n",
               threads, tier, t50, t99, plain, f50, f99, tier / plain);
    }
}

int main(int argc, char **argv)
{
    const char *base = "/tmp";
    uint64_t blocks = 1000000, total_mb = 2048;
    int opens = 5, rounds = 3, skip_restart = 0, skip_tp = 0, durable = 800, sync_none = 0;
    char top[1024];
    const bench_opt_t opts[] = {{"--dir", BENCH_OPT_STR, &base},
                                {"--blocks", BENCH_OPT_U64, &blocks},
                                {"--opens", BENCH_OPT_INT, &opens},
                                {"--total-mb", BENCH_OPT_U64, &total_mb},
                                {"--rounds", BENCH_OPT_INT, &rounds},
                                {"--batch-mb", BENCH_OPT_U64, &batch_mb},
                                {"--sync-none", BENCH_OPT_FLAG, &sync_none},
                                {"--durable", BENCH_OPT_INT, &durable},
                                {"--skip-restart", BENCH_OPT_FLAG, &skip_restart},
                                {"--skip-throughput", BENCH_OPT_FLAG, &skip_tp}};

    if (bench_opts(argc, argv, 1, opts, sizeof(opts) / sizeof(opts[0])) != 0) {
        fprintf(stderr,
                "usage: %s [--dir DIR] [--blocks N] [--opens N] [--total-mb N] "
                "[--rounds N] [--batch-mb N] [--sync-none] [--durable N (0: skip)] "
                "[--skip-restart] [--skip-throughput]\n",
                argv[0]);
        return 2;
    }
    if (sync_none) {
        sync_mode = SSD_SYNC_NONE;
    }
    if (opens < 1 || rounds < 1 || blocks < 1 || total_mb < 1) {
        fprintf(stderr, "bench_ssd: counts must be at least 1\n");
        return 2;
    }
    lg_set_level(LG_WARN);
    if (snprintf(top, sizeof(top), "%s/st_bench_ssd_XXXXXX", base) >= (int)sizeof(top)) {
        fprintf(stderr, "bench_ssd: path too long\n");
        exit(2);
    }
    if (mkdtemp(top) == NULL) {
        perror(top);
        return 1;
    }
    if (!skip_restart) {
        bench_restart(top, blocks, opens);
    }
    if (durable > 0) {
        bench_durable(top, durable);
    }
    if (!skip_tp) {
        bench_throughput(top, total_mb, rounds);
    }
    rm_tree(top);
    return 0;
}
