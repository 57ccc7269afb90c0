/*
 * bench_tier.c - stratad's SSD tier, in process (cd_daemon_start with a
 * data_dir, no network calls timed).
 *
 * 1. Restart: a data directory with --blocks blocks on SSD (one KV object
 *    per block, a KDA checkpoint every 16 blocks, written with the tier
 *    library) is opened by a whole daemon start --opens times: the time from
 *    cd_daemon_start to serving (store, recovery of the index, server up),
 *    and the recovery part alone, warm and cold (data.mdb dropped from the
 *    page cache with posix_fadvise first).
 * 2. Spill and promote: --total-mb of 42 KB KV objects are put into a daemon
 *    whose memory_limit is a quarter of that, so most are evicted and spilled
 *    (the store's eviction hook), then promoted back (cd_tier_promote, as a
 *    Lookup miss does), against a plain sequential write (+ fsync) and read
 *    of the same bytes in a file. Promote runs twice per round: warm, the
 *    first quarter of the objects with data.mdb in the page cache, against
 *    a warm read of the plain file; then cold, the second quarter after
 *    data.mdb was dropped from the page cache (posix_fadvise DONTNEED, as
 *    bench_ssd does), against a read of as many bytes of the plain file
 *    dropped the same way. Then, steady state: data.mdb read back into the
 *    page cache and the first quarter promoted again (the tier kept its
 *    copies), its victims the second quarter, already on SSD, so evicting
 *    them writes nothing: what promotes cost once the working set has been
 *    through the tier, against the warm plain read. The plain reads land in
 *    distinct (pre-touched) memory, one 42 KB place per value, as promoted
 *    objects land in their own extents. The spill rate is what reached the
 *    SSD (committed: the evictions' spills and the write-behind's writes)
 *    over the time from the first eviction to the end of the flush; the
 *    put rate (puts, evictions, spills until flushed) is printed beside it.
 *    The daemon's write-behind window is --writeback (ssd_writeback,
 *    default 256M; 0: off). The tier half and the plain-file half of a
 *    round alternate in order (even rounds run the tier first): on a virtual
 *    disk whichever of two large writes comes second can run at half speed.
 *    Each round prints its numbers and what the evictions did; then the
 *    median, min and max over --rounds rounds (default 4) of every rate and
 *    of the ratios tier / plain per round, and the order-balanced ratios,
 *    one per pair of rounds (bench_balanced).
 *
 * usage: bench_tier [--dir DIR] [--blocks N] [--opens N] [--total-mb N] [--rounds N]
 *                   [--writeback SIZE]
 */
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "bench_util.h"
#include "daemon.h"
#include "log.h"
#include "ssd.h"
#include "tier.h"
#include "mkhash.h"

#define VALUE_BYTES 43008

static const char *g_writeback = "256M"; /* --writeback: the daemon's ssd_writeback */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static void die(const char *what, st_status_t status)
{
    fprintf(stderr, "bench_tier: %s: %s\n", what, st_strerror(status));
    exit(1);
}

