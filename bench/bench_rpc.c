/*
 * bench_rpc.c - the control plane's cost: unary call latency against a bare
 * TCP ping-pong over the same loopback (the floor any RPC pays), throughput
 * with several client threads, large-message bandwidth, and fan-out latency.
 *
 *   bench_rpc [--calls N] [--threads T]
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
#include "st_log.h"
#include "strata.pb-c.h"

static const srpc_method_t echo_method = {"/strata.bench.Bench/Echo",
                                          &strata__v1__hello_request__descriptor,
                                          &strata__v1__hello_request__descriptor};

static st_status_t echo_handler(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                ProtobufCMessage *resp, void *arg)
{
    *(Strata__V1__HelloRequest *)resp = *(const Strata__V1__HelloRequest *)req;
    return ST_OK;
}

static const srpc_method_def_t table[] = {{&echo_method, echo_handler, NULL, 0}};

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

/* ------------------------------------------------------------ rpc pieces -- */

static void unary_latency(srpc_channel_t *ch, int n, size_t bytes, bench_stats_t *out)
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

        if (srpc_call(ch, &echo_method, &rq.base, 10000, &resp, NULL) != ST_OK) {
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

    unary_latency(a->ch, a->calls, 16, &st);
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

static srpc_server_t *start(unsigned threads)
{
    srpc_server_config_t cfg = {
        .address = "127.0.0.1:0", .n_threads = threads, .max_message_bytes = 64u << 20};
    srpc_server_t *srv = NULL;

    if (srpc_server_start(&cfg, table, 1, &srv) != ST_OK) {
        fprintf(stderr, "server start failed\n");
        exit(1);
    }
    return srv;
}

static srpc_channel_t *connect_to(srpc_server_t *srv)
{
    char target[64];
    srpc_channel_t *ch = NULL;

    snprintf(target, sizeof(target), "127.0.0.1:%d", srpc_server_port(srv));
    srpc_channel_open(target, NULL, &ch);
    return ch;
}

int main(int argc, char **argv)
{
    int calls = 5000, threads = 4;
    bench_stats_t tcp, rpc, big;
    srpc_server_t *srv[3];
    srpc_channel_t *ch[3];

    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--calls") == 0) {
            calls = atoi(argv[i + 1]);
        } else if (strcmp(argv[i], "--threads") == 0) {
            threads = atoi(argv[i + 1]);
        }
    }
    if (calls < 10 || threads < 1 || threads > 64) {
        fprintf(stderr, "usage: bench_rpc [--calls N>=10] [--threads 1..64]\n");
        return 2;
    }
    st_log_set_level(ST_LOG_WARN);
    for (int i = 0; i < 3; i++) {
        srv[i] = start(4);
        ch[i] = connect_to(srv[i]);
    }
    unary_latency(ch[0], 200, 16, &rpc); /* warm up: connect, allocate */

    tcp_pingpong(calls, &tcp);
    unary_latency(ch[0], calls, 16, &rpc);
    printf("unary call, 16 B payload: median %.1f us p99 %.1f us (MAD %.1f)\n", rpc.median, rpc.p99,
           rpc.mad);
    printf("TCP ping-pong 64 B (floor): median %.1f us p99 %.1f us\n", tcp.median, tcp.p99);
    printf("ratio unary / TCP round trip: %.2f\n", rpc.median / tcp.median);

    printf("throughput, %d client threads on one channel: %.0f calls/s\n", threads,
           throughput(ch[0], threads, calls / threads));

    for (size_t bytes = 64u << 10; bytes <= (4u << 20); bytes *= 8) {
        int n = bytes >= (1u << 20) ? 50 : 300;

        unary_latency(ch[0], n, bytes, &big);
        printf("echo %zu KiB: median %.0f us, %.2f GB/s each way\n", bytes >> 10, big.median,
               (double)bytes / (big.median * 1e3));
    }

    /* Fan-out to 3 servers against 3 calls one after another. */
    {
        Strata__V1__HelloRequest rq = STRATA__V1__HELLO_REQUEST__INIT;
        srpc_fanout_item_t items[3];
        double *fan = malloc(sizeof(double) * (size_t)calls);
        bench_stats_t fst;
        int n = calls / 2;

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
                    return 1;
                }
            }
            srpc_fanout_free(items, 3);
        }
        bench_stats(fan, (size_t)n, &fst);
        printf("fan-out to 3 servers: median %.1f us p99 %.1f us (%.2f x one unary call)\n",
               fst.median, fst.p99, fst.median / rpc.median);
        free(fan);
    }

    for (int i = 0; i < 3; i++) {
        srpc_channel_close(ch[i]);
        srpc_server_destroy(srv[i]);
    }
    return 0;
}
