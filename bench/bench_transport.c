/*
 * bench_transport.c - the transport limit: streaming one-sided gets of
 * 64 KB, 256 KB and 1 MB from a registered remote region (a working set
 * several times the CPU caches) into a local registered buffer, many in
 * flight, against a target process on this host; next to memcpy of the same
 * sizes and shape in the same run, as the hardware reference.
 *
 *   bench_transport [--backend ucx|libfabric] [--tls T] [--provider P]
 *                   [--domain D] [--region-mb 512] [--round-mb 1024]
 *                   [--inflight 16] [--rounds 11] [--sizes-kb 64,256,1024]
 *                   [--target-busy] [--row-bytes 656] [--row-inflight 256]
 *                   [--row-mb 64]
 *
 * Then random row-granular gets (656-byte rows, 256 in flight) against
 * memcpy of the same rows, in rows per second.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench_transport_loop.h"
#include "bench_util.h"

#define MAX_SIZES 16

typedef struct opts {
    tp_config_t cfg;
    size_t region_bytes;
    size_t round_bytes;
    unsigned inflight;
    unsigned rounds;
    bool target_busy;
    size_t row_bytes;
    unsigned row_inflight;
    size_t row_mb;
    size_t sizes[MAX_SIZES];
    unsigned n_sizes;
} opts_t;

static void usage(const char *prog)
{
    fprintf(stderr,
            "usage: %s [--backend ucx|libfabric] [--tls T] [--provider P] [--domain D]\n"
            "          [--region-mb N] [--round-mb N] [--inflight N] [--rounds N]\n"
            "          [--sizes-kb a,b,c] [--target-busy]\n"
            "          [--row-bytes 656 (0: none)] [--row-inflight 256] [--row-mb 64]\n",
            prog);
}

static int parse_opts(int argc, char **argv, opts_t *o)
{
    static const struct option longopts[] = {{"backend", required_argument, NULL, 'b'},
                                             {"tls", required_argument, NULL, 't'},
                                             {"provider", required_argument, NULL, 'p'},
                                             {"domain", required_argument, NULL, 'd'},
                                             {"region-mb", required_argument, NULL, 'r'},
                                             {"round-mb", required_argument, NULL, 'R'},
                                             {"inflight", required_argument, NULL, 'i'},
                                             {"rounds", required_argument, NULL, 'n'},
                                             {"sizes-kb", required_argument, NULL, 's'},
                                             {"help", no_argument, NULL, 'h'},
                                             {"target-busy", no_argument, NULL, 'B'},
                                             {"row-bytes", required_argument, NULL, 'w'},
                                             {"row-inflight", required_argument, NULL, 'W'},
                                             {"row-mb", required_argument, NULL, 'M'},
                                             {NULL, 0, NULL, 0}};
    memset(o, 0, sizeof(*o));
    o->cfg.backend = TP_UCX;
    o->region_bytes = (size_t)512 << 20;
    o->round_bytes = (size_t)1024 << 20;
    o->inflight = 16;
    o->rounds = 11;
    o->sizes[0] = 64 << 10;
    o->sizes[1] = 256 << 10;
    o->sizes[2] = 1024 << 10;
    o->n_sizes = 3;
    o->row_bytes = 656;
    o->row_inflight = 256;
    o->row_mb = 64;
    int c;
    while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (c) {
        case 'b':
            if (tp_parse_backend(optarg, &o->cfg.backend) != ST_OK) {
                return -1;
            }
            break;
        case 't': o->cfg.ucx_tls = optarg; break;
        case 'p': o->cfg.fabric_provider = optarg; break;
        case 'd': o->cfg.fabric_domain = optarg; break;
        case 'r': o->region_bytes = strtoull(optarg, NULL, 10) << 20; break;
        case 'R': o->round_bytes = strtoull(optarg, NULL, 10) << 20; break;
        case 'i': o->inflight = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'n': o->rounds = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'w': o->row_bytes = strtoull(optarg, NULL, 10); break;
        case 'W': o->row_inflight = (unsigned)strtoul(optarg, NULL, 10); break;
        case 'M': o->row_mb = strtoull(optarg, NULL, 10); break;
        case 'B': o->target_busy = true; break;
        case 's': {
            o->n_sizes = 0;
            char *save = NULL;
            for (char *tok = strtok_r(optarg, ",", &save); tok && o->n_sizes < MAX_SIZES;
                 tok = strtok_r(NULL, ",", &save)) {
                o->sizes[o->n_sizes++] = strtoull(tok, NULL, 10) << 10;
            }
            break;
        }
        default: usage(argv[0]); return -1;
        }
    }
    if (o->region_bytes == 0 || o->round_bytes == 0 || o->inflight == 0 || o->rounds == 0 ||
        o->n_sizes == 0 ||
        (o->row_bytes > 0 &&
         (o->row_inflight == 0 || o->row_mb == 0 || o->row_bytes > o->region_bytes))) {
        usage(argv[0]);
        return -1;
    }
    for (unsigned i = 0; i < o->n_sizes; i++) {
        if (o->sizes[i] == 0 || o->sizes[i] > o->region_bytes) {
            fprintf(stderr, "bad size %zu: must be 1 KB .. region\n", o->sizes[i]);
            return -1;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    opts_t o;
    if (parse_opts(argc, argv, &o) != 0) {
        return 2;
    }
    bench_tp_peer_t peer;
    st_status_t st = bench_tp_spawn_target(&o.cfg, o.region_bytes, o.target_busy, &peer);
    if (st != ST_OK) {
        fprintf(stderr, "target did not start: %s\n", st_strerror(st));
        return 1;
    }

    size_t max_size = 0;
    for (unsigned i = 0; i < o.n_sizes; i++) {
        max_size = o.sizes[i] > max_size ? o.sizes[i] : max_size;
    }
    size_t local_len = (size_t)o.inflight * max_size;
    if ((size_t)o.row_inflight * o.row_bytes > local_len) {
        local_len = (size_t)o.row_inflight * o.row_bytes;
    }
    uint8_t *local = mmap(NULL, local_len, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    /* The memcpy source: the same working set, in this process. */
    uint8_t *src = mmap(NULL, o.region_bytes, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (local == MAP_FAILED || src == MAP_FAILED) {
        fprintf(stderr, "out of memory\n");
        bench_tp_stop_target(&peer);
        return 1;
    }
    memset(src, 1, o.region_bytes);

    bench_tp_loop_t loop = {
        .local = local, .local_len = local_len, .remote_base = peer.base, .remote_len = peer.len};
    if ((st = tp_create(&o.cfg, &loop.tp)) != ST_OK ||
        (st = tp_mem_register(loop.tp, local, local_len, &loop.local_mem)) != ST_OK ||
        (st = tp_connect(loop.tp, peer.addr, peer.addr_len, &loop.ep)) != ST_OK ||
        (st = tp_rkey_unpack(loop.ep, peer.rkey, peer.rkey_len, &loop.rkey)) != ST_OK) {
        fprintf(stderr, "transport setup failed: %s\n", st_strerror(st));
        bench_tp_stop_target(&peer);
        return 1;
    }

    const char *path = o.cfg.backend == TP_UCX
                           ? (o.cfg.ucx_tls ? o.cfg.ucx_tls : "default TLS")
                           : (o.cfg.fabric_provider ? o.cfg.fabric_provider : "first provider");
    printf("transport limit: %s (%s), region %zu MB, %zu MB per round, %u in flight, "
           "%u rounds, target %s\n",
           tp_backend_name(o.cfg.backend), path, o.region_bytes >> 20, o.round_bytes >> 20,
           o.inflight, o.rounds, o.target_busy ? "busy-polls" : "sleeps on its event fd");
    printf("%-8s | %-28s | %-28s | %s\n", "size", "memcpy GB/s median (MAD)",
           "get GB/s median (MAD) [min-max]", "get/memcpy");

    double *mc = calloc(o.rounds, sizeof(double));
    double *tg = calloc(o.rounds, sizeof(double));
    if (mc == NULL || tg == NULL) {
        return 1;
    }
    int rc = 0;
    for (unsigned si = 0; si < o.n_sizes && rc == 0; si++) {
        size_t size = o.sizes[si];
        double seconds;
        /* One warm-up of each, not counted. */
        (void)bench_memcpy_stream(local, src, o.region_bytes, size, o.inflight, o.round_bytes / 4);
        st = bench_tp_stream_gets(&loop, size, o.inflight, o.round_bytes / 4, &seconds);
        for (unsigned r = 0; r < o.rounds && st == ST_OK; r++) {
            double ms =
                bench_memcpy_stream(local, src, o.region_bytes, size, o.inflight, o.round_bytes);
            mc[r] = (double)o.round_bytes / ms * 1e-9;
            st = bench_tp_stream_gets(&loop, size, o.inflight, o.round_bytes, &seconds);
            tg[r] = (double)o.round_bytes / seconds * 1e-9;
        }
        if (st != ST_OK) {
            fprintf(stderr, "gets failed at size %zu: %s\n", size, st_strerror(st));
            rc = 1;
            break;
        }
        bench_stats_t m, t;
        bench_stats(mc, o.rounds, &m);
        bench_stats(tg, o.rounds, &t);
        char a[64], b[64];
        snprintf(a, sizeof(a), "%.2f (%.2f)", m.median, m.mad);
        snprintf(b, sizeof(b), "%.2f (%.2f) [%.2f-%.2f]", t.median, t.mad, t.min, t.max);
        printf("%5zu KB | %-28s | %-28s | %.2f\n", size >> 10, a, b, t.median / m.median);
        fflush(stdout);
    }

    /* Row-granular reads: random whole rows, many in flight, as a sparse
     * attention query reads its selected rows. */
    if (rc == 0 && o.row_bytes > 0) {
        size_t row_total = o.row_mb << 20;
        double seconds;
        printf("random rows of %zu B, %u in flight, %zu MB per round:\n", o.row_bytes,
               o.row_inflight, o.row_mb);
        printf("%-8s | %-28s | %-28s | %s\n", "", "memcpy Mrows/s median (MAD)",
               "get Mrows/s median (MAD) [min-max]", "get/memcpy");
        (void)bench_memcpy_random(local, src, o.region_bytes, o.row_bytes, o.row_inflight,
                                  row_total / 4, 7);
        st = bench_tp_random_gets(&loop, o.row_bytes, o.row_inflight, row_total / 4, 7, &seconds);
        double rows = (double)(row_total / o.row_bytes);
        for (unsigned r = 0; r < o.rounds && st == ST_OK; r++) {
            double ms = bench_memcpy_random(local, src, o.region_bytes, o.row_bytes, o.row_inflight,
                                            row_total, 11 + r);
            mc[r] = rows / ms * 1e-6;
            st = bench_tp_random_gets(&loop, o.row_bytes, o.row_inflight, row_total, 11 + r,
                                      &seconds);
            tg[r] = rows / seconds * 1e-6;
        }
        if (st != ST_OK) {
            fprintf(stderr, "row gets failed: %s\n", st_strerror(st));
            rc = 1;
        } else {
            bench_stats_t m, t;
            bench_stats(mc, o.rounds, &m);
            bench_stats(tg, o.rounds, &t);
            char a[64], b[64];
            snprintf(a, sizeof(a), "%.2f (%.2f)", m.median, m.mad);
            snprintf(b, sizeof(b), "%.2f (%.2f) [%.2f-%.2f]", t.median, t.mad, t.min, t.max);
            printf("%6zu B | %-28s | %-28s | %.2f\n", o.row_bytes, a, b, t.median / m.median);
        }
    }
    free(mc);
    free(tg);
    tp_destroy(loop.tp);
    bench_tp_stop_target(&peer);
    munmap(local, local_len);
    munmap(src, o.region_bytes);
    return rc;
}