static void drop_file_cache(const char *path)
{
    int fd = open(path, O_RDONLY);

    if (fd >= 0) {
        fdatasync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

static void drop_cache(const char *dir)
{
    char p[1200];

    snprintf(p, sizeof(p), "%s/data.mdb", dir);
    drop_file_cache(p);
}

/* Reads data.mdb once, so that its pages are in the page cache again. */
static void warm_cache(const char *dir)
{
    char p[1200];
    static uint8_t buf[1 << 20];
    int fd;

    snprintf(p, sizeof(p), "%s/data.mdb", dir);
    fd = open(p, O_RDONLY);
    if (fd >= 0) {
        while (read(fd, buf, sizeof(buf)) > 0) {
        }
        close(fd);
    }
}

static void start(cd_daemon_t *d, const char *dir, const char *mem)
{
    cd_config_t cfg;
    char err[256];
    const char *argv[] = {"bench_tier",
                          "--listen",
                          "127.0.0.1:0",
                          "--transport",
                          "none",
                          "--data-dir",
                          dir,
                          "--memory-limit",
                          mem,
                          "--log-level",
                          "warn",
                          "--ssd-map-size",
                          "16G",
                          "--cluster-secret",
                          "bench-tier-cluster-secret",
                          "--ssd-writeback",
                          g_writeback,
                          NULL};
    int npos = 0, help = 0;
    st_status_t st;

    memset(&cfg, 0, sizeof(cfg));
    if (cfg_defaults(&cd_config_table, &cfg) != ST_OK ||
        cfg_parse_args(&cd_config_table, &cfg, 17, (char **)argv, &npos, &help, err, sizeof(err)) !=
            ST_OK) {
        fprintf(stderr, "bench_tier: config: %s\n", err);
        exit(1);
    }
    lg_set_level(LG_WARN);
    st = cd_daemon_start(d, &cfg);
    if (st != ST_OK) {
        die("daemon start", st);
    }
}

static void stop(cd_daemon_t *d)
{
    cd_daemon_stop(d, 0);
    cd_daemon_destroy(d);
}

/* Prints the median, min, max and MAD of s[0..n) (left in its order). */
static void print_stats(const char *name, const double *s, size_t n, const char *unit)
{
    bench_stats_t st;
    double *copy = malloc(n * sizeof(double));

    if (copy == NULL || n == 0) {
        free(copy);
        return;
    }
    memcpy(copy, s, n * sizeof(double));
    bench_stats(copy, n, &st);
    free(copy);
    printf("  %-40s median %8.3f %s  min %8.3f  max %8.3f  MAD %6.3f\n", name, st.median, unit,
           st.min, st.max, st.mad);
}

static void bench_restart(const char *top, uint64_t blocks, int opens)
{
    char dir[1100];
    uint8_t payload[128];
    ssd_params_t p = {0};
    ssd_t *ssd = NULL;
    double *tot[2], *rec[2];
    uint64_t t0;
    st_status_t st;

    snprintf(dir, sizeof(dir), "%s/restart", top);
    p.dir = dir;
    p.map_size = 16ull << 30;
    p.sync = SSD_SYNC_NONE;
    if ((st = ssd_open(&p, &ssd)) != ST_OK) {
        die("open", st);
    }
    t0 = bench_now_ns();
    for (uint64_t i = 0; i < blocks; i++) {
        ssd_key_t k;

        memset(&k, 0, sizeof(k));
        k.ns = 42;
        k.id = mh_hash(1, i);
        k.kind = SSD_KV;
        memset(payload, (int)(i & 0xff), sizeof(payload));
        if ((st = ssd_spill(ssd, &k, payload, sizeof(payload), 0, NULL, NULL)) != ST_OK) {
            die("spill", st);
        }
        if (i % 16 == 0) {
            k.kind = SSD_KDA;
            if ((st = ssd_put(ssd, &k, payload, sizeof(payload), 0, NULL, NULL)) != ST_OK) {
                die("put", st);
            }
        }
    }
    if ((st = ssd_flush(ssd, 1)) != ST_OK) {
        die("flush", st);
    }
    ssd_close(ssd);
    printf("restart: %llu blocks (%llu objects) on SSD, written in %.1f s\n",
           (unsigned long long)blocks, (unsigned long long)(blocks + (blocks + 15) / 16),
           (double)(bench_now_ns() - t0) / 1e9);
    for (int c = 0; c < 2; c++) {
        tot[c] = calloc((size_t)opens, sizeof(double));
        rec[c] = calloc((size_t)opens, sizeof(double));
        for (int r = 0; r < opens; r++) {
            cd_daemon_t d;
            cd_tier_counters_t tc;

            if (c == 1) {
                drop_cache(dir);
            }
            t0 = bench_now_ns();
            start(&d, dir, "1G");
            tot[c][r] = (double)(bench_now_ns() - t0) / 1e9;
            cd_tier_stats(d.tier, NULL, &tc);
            rec[c][r] = (double)tc.recovered_ms / 1e3;
            if (tc.t2_blocks != blocks) {
                fprintf(stderr, "bench_tier: %llu blocks indexed, expected %llu\n",
                        (unsigned long long)tc.t2_blocks, (unsigned long long)blocks);
                exit(1);
            }
            stop(&d);
        }
    }
    printf("daemon start with %llu blocks on SSD, %d starts each:\n", (unsigned long long)blocks,
           opens);
    print_stats("start to serving, warm", tot[0], (size_t)opens, "s");
    print_stats("  of which recovery (index rebuild)", rec[0], (size_t)opens, "s");
    print_stats("start to serving, cold", tot[1], (size_t)opens, "s");
    print_stats("  of which recovery (index rebuild)", rec[1], (size_t)opens, "s");
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

/* One round's tier half: rates in GB/s, and what the evictions did. */
typedef struct tier_res {
    double put, spilled, warm, cold, steady;
    uint64_t got, got_cold, got_again, dropped, spilled_mb;
} tier_res_t;

/* One round's plain-file half, GB/s. */
typedef struct plain_res {
    double write, read_warm, read_cold;
} plain_res_t;

static void tier_half(const char *top, int r, uint64_t n, uint8_t *src, const char *mem,
                      tier_res_t *o)
{
    uint64_t bytes = n * VALUE_BYTES;
    cd_daemon_t d;
    cd_ns_entry_t *e;
    cd_err_t err = {""};
    st_hash_t *h = malloc(sizeof(st_hash_t) * n);
    uint64_t t0, t_spill0 = 0;
    cd_tier_counters_t put_tc, tc;
    ssd_stats_t ss;
    char dir[1100];

    if (h == NULL) {
        die("malloc", ST_ERR_NOMEM);
    }
    memset(o, 0, sizeof(*o));
    snprintf(dir, sizeof(dir), "%s/spill%d", top, r);
    start(&d, dir, mem);
    if (cd_daemon_ns_open(&d, "bench", "m", 64, &e, &err) != ST_OK) {
        die("namespace", ST_ERR_INTERNAL);
    }
    t0 = bench_now_ns();
    for (uint64_t i = 0; i < n; i++) {
        cd_key_t k;

        h[i] = mh_hash(7 + (uint64_t)r, i);
        k.hash = h[i];
        k.kind = CD_KIND_KV;
        k.layer = 0;
        memcpy(src, &i, sizeof(i));
        if (t_spill0 == 0 && i % 16 == 0) {
            /* When the first eviction reached the tier: spilling began. */
            cd_tier_stats(d.tier, NULL, &tc);
            if (tc.spill_queued + tc.spill_dropped + tc.writeback_objects > 0) {
                t_spill0 = bench_now_ns();
            }
        }
        /* chains of 64 blocks from the seed */
        if (cd_store_put(d.store, e->local_id, &k, i % 64 == 0 ? &e->seed : &h[i - 1], src,
                         VALUE_BYTES, &err) != ST_OK) {
            fprintf(stderr, "bench_tier: put: %s\n", err.msg);
            exit(1);
        }
    }
    cd_tier_flush(d.tier);
    {
        uint64_t t1 = bench_now_ns();

        cd_tier_stats(d.tier, &ss, &put_tc);
        o->dropped = put_tc.spill_dropped;
        o->put = (double)bytes / (double)(t1 - t0);
        /* What reached the SSD (committed: evictions' spills and the
         * write-behind's), over the time from the first eviction to the end
         * of the flush: the tier's spill throughput. */
        o->spilled = (double)ss.spill_bytes / (double)(t1 - (t_spill0 != 0 ? t_spill0 : t0));
        o->spilled_mb = ss.spill_bytes >> 20;
    }
    /* Promote back the first quarter (what is on SSD), as lookups would. */
    t0 = bench_now_ns();
    for (uint64_t i = 0; i < n / 4; i++) {
        o->got += (uint64_t)cd_tier_promote(d.tier, e->local_id, &h[i]);
    }
    o->warm = (double)(o->got * VALUE_BYTES) / (double)(bench_now_ns() - t0);
    /* What the warm promote's evictions did: copied and queued (or dropped),
     * or nothing (the tier had the copy). */
    cd_tier_stats(d.tier, NULL, &tc);
    printf("  round %d: put phase: %llu evictions spilled, %llu dropped, %llu objects written "
           "ahead; warm promote: %llu evictions spilled, %llu dropped, %llu clean\n",
           r, (unsigned long long)put_tc.spill_queued, (unsigned long long)put_tc.spill_dropped,
           (unsigned long long)put_tc.writeback_objects,
           (unsigned long long)(tc.spill_queued - put_tc.spill_queued),
           (unsigned long long)(tc.spill_dropped - put_tc.spill_dropped),
           (unsigned long long)(tc.spill_clean - put_tc.spill_clean));
    /* Cold: the second quarter, with data.mdb out of the page cache (the
     * spills of the first quarter's victims committed first). */
    cd_tier_flush(d.tier);
    drop_cache(dir);
    t0 = bench_now_ns();
    for (uint64_t i = n / 4; i < n / 2; i++) {
        o->got_cold += (uint64_t)cd_tier_promote(d.tier, e->local_id, &h[i]);
    }
    o->cold = (double)(o->got_cold * VALUE_BYTES) / (double)(bench_now_ns() - t0);
    /* Steady state, warm: the first quarter again (its tier copies were
     * kept), data.mdb read back into the page cache; the victims are the
     * second quarter, promoted before and so already on SSD. */
    cd_tier_flush(d.tier);
    warm_cache(dir);
    t0 = bench_now_ns();
    for (uint64_t i = 0; i < n / 4; i++) {
        o->got_again += (uint64_t)cd_tier_promote(d.tier, e->local_id, &h[i]);
    }
    o->steady = (double)(o->got_again * VALUE_BYTES) / (double)(bench_now_ns() - t0);
    stop(&d);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    free(h);
}

/* Reads count values from offset off of fd, each into its own place of
 * into; GB/s. */
static double plain_read(int fd, off_t off, uint8_t *into, uint64_t count)
{
    uint64_t t0;

    lseek(fd, off, SEEK_SET);
    t0 = bench_now_ns();
    for (uint64_t i = 0; i < count; i++) {
        if (read(fd, into + i * VALUE_BYTES, VALUE_BYTES) != VALUE_BYTES) {
            die("read", ST_ERR_IO);
        }
    }
    return (double)(count * VALUE_BYTES) / (double)(bench_now_ns() - t0);
}

static void plain_half(const char *top, int r, uint64_t n, const uint8_t *src, uint8_t *into,
                       plain_res_t *o)
{
    char file[1100];
    uint64_t t0;
    int fd;

    snprintf(file, sizeof(file), "%s/plain%d", top, r);
    fd = open(file, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (fd < 0) {
        die("open", ST_ERR_IO);
    }
    t0 = bench_now_ns();
    for (uint64_t i = 0; i < n; i++) {
        if (write(fd, src, VALUE_BYTES) != VALUE_BYTES) {
            die("write", ST_ERR_IO);
        }
    }
    fsync(fd);
    o->write = (double)(n * VALUE_BYTES) / (double)(bench_now_ns() - t0);
    o->read_warm = plain_read(fd, 0, into, n / 4);
    /* Cold: the second quarter of the file (as the cold promote reads the
     * second quarter of the objects), out of the page cache. */
    drop_file_cache(file);
    o->read_cold = plain_read(fd, (off_t)(n / 4 * VALUE_BYTES), into, n / 4);
    close(fd);
    unlink(file);
}

enum { M_PUT, M_SPILLED, M_WRITE, M_WARM, M_READ_WARM, M_COLD, M_READ_COLD, M_STEADY, M_N };

static void bench_spill(const char *top, uint64_t total_mb, int rounds)
{
    static const char *names[M_N] = {"put with eviction + spill (until flushed)",
                                     "spilled: on SSD / (1st eviction..flushed)",
                                     "plain file write + fsync",
                                     "promote, warm (read, verify, put into DRAM)",
                                     "plain file read, warm",
                                     "promote, cold (data.mdb dropped)",
                                     "plain file read, cold (dropped)",
                                     "promote, steady state (victims on SSD)"};
    /* tier / plain pairs for the ratios */
    static const int ratio_of[5][2] = {{M_SPILLED, M_WRITE},
                                       {M_PUT, M_WRITE},
                                       {M_WARM, M_READ_WARM},
                                       {M_COLD, M_READ_COLD},
                                       {M_STEADY, M_READ_WARM}};
    static const char *ratio_names[5] = {"spilled / write", "put with eviction + spill / write",
                                         "promote / read, warm", "promote / read, cold",
                                         "promote steady state / read, warm"};
    uint64_t n = (total_mb << 20) / VALUE_BYTES;
    uint8_t *src = malloc(VALUE_BYTES);
    /* The plain reads land in distinct memory, as promoted objects do (each
     * in its own extent), not in one buffer that stays in the CPU's cache. */
    uint8_t *into = malloc((n / 4 + 1) * VALUE_BYTES);
    double *v[M_N], *ratio = calloc((size_t)rounds, sizeof(double)),
                    *bal = calloc((size_t)rounds, sizeof(double));
    uint64_t dropped = 0, promoted = 0, spilled_mb = 0;
    char mem[32];

    snprintf(mem, sizeof(mem), "%lluM",
             (unsigned long long)(total_mb / 4 < 128 ? 128 : total_mb / 4));
    if (src == NULL || into == NULL || ratio == NULL || bal == NULL) {
        die("malloc", ST_ERR_NOMEM);
    }
    for (int m = 0; m < M_N; m++) {
        if ((v[m] = calloc((size_t)rounds, sizeof(double))) == NULL) {
            die("malloc", ST_ERR_NOMEM);
        }
    }
    memset(into, 0, (n / 4 + 1) * VALUE_BYTES);
    for (size_t i = 0; i < VALUE_BYTES; i++) {
        src[i] = (uint8_t)(i * 131 + 7);
    }
    for (int r = 0; r < rounds; r++) {
        tier_res_t t;
        plain_res_t p;

        /* The order alternates: on this virtual disk whichever of two
         * large writes comes second runs at about half the speed of the
         * first (the host is still writing the first back). */
        if (r % 2 == 0) {
            tier_half(top, r, n, src, mem, &t);
            plain_half(top, r, n, src, into, &p);
        } else {
            plain_half(top, r, n, src, into, &p);
            tier_half(top, r, n, src, mem, &t);
        }
        v[M_PUT][r] = t.put, v[M_SPILLED][r] = t.spilled, v[M_WARM][r] = t.warm;
        v[M_COLD][r] = t.cold, v[M_STEADY][r] = t.steady;
        v[M_WRITE][r] = p.write, v[M_READ_WARM][r] = p.read_warm, v[M_READ_COLD][r] = p.read_cold;
        dropped += t.dropped;
        promoted = t.got;
        spilled_mb = t.spilled_mb;
        printf("  round %d (%s first): put+spill %.3f, spilled %.3f / write %.3f GB/s; promote "
               "warm %.3f / read warm %.3f; promote cold %.3f / read cold %.3f; steady state "
               "%.3f (%llu + %llu + %llu promoted)\n",
               r, r % 2 == 0 ? "tier" : "plain", t.put, t.spilled, p.write, t.warm, p.read_warm,
               t.cold, p.read_cold, t.steady, (unsigned long long)t.got,
               (unsigned long long)t.got_cold, (unsigned long long)t.got_again);
    }
    printf("spill and promote through the daemon: %llu MB of 42 KB KV objects, memory_limit %s, "
           "ssd_writeback %s, %llu promoted per round, %llu evictions not spilled in all (the "
           "writer behind), %llu MB on SSD after the last put phase, %d rounds (GB/s):\n",
           (unsigned long long)(n * VALUE_BYTES >> 20), mem, g_writeback,
           (unsigned long long)promoted, (unsigned long long)dropped,
           (unsigned long long)spilled_mb, rounds);
    for (int m = 0; m < M_N; m++) {
        print_stats(names[m], v[m], (size_t)rounds, "GB/s");
    }
    printf("  ratios tier / plain, per round (the order alternates; see the balanced ones):\n");
    for (int q = 0; q < 5; q++) {
        for (int r = 0; r < rounds; r++) {
            ratio[r] = v[ratio_of[q][0]][r] / v[ratio_of[q][1]][r];
        }
        print_stats(ratio_names[q], ratio, (size_t)rounds, "");
    }
    if (rounds >= 2) {
        printf("  ratios tier / plain, order-balanced, one per pair of rounds:\n");
        for (int q = 0; q < 5; q++) {
            size_t k = bench_balanced(v[ratio_of[q][0]], v[ratio_of[q][1]], (size_t)rounds, bal);

            print_stats(ratio_names[q], bal, k, "");
        }
    }
    for (int m = 0; m < M_N; m++) {
        free(v[m]);
    }
    free(ratio), free(bal), free(src), free(into);
}

int main(int argc, char **argv)
{
    const char *base = "/tmp";
    uint64_t blocks = 1000000, total_mb = 1024;
    int opens = 3, rounds = 4;
    char top[1024];
    const bench_opt_t opts[] = {
        {"--dir", BENCH_OPT_STR, &base},      {"--blocks", BENCH_OPT_U64, &blocks},
        {"--opens", BENCH_OPT_INT, &opens},   {"--total-mb", BENCH_OPT_U64, &total_mb},
        {"--rounds", BENCH_OPT_INT, &rounds}, {"--writeback", BENCH_OPT_STR, &g_writeback}};

    if (bench_opts(argc, argv, 1, opts, sizeof(opts) / sizeof(opts[0])) != 0) {
        fprintf(stderr, "usage: bench_tier [--dir DIR] [--blocks N] [--opens N] "
                        "[--total-mb N] [--rounds N] [--writeback SIZE]\n");
        return 2;
    }
    snprintf(top, sizeof(top), "%s/bench_tier-XXXXXX", base);
    if (mkdtemp(top) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    if (blocks > 0) {
        bench_restart(top, blocks, opens);
    }
    if (total_mb > 0) {
        bench_spill(top, total_mb, rounds);
    }
    nftw(top, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    return 0;
}
