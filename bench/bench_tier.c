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
 *    default 256M; 0: off). Each round prints its numbers, its ratios
 *    (tier / plain) and what the evictions did; then the median, min and
 *    max over --rounds rounds.
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
#include "st_log.h"
#include "st_ssd.h"
#include "tier.h"

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

static st_hash_t bhash(uint64_t stream, uint64_t i)
{
    st_hash_t h;
    XXH128_hash_t x = XXH3_128bits_withSeed(&i, sizeof(i), stream);

    memcpy(h.b, &x.low64, 8);
    memcpy(h.b + 8, &x.high64, 8);
    return h;
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
    if (st_config_defaults(&cd_config_table, &cfg) != ST_OK ||
        st_config_parse_args(&cd_config_table, &cfg, 17, (char **)argv, &npos, &help, err,
                             sizeof(err)) != ST_OK) {
        fprintf(stderr, "bench_tier: config: %s\n", err);
        exit(1);
    }
    st_log_set_level(ST_LOG_WARN);
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

static void print_stats(const char *name, double *s, size_t n, const char *unit)
{
    bench_stats_t st;

    bench_stats(s, n, &st);
    printf("  %-40s median %8.3f %s  min %8.3f  max %8.3f  MAD %6.3f\n", name, st.median, unit,
           st.min, st.max, st.mad);
}

static void bench_restart(const char *top, uint64_t blocks, int opens)
{
    char dir[1100];
    uint8_t payload[128];
    st_ssd_params_t p = {0};
    st_ssd_t *ssd = NULL;
    double *tot[2], *rec[2];
    uint64_t t0;
    st_status_t st;

    snprintf(dir, sizeof(dir), "%s/restart", top);
    p.dir = dir;
    p.map_size = 16ull << 30;
    p.sync = ST_SSD_SYNC_NONE;
    if ((st = st_ssd_open(&p, &ssd)) != ST_OK) {
        die("open", st);
    }
    t0 = bench_now_ns();
    for (uint64_t i = 0; i < blocks; i++) {
        st_ssd_key_t k;

        memset(&k, 0, sizeof(k));
        k.ns = 42;
        k.id = bhash(1, i);
        k.kind = ST_SSD_KV;
        memset(payload, (int)(i & 0xff), sizeof(payload));
        if ((st = st_ssd_spill(ssd, &k, payload, sizeof(payload), 0, NULL, NULL)) != ST_OK) {
            die("spill", st);
        }
        if (i % 16 == 0) {
            k.kind = ST_SSD_KDA;
            if ((st = st_ssd_put(ssd, &k, payload, sizeof(payload), 0, NULL, NULL)) != ST_OK) {
                die("put", st);
            }
        }
    }
    if ((st = st_ssd_flush(ssd, 1)) != ST_OK) {
        die("flush", st);
    }
    st_ssd_close(ssd);
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

static void bench_spill(const char *top, uint64_t total_mb, int rounds)
{
    uint64_t n = (total_mb << 20) / VALUE_BYTES, bytes = n * VALUE_BYTES;
    uint8_t *src = malloc(VALUE_BYTES);
    /* The plain reads land in distinct memory, as promoted objects do (each
     * in its own extent), not in one buffer that stays in the CPU's cache. */
    uint8_t *into = malloc(((total_mb << 20) / VALUE_BYTES / 4 + 1) * VALUE_BYTES);
    double *sp = calloc((size_t)rounds, sizeof(double)),
           *pr = calloc((size_t)rounds, sizeof(double));
    double *sq = calloc((size_t)rounds, sizeof(double));
    double *fw = calloc((size_t)rounds, sizeof(double)),
           *fr = calloc((size_t)rounds, sizeof(double));
    double *pc = calloc((size_t)rounds, sizeof(double)),
           *fc = calloc((size_t)rounds, sizeof(double));
    double *pa = calloc((size_t)rounds, sizeof(double)),
           *ra = calloc((size_t)rounds, sizeof(double));
    double *rs = calloc((size_t)rounds, sizeof(double)),
           *rw = calloc((size_t)rounds, sizeof(double)),
           *rc = calloc((size_t)rounds, sizeof(double));
    char dir[1100], file[1100], mem[32];
    uint64_t promoted_n = 0, promoted_cold = 0, dropped = 0, spilled_mb = 0;
    double *rq = calloc((size_t)rounds, sizeof(double));

    snprintf(mem, sizeof(mem), "%lluM",
             (unsigned long long)(total_mb / 4 < 128 ? 128 : total_mb / 4));
    if (src == NULL || into == NULL) {
        die("malloc", ST_ERR_NOMEM);
    }
    memset(into, 0, ((total_mb << 20) / VALUE_BYTES / 4 + 1) * VALUE_BYTES);
    for (size_t i = 0; i < VALUE_BYTES; i++) {
        src[i] = (uint8_t)(i * 131 + 7);
    }
    for (int r = 0; r < rounds; r++) {
        cd_daemon_t d;
        cd_ns_entry_t *e;
        cd_err_t err = {""};
        st_hash_t *h = malloc(sizeof(st_hash_t) * n);
        uint64_t t0, t_spill0 = 0, on_ssd = 0, got = 0, got_cold = 0, got_again = 0;
        cd_tier_counters_t put_tc;
        int fd;

        snprintf(dir, sizeof(dir), "%s/spill%d", top, r);
        start(&d, dir, mem);
        if (cd_daemon_ns_open(&d, "bench", "m", 64, &e, &err) != ST_OK) {
            die("namespace", ST_ERR_INTERNAL);
        }
        t0 = bench_now_ns();
        for (uint64_t i = 0; i < n; i++) {
            cd_key_t k;

            h[i] = bhash(7 + (uint64_t)r, i);
            k.hash = h[i];
            k.kind = CD_KIND_KV;
            k.layer = 0;
            memcpy(src, &i, sizeof(i));
            if (t_spill0 == 0 && i % 16 == 0) {
                cd_tier_counters_t tc;

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
            cd_tier_counters_t tc;
            st_ssd_stats_t ss;
            uint64_t t1 = bench_now_ns();
            double ns = (double)(t1 - t0);

            cd_tier_stats(d.tier, &ss, &tc);
            put_tc = tc;
            on_ssd = tc.t2_objects;
            dropped += tc.spill_dropped;
            sp[r] = (double)bytes / ns;
            /* What reached the SSD (committed: evictions' spills and the
             * write-behind's), over the time from the first eviction to
             * the end of the flush: the tier's spill throughput. */
            sq[r] = (double)ss.spill_bytes / (double)(t1 - (t_spill0 != 0 ? t_spill0 : t0));
            spilled_mb = ss.spill_bytes >> 20;
        }
        /* Promote back the first quarter (what is on SSD), as lookups would. */
        t0 = bench_now_ns();
        for (uint64_t i = 0; i < n / 4; i++) {
            got += (uint64_t)cd_tier_promote(d.tier, e, &h[i]);
        }
        pr[r] = (double)(got * VALUE_BYTES) / (double)(bench_now_ns() - t0);
        promoted_n = got;
        {
            cd_tier_counters_t tc;

            /* What the warm promote's evictions did: copied and queued (or
             * dropped), or nothing (the tier had the copy). */
            cd_tier_stats(d.tier, NULL, &tc);
            printf("  round %d: put phase: %llu evictions spilled, %llu dropped, %llu objects "
                   "written ahead; warm promote: %llu evictions spilled, %llu dropped, %llu "
                   "clean\n",
                   r, (unsigned long long)put_tc.spill_queued,
                   (unsigned long long)put_tc.spill_dropped,
                   (unsigned long long)put_tc.writeback_objects,
                   (unsigned long long)(tc.spill_queued - put_tc.spill_queued),
                   (unsigned long long)(tc.spill_dropped - put_tc.spill_dropped),
                   (unsigned long long)(tc.spill_clean - put_tc.spill_clean));
        }
        /* Cold: the second quarter, with data.mdb out of the page cache (the
         * spills of the first quarter's victims committed first). */
        cd_tier_flush(d.tier);
        drop_cache(dir);
        t0 = bench_now_ns();
        for (uint64_t i = n / 4; i < n / 2; i++) {
            got_cold += (uint64_t)cd_tier_promote(d.tier, e, &h[i]);
        }
        pc[r] = (double)(got_cold * VALUE_BYTES) / (double)(bench_now_ns() - t0);
        promoted_cold = got_cold;
        /* Steady state, warm: the first quarter again (its tier copies were
         * kept), data.mdb read back into the page cache; the victims are the
         * second quarter, promoted before and so already on SSD. */
        cd_tier_flush(d.tier);
        warm_cache(dir);
        t0 = bench_now_ns();
        for (uint64_t i = 0; i < n / 4; i++) {
            got_again += (uint64_t)cd_tier_promote(d.tier, e, &h[i]);
        }
        pa[r] = (double)(got_again * VALUE_BYTES) / (double)(bench_now_ns() - t0);
        stop(&d);
        nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
        (void)on_ssd;

        snprintf(file, sizeof(file), "%s/plain%d", top, r);
        fd = open(file, O_CREAT | O_TRUNC | O_RDWR, 0644);
        t0 = bench_now_ns();
        for (uint64_t i = 0; i < n; i++) {
            if (write(fd, src, VALUE_BYTES) != VALUE_BYTES) {
                die("write", ST_ERR_IO);
            }
        }
        fsync(fd);
        fw[r] = (double)bytes / (double)(bench_now_ns() - t0);
        lseek(fd, 0, SEEK_SET);
        t0 = bench_now_ns();
        for (uint64_t i = 0; i < n / 4; i++) {
            if (read(fd, into + i * VALUE_BYTES, VALUE_BYTES) != VALUE_BYTES) {
                die("read", ST_ERR_IO);
            }
        }
        fr[r] = (double)(n / 4 * VALUE_BYTES) / (double)(bench_now_ns() - t0);
        /* Cold: as many bytes as the cold promote brought back, from the
         * second quarter of the file, out of the page cache. */
        drop_file_cache(file);
        lseek(fd, (off_t)(n / 4 * VALUE_BYTES), SEEK_SET);
        t0 = bench_now_ns();
        for (uint64_t i = 0; i < (got_cold > 0 ? got_cold : 1); i++) {
            if (read(fd, into + i * VALUE_BYTES, VALUE_BYTES) != VALUE_BYTES) {
                die("read", ST_ERR_IO);
            }
        }
        fc[r] =
            (double)((got_cold > 0 ? got_cold : 1) * VALUE_BYTES) / (double)(bench_now_ns() - t0);
        close(fd);
        unlink(file);
        free(h);
        rs[r] = sp[r] / fw[r];
        rq[r] = sq[r] / fw[r];
        rw[r] = pr[r] / fr[r];
        rc[r] = pc[r] / fc[r];
        ra[r] = pa[r] / fr[r];
        printf("  round %d: put+spill %.3f, spilled %.3f / write %.3f GB/s = %.2f; promote warm "
               "%.3f / read warm "
               "%.3f = %.2f; promote cold %.3f / read cold %.3f = %.2f; steady state %.3f = %.2f "
               "(%llu + %llu + %llu promoted)\n",
               r, sp[r], sq[r], fw[r], rq[r], pr[r], fr[r], rw[r], pc[r], fc[r], rc[r], pa[r],
               ra[r], (unsigned long long)got, (unsigned long long)got_cold,
               (unsigned long long)got_again);
    }
    printf("spill and promote through the daemon: %llu MB of 42 KB KV objects, memory_limit %s, "
           "ssd_writeback %s, %llu promoted per round, %llu evictions not spilled in all (the "
           "writer behind), %llu MB on SSD after the last put phase, %d rounds (GB/s):\n",
           (unsigned long long)(bytes >> 20), mem, g_writeback, (unsigned long long)promoted_n,
           (unsigned long long)dropped, (unsigned long long)spilled_mb, rounds);
    print_stats("put with eviction + spill (until flushed)", sp, (size_t)rounds, "GB/s");
    print_stats("spilled: on SSD / (1st eviction..flushed)", sq, (size_t)rounds, "GB/s");
    print_stats("plain file write + fsync", fw, (size_t)rounds, "GB/s");
    print_stats("promote (read, verify, put into DRAM)", pr, (size_t)rounds, "GB/s");
    print_stats("plain file read (warm)", fr, (size_t)rounds, "GB/s");
    printf("  cold: data.mdb and the plain file dropped from the page cache, %llu promoted in the "
           "last round:\n",
           (unsigned long long)promoted_cold);
    print_stats("promote, cold", pc, (size_t)rounds, "GB/s");
    print_stats("plain file read (cold)", fc, (size_t)rounds, "GB/s");
    printf("  steady state, warm: the first quarter again, its victims already on SSD:\n");
    print_stats("promote, steady state", pa, (size_t)rounds, "GB/s");
    printf("  ratios tier / plain, per round:\n");
    print_stats("spilled / write", rq, (size_t)rounds, "");
    print_stats("put with eviction + spill / write", rs, (size_t)rounds, "");
    print_stats("promote / read, warm", rw, (size_t)rounds, "");
    print_stats("promote / read, cold", rc, (size_t)rounds, "");
    print_stats("promote / read, steady state (warm)", ra, (size_t)rounds, "");
    free(sq), free(rq), free(pc), free(fc), free(rs), free(rw), free(rc), free(pa), free(ra);
    free(src), free(into), free(sp), free(pr), free(fw), free(fr);
}

int main(int argc, char **argv)
{
    const char *base = "/tmp";
    uint64_t blocks = 1000000, total_mb = 1024;
    int opens = 3, rounds = 3;
    char top[1024];

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
            base = argv[++i];
        } else if (strcmp(argv[i], "--blocks") == 0 && i + 1 < argc) {
            blocks = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--opens") == 0 && i + 1 < argc) {
            opens = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--total-mb") == 0 && i + 1 < argc) {
            total_mb = strtoull(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
            rounds = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--writeback") == 0 && i + 1 < argc) {
            g_writeback = argv[++i];
        } else {
            fprintf(stderr, "usage: bench_tier [--dir DIR] [--blocks N] [--opens N] "
                            "[--total-mb N] [--rounds N] [--writeback SIZE]\n");
            return 2;
        }
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
