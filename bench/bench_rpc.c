/*
 * bench_rpc.c - the control plane's cost: unary call latency against a bare
 * TCP ping-pong over the same loopback (the floor any RPC pays), throughput
 * with several client threads, large-message bandwidth against a memcpy of
 * the same bytes, a lookup-shaped call (a 256 KiB request, a small answer),
 * and fan-out latency.
 *
 *   bench_rpc [--calls N] [--threads T] [--rounds R] [--server-threads S]
 *             [--only SECTIONS] [--tls DIR]
 *
 * --tls DIR: servers and channels speak TLS with DIR/server.pem,
 * DIR/server.key and DIR/ca.pem (tests/tools/make_test_certs.sh DIR makes
 * them); run once with and once without to see what TLS costs.
 *
 * SECTIONS is a comma-separated subset of unary,tput,large,lookup,fanout
 * (default: all). --rounds is the number of calls per large-message size
 * (default 300 below 1 MiB, a sixth of it above); --server-threads the worker
 * threads of each server (default 4, as stratad's default).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench_util.h"
#include "srpc.h"
#include "log.h"
#include "strata.pb-c.h"

static const srpc_method_t echo_method = {"/strata.bench.Bench/Echo",
                                          &strata__v1__hello_request__descriptor,
                                          &strata__v1__hello_request__descriptor};

/* Takes a large request and answers a small message, like Lookup. */
static const srpc_method_t sink_method = {"/strata.bench.Bench/Sink",
                                          &strata__v1__hello_request__descriptor,
                                          &strata__v1__hello_request__descriptor};

static st_status_t echo_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                ProtobufCMessage *resp, void *arg)
{
    (void)ctx;
    (void)arg;
    *(Strata__V1__HelloRequest *)resp = *(const Strata__V1__HelloRequest *)req;
    return ST_OK;
}

static st_status_t sink_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                ProtobufCMessage *resp, void *arg)
{
    const Strata__V1__HelloRequest *rq = (const Strata__V1__HelloRequest *)req;
    Strata__V1__HelloRequest *rs = (Strata__V1__HelloRequest *)resp;
    uint8_t *sum = srpc_ctx_alloc(ctx, 16);

    (void)arg;
    if (sum == NULL) {
        return ST_ERR_NOMEM;
    }
    memcpy(sum, &rq->client_address.len, sizeof(rq->client_address.len));
    if (rq->client_address.len != 0) {
        sum[8] = rq->client_address.data[rq->client_address.len - 1];
    }
    rs->tenant = rq->tenant;
    rs->client_address.data = sum;
    rs->client_address.len = 16;
    return ST_OK;
}

static const srpc_method_def_t table[] = {{&echo_method, echo_handler, NULL, 0},
                                          {&sink_method, sink_handler, NULL, 0}};

/* ------------------------------------------------------ TCP ping-pong peer -- */

static void *tcp_echo_server(void *arg)
{
    int lfd = *(int *)arg, fd, one = 1;
    char buf[256];
    ssize_t n;

    fd = accept(lfd, NULL, NULL);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        if (write(fd, buf, (size_t)n) != n) {
            break;
        }
    }
    close(fd);
    return NULL;
}

/* Median and p99 round trip of a 64-byte TCP ping-pong, in microseconds. */
static void tcp_pingpong(int n, bench_stats_t *out)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), fd, one = 1;
    pthread_t th;
    char buf[64] = {0};
    double *samples = malloc(sizeof(double) * (size_t)n);

    bind(lfd, (struct sockaddr *)&sa, sizeof(sa));
    listen(lfd, 1);
    getsockname(lfd, (struct sockaddr *)&sa, &len);
    pthread_create(&th, NULL, tcp_echo_server, &lfd);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    connect(fd, (struct sockaddr *)&sa, sizeof(sa));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    for (int i = 0; i < n; i++) {
        uint64_t t0 = bench_now_ns();
        size_t got = 0;

        if (write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf)) {
            break;
        }
        while (got < sizeof(buf)) {
            ssize_t r = read(fd, buf + got, sizeof(buf) - got);
            if (r <= 0) {
                break;
            }
            got += (size_t)r;
        }
        samples[i] = (double)(bench_now_ns() - t0) / 1e3;
    }
    close(fd);
    pthread_join(th, NULL);
    close(lfd);
    bench_stats(samples, (size_t)n, out);
    free(samples);
}

/*
 * Median time of one memcpy of bytes between two warm buffers, in
 * microseconds: the floor of moving a message through memory once.
 */
