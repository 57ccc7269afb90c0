/*
 * bench_transport_loop.c - the bare transport loop (see
 * bench_transport_loop.h).
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench_transport_loop.h"
#include "bench_util.h"
#include "fd_io.h"

typedef struct bench_tp_hello {
    uint32_t addr_len;
    uint32_t rkey_len;
    uint64_t base;
    uint64_t len;
} bench_tp_hello_t;

/* The target: register, announce, then progress until the socket closes. */
static int bench_tp_target(const tp_config_t *cfg, size_t region_bytes, bool busy, int sock)
{
    tp_transport_t *tp;
    if (tp_create(cfg, &tp) != ST_OK) {
        return 2;
    }
    /* Allocated by the transport, as the daemon's arenas are. */
    tp_mem_t *mem;
    if (tp_mem_alloc(tp, region_bytes, &mem) != ST_OK) {
        return 4;
    }
    uint8_t *region = tp_mem_addr(mem);
    memset(region, 0x5a, region_bytes);
    const void *addr, *rkey;
    size_t addr_len, rkey_len;
    tp_address(tp, &addr, &addr_len);
    tp_mem_rkey(mem, &rkey, &rkey_len);
    bench_tp_hello_t h = {(uint32_t)addr_len, (uint32_t)rkey_len, (uint64_t)(uintptr_t)region,
                          region_bytes};
    if (fio_write_full(sock, &h, sizeof(h)) || fio_write_full(sock, addr, addr_len) ||
        fio_write_full(sock, rkey, rkey_len)) {
        return 5;
    }
    int efd = -1;
    (void)tp_event_fd(tp, &efd);
    for (;;) {
        while (tp_progress(tp) > 0) {
        }
        struct pollfd pfd[2] = {{.fd = sock, .events = POLLIN}, {.fd = efd, .events = POLLIN}};
        nfds_t nfds = 1;
        int timeout = 0;
        if (efd >= 0 && tp_arm(tp) == ST_OK) {
            nfds = 2;
            timeout = busy ? 0 : 1; /* bounded: some providers need polling */
        }
        if (poll(pfd, nfds, timeout) > 0 && (pfd[0].revents & (POLLIN | POLLHUP))) {
            break; /* the initiator closed the socket */
        }
    }
    tp_destroy(tp);
    return 0;
}

st_status_t bench_tp_spawn_target(const tp_config_t *cfg, size_t region_bytes, bool busy,
                                  bench_tp_peer_t *peer)
{
    int sv[2];
    memset(peer, 0, sizeof(*peer));
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        return ST_ERR_IO;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(sv[0]);
        close(sv[1]);
        return ST_ERR_IO;
    }
    if (pid == 0) {
        close(sv[0]);
        _exit(bench_tp_target(cfg, region_bytes, busy, sv[1]));
    }
    close(sv[1]);
    peer->pid = pid;
    peer->sock = sv[0];
    bench_tp_hello_t h;
    if (fio_read_full(peer->sock, &h, sizeof(h)) != 0) {
        bench_tp_stop_target(peer);
        return ST_ERR_IO;
    }
    peer->addr = malloc(h.addr_len);
    peer->rkey = malloc(h.rkey_len);
    if (peer->addr == NULL || peer->rkey == NULL) {
        bench_tp_stop_target(peer);
        return ST_ERR_NOMEM;
    }
    if (fio_read_full(peer->sock, peer->addr, h.addr_len) ||
        fio_read_full(peer->sock, peer->rkey, h.rkey_len)) {
        bench_tp_stop_target(peer);
        return ST_ERR_IO;
    }
    peer->addr_len = h.addr_len;
    peer->rkey_len = h.rkey_len;
    peer->base = h.base;
    peer->len = h.len;
    return ST_OK;
}

void bench_tp_stop_target(bench_tp_peer_t *peer)
{
    if (peer->sock > 0) {
        close(peer->sock);
        peer->sock = -1;
    }
    if (peer->pid > 0) {
        waitpid(peer->pid, NULL, 0);
        peer->pid = 0;
    }
    free(peer->addr);
    free(peer->rkey);
    peer->addr = NULL;
    peer->rkey = NULL;
}

typedef struct bench_tp_stream {
    unsigned *free_slots;
    unsigned n_free;
    size_t done_bytes;
    size_t op_bytes;
    st_status_t error;
} bench_tp_stream_t;

typedef struct bench_tp_slot {
    bench_tp_stream_t *s;
    unsigned index;
} bench_tp_slot_t;

static void bench_tp_on_get(void *user, st_status_t status)
{
    bench_tp_slot_t *slot = user;
    bench_tp_stream_t *s = slot->s;
    if (status != ST_OK && s->error == ST_OK) {
        s->error = status;
    }
    s->done_bytes += s->op_bytes;
    s->free_slots[s->n_free++] = slot->index;
}