static void memcpy_floor(size_t bytes, int n, bench_stats_t *out)
{
    uint8_t *a = malloc(bytes), *b = malloc(bytes);
    double *samples = malloc(sizeof(double) * (size_t)n);

    memset(a, 1, bytes);
    memset(b, 2, bytes);
    for (int i = 0; i < n; i++) {
        uint64_t t0 = bench_now_ns();

        memcpy(i & 1 ? a : b, i & 1 ? b : a, bytes);
        __asm__ volatile("" : : "r"(a), "r"(b) : "memory");
        samples[i] = (double)(bench_now_ns() - t0) / 1e3;
    }
    bench_stats(samples, (size_t)n, out);
    free(samples);
    free(a);
    free(b);
}

/* ------------------------------------------------------------ rpc pieces -- */

static void call_latency(srpc_channel_t *ch, const srpc_method_t *method, int n, size_t bytes,
                         bench_stats_t *out)
{
    Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
    uint8_t *payload = calloc(1, bytes ? bytes : 1);
    double *samples = malloc(sizeof(double) * (size_t)n);

    rq.tenant = (char *)"bench";
    rq.client_address.data = payload;
    rq.client_address.len = bytes;
    for (int i = 0; i < n; i++) {
        ProtobufCMessage *resp = NULL;
        uint64_t t0 = bench_now_ns();

        if (srpc_call(ch, method, &rq.base, 10000, &resp, NULL) != ST_OK) {
            fprintf(stderr, "call failed\n");
            exit(1);
        }
        samples[i] = (double)(bench_now_ns() - t0) / 1e3;
        protobuf_c_message_free_unpacked(resp, NULL);
    }
    bench_stats(samples, (size_t)n, out);
    free(samples);
    free(payload);
}

typedef struct tput_arg {
    srpc_channel_t *ch;
    int calls;
} tput_arg_t;

static void *tput_worker(void *p)
{
    tput_arg_t *a = p;
    bench_stats_t st;

    call_latency(a->ch, &echo_method, a->calls, 16, &st);
    return NULL;
}

static double throughput(srpc_channel_t *ch, int threads, int calls_each)
{
    pthread_t th[64];
    tput_arg_t arg = {ch, calls_each};
    uint64_t t0 = bench_now_ns();

    for (int i = 0; i < threads; i++) {
        pthread_create(&th[i], NULL, tput_worker, &arg);
    }
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i], NULL);
    }
    return (double)threads * calls_each / ((double)(bench_now_ns() - t0) / 1e9);
}

/* --tls: the PEM files, NULL without it. */
static char *g_cert, *g_key, *g_ca;

static char *load_pem(const char *dir, const char *name)
{
    char path[1024];
    char *pem = NULL;

    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if (srpc_pem_load(path, &pem) != ST_OK) {
        fprintf(stderr, "bench_rpc: --tls: cannot read %s\n", path);
        exit(2);
    }
    return pem;
}

static srpc_server_t *start(unsigned threads)
{
    srpc_server_config_t cfg = {.address = "127.0.0.1:0",
                                .n_threads = threads,
                                .max_message_bytes = 64u << 20,
                                .tls_cert_pem = g_cert,
                                .tls_key_pem = g_key};
    srpc_server_t *srv = NULL;

    if (srpc_server_start(&cfg, table, sizeof(table) / sizeof(table[0]), &srv) != ST_OK) {
        fprintf(stderr, "server start failed\n");
        exit(1);
    }
    return srv;
}

static srpc_channel_t *connect_to(srpc_server_t *srv)
{
    char target[64];
    srpc_channel_t *ch = NULL;

    srpc_channel_config_t cc = {.tls_ca_pem = g_ca};

    snprintf(target, sizeof(target), "127.0.0.1:%d", srpc_server_port(srv));
    srpc_channel_open(target, &cc, &ch);
    return ch;
}

static bool want(const char *only, const char *section)
{
    size_t len = strlen(section);

    for (const char *p = only; p != NULL && *p != '\0';) {
        const char *end = strchr(p, ',');
        size_t n = end ? (size_t)(end - p) : strlen(p);

        if (n == len && strncmp(p, section, n) == 0) {
            return true;
        }
        p = end ? end + 1 : NULL;
    }
    return only == NULL;
}

static void fanout(srpc_channel_t **ch, int n, double unary_median)
{
    Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
    srpc_fanout_item_t items[3];
    double *fan = malloc(sizeof(double) * (size_t)n);
    bench_stats_t fst;

    rq.tenant = (char *)"fan";
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 3; k++) {
            items[k] = (srpc_fanout_item_t){.ch = ch[k], .req = &rq.base};
        }
        uint64_t t0 = bench_now_ns();
        srpc_fanout(&echo_method, items, 3, 10000);
        fan[i] = (double)(bench_now_ns() - t0) / 1e3;
        for (int k = 0; k < 3; k++) {
            if (items[k].status != ST_OK) {
                fprintf(stderr, "fan-out item failed\n");
                exit(1);
            }
        }
        srpc_fanout_free(items, 3);
    }
    bench_stats(fan, (size_t)n, &fst);
    printf("fan-out to 3 servers: median %.1f us p99 %.1f us (MAD %.1f)", fst.median, fst.p99,
           fst.mad);
    if (unary_median > 0) {
        printf(" (%.2f x one unary call)", fst.median / unary_median);
    }
    printf("\n");
    free(fan);
}