static uint64_t bench_tp_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* The offset of the k-th op: in order (wrapping), or a random whole slot. */
static size_t bench_tp_offset(size_t k, size_t op_bytes, size_t span, uint64_t seed)
{
    if (seed == 0) {
        return (k * op_bytes) % span;
    }
    return (size_t)(bench_tp_mix(seed + k) % (span / op_bytes)) * op_bytes;
}

static st_status_t bench_tp_gets(const bench_tp_loop_t *loop, size_t op_bytes, unsigned inflight,
                                 size_t total_bytes, uint64_t seed, double *seconds_p)
{
    if (op_bytes == 0 || inflight == 0 || (size_t)inflight * op_bytes > loop->local_len ||
        op_bytes > loop->remote_len) {
        return ST_ERR_INVALID;
    }
    bench_tp_stream_t s = {.op_bytes = op_bytes};
    bench_tp_slot_t *slots = calloc(inflight, sizeof(*slots));
    s.free_slots = calloc(inflight, sizeof(*s.free_slots));
    if (slots == NULL || s.free_slots == NULL) {
        free(slots);
        free(s.free_slots);
        return ST_ERR_NOMEM;
    }
    for (unsigned i = 0; i < inflight; i++) {
        slots[i] = (bench_tp_slot_t){.s = &s, .index = i};
        s.free_slots[s.n_free++] = i;
    }
    size_t span = loop->remote_len / op_bytes * op_bytes;
    size_t k = 0, posted = 0;
    st_status_t st = ST_OK;
    uint64_t t0 = bench_now_ns();
    while (s.done_bytes < total_bytes && s.error == ST_OK) {
        while (s.n_free > 0 && posted < total_bytes) {
            unsigned i = s.free_slots[--s.n_free];
            size_t off = bench_tp_offset(k++, op_bytes, span, seed);
            st = tp_get(loop->ep, loop->local + (size_t)i * op_bytes, op_bytes, loop->local_mem,
                        loop->remote_base + off, loop->rkey, bench_tp_on_get, &slots[i]);
            if (st != ST_OK) {
                s.error = st;
                break;
            }
            posted += op_bytes;
        }
        int n = tp_progress(loop->tp);
        if (n < 0) {
            s.error = (st_status_t)n;
        }
    }
    *seconds_p = (double)(bench_now_ns() - t0) * 1e-9;
    /* Let what is still in flight land before the slots go away. */
    while (tp_inflight(loop->tp) > 0 && tp_progress(loop->tp) >= 0) {
    }
    free(slots);
    free(s.free_slots);
    return s.error;
}

st_status_t bench_tp_stream_gets(const bench_tp_loop_t *loop, size_t op_bytes, unsigned inflight,
                                 size_t total_bytes, double *seconds_p)
{
    return bench_tp_gets(loop, op_bytes, inflight, total_bytes, 0, seconds_p);
}

st_status_t bench_tp_random_gets(const bench_tp_loop_t *loop, size_t op_bytes, unsigned inflight,
                                 size_t total_bytes, uint64_t seed, double *seconds_p)
{
    return bench_tp_gets(loop, op_bytes, inflight, total_bytes, seed | 1, seconds_p);
}

double bench_memcpy_random(uint8_t *dst, const uint8_t *src, size_t src_len, size_t op_bytes,
                           unsigned inflight, size_t total_bytes, uint64_t seed)
{
    size_t span = src_len / op_bytes * op_bytes;
    unsigned slot = 0;
    size_t k = 0;
    uint64_t t0 = bench_now_ns();
    for (size_t done = 0; done < total_bytes; done += op_bytes) {
        memcpy(dst + (size_t)slot * op_bytes, src + bench_tp_offset(k++, op_bytes, span, seed | 1),
               op_bytes);
        slot = slot + 1 == inflight ? 0 : slot + 1;
    }
    double seconds = (double)(bench_now_ns() - t0) * 1e-9;
    __asm__ volatile("" : : "r"(dst) : "memory");
    return seconds;
}

double bench_memcpy_stream(uint8_t *dst, const uint8_t *src, size_t src_len, size_t op_bytes,
                           unsigned inflight, size_t total_bytes)
{
    size_t span = src_len / op_bytes * op_bytes;
    size_t cursor = 0;
    unsigned slot = 0;
    uint64_t t0 = bench_now_ns();
    for (size_t done = 0; done < total_bytes; done += op_bytes) {
        memcpy(dst + (size_t)slot * op_bytes, src + cursor, op_bytes);
        slot = slot + 1 == inflight ? 0 : slot + 1;
        cursor += op_bytes;
        if (cursor >= span) {
            cursor = 0;
        }
    }
    double seconds = (double)(bench_now_ns() - t0) * 1e-9;
    /* Keep the copies observable. */
    __asm__ volatile("" : : "r"(dst) : "memory");
    return seconds;
}