int main(int argc, char **argv)
{
    int calls = 5000, threads = 4, rounds = 0, server_threads = 4;
    const char *only = NULL;
    bench_stats_t tcp, rpc = {0}, big, cp;
    srpc_server_t *srv[3];
    srpc_channel_t *ch[3];

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--calls") == 0) {
            calls = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--server-threads") == 0) {
            server_threads = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--rounds") == 0) {
            rounds = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--only") == 0) {
            only = argv[i + 1];
        } else if (strcmp(argv[i], "--tls") == 0) {
            g_cert = load_pem(argv[i + 1], "server.pem");
            g_key = load_pem(argv[i + 1], "server.key");
            g_ca = load_pem(argv[i + 1], "ca.pem");
        } else {
            fprintf(stderr, "bench_rpc: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (calls < 10 || threads < 1 || threads > 64 || rounds < 0 || server_threads < 1) {
        fprintf(stderr, "usage: bench_rpc [--calls N>=10] [--threads 1..64] [--rounds R] "
                        "[--server-threads N] [--only unary,tput,large,lookup,fanout] "
                        "[--tls DIR]\n");
        return 2;
    }
    /* BENCH_RPC_LOG=debug shows gRPC's own lines (with GRPC_TRACE=...). */
    lg_set_level(getenv("BENCH_RPC_LOG") ? LG_DEBUG : LG_WARN);
    printf("control plane: %s\n", g_cert ? "TLS (--tls)" : "plaintext");
    for (int i = 0; i < 3; i++) {
        srv[i] = start((unsigned)server_threads);
        ch[i] = connect_to(srv[i]);
    }
    call_latency(ch[0], &echo_method, 200, 16, &rpc); /* warm up: connect, allocate */
    rpc.median = 0;

    if (want(only, "unary")) {
        tcp_pingpong(calls, &tcp);
        call_latency(ch[0], &echo_method, calls, 16, &rpc);
        printf("unary call, 16 B payload: median %.1f us p99 %.1f us (MAD %.1f)\n", rpc.median,
               rpc.p99, rpc.mad);
        printf("TCP ping-pong 64 B (floor): median %.1f us p99 %.1f us (MAD %.1f)\n", tcp.median,
               tcp.p99, tcp.mad);
        printf("ratio unary / TCP round trip: %.2f\n", rpc.median / tcp.median);
    }
    if (want(only, "tput")) {
        printf("throughput, %d client threads on one channel: %.0f calls/s\n", threads,
               throughput(ch[0], threads, calls / threads));
    }
    if (want(only, "large")) {
        for (size_t bytes = 64u << 10; bytes <= (4u << 20); bytes *= 8) {
            int n = rounds ? rounds : 300;

            n = bytes >= (1u << 20) ? (n + 5) / 6 : n;
            call_latency(ch[0], &echo_method, n, bytes, &big);
            memcpy_floor(bytes, 1000, &cp);
            printf("echo %zu KiB: median %.0f us p99 %.0f us (MAD %.0f), %.2f GB/s each way; "
                   "memcpy %.1f us (%.1f GB/s), echo / (2 x memcpy) %.1f\n",
                   bytes >> 10, big.median, big.p99, big.mad, (double)bytes / (big.median * 1e3),
                   cp.median, (double)bytes / (cp.median * 1e3), big.median / (2 * cp.median));
        }
    }
    if (want(only, "lookup")) {
        size_t bytes = 16384 * 16; /* a 1M-token chain of packed 16-byte hashes */
        int n = rounds ? rounds : 300;

        call_latency(ch[0], &sink_method, n, bytes, &big);
        memcpy_floor(bytes, 1000, &cp);
        printf("lookup-shaped call, %zu KiB request, 16 B answer: median %.0f us p99 %.0f us "
               "(MAD %.0f); memcpy %.1f us\n",
               bytes >> 10, big.median, big.p99, big.mad, cp.median);
    }
    if (want(only, "fanout")) {
        fanout(ch, calls / 2, rpc.median);
    }

    for (int i = 0; i < 3; i++) {
        srpc_channel_close(ch[i]);
        srpc_server_destroy(srv[i]);
    }
    free(g_cert), free(g_key), free(g_ca);
    return 0;
}
