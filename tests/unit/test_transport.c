/*
 * test_transport.c - the data-plane transport over real transports on
 * loopback, in two processes.
 *
 *   test_transport ucx <tls> [peer-failure]
 *   test_transport libfabric <provider> [domain]
 *
 * The group setup forks a target process before any transport exists. The
 * target creates its transport, registers a region filled with a known
 * pattern, sends its address, packed key and region base over a socketpair,
 * then keeps progressing its transport while it serves checksum requests
 * on the socket. The initiator connects and runs the tests: put and get
 * round trips of random sizes checked with XXH3-64, row-granular reads
 * checked byte by byte, messages answered by the target (UCX; libfabric
 * refuses them), error paths, and a peer that went away.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <xxhash.h>

#include "log.h"
#include "transport.h"
#include "fd_io.h"

#include "test_transport.h"

tp_config_t g_cfg;

/* The initiator's state, shared by the tests of the group. */
typedef struct fixture {
    pid_t target;
    int sock;
    tp_transport_t *tp;
    uint8_t *local;
    tp_mem_t *local_mem;
    tp_ep_t *ep;
    tp_rkey_t *rkey;
    uint8_t *peer_addr;
    size_t peer_addr_len;
    uint8_t *peer_rkey;
    size_t peer_rkey_len;
    uint8_t *user_rkey;
    size_t user_rkey_len;
    uint64_t user_base;
    uint8_t *ro_rkey, *rv_rkey;
    size_t ro_rkey_len, rv_rkey_len;
    uint64_t ro_base, rv_base;
    uint64_t remote_base;
    uint8_t *pattern; /* the target's pattern, generated here too */
} fixture_t;

/* --- initiator helpers -------------------------------------------------- */

typedef struct waiter {
    int done;
    int failed;
    st_status_t last;
} waiter_t;

static void on_done(void *user, st_status_t status)
{
    waiter_t *w = user;
    w->done++;
    if (status != ST_OK) {
        w->failed++;
        w->last = status;
    }
}

/* Progresses until w has seen want completions; fails the test if the
 * transport hangs for HANG_GUARD_MS. */
static void wait_for(tp_transport_t *tp, waiter_t *w, int want, int use_wait)
{
    uint64_t start = lg_now_ms();
    while (w->done < want) {
        int n = tp_progress(tp);
        assert_true(n >= 0);
        if (n == 0 && use_wait) {
            assert_int_equal(tp_wait(tp, 1), ST_OK);
        }
        if (lg_now_ms() - start > HANG_GUARD_MS) {
            fail_msg("transport hung: %d of %d completions", w->done, want);
        }
    }
}

static uint64_t remote_sum(fixture_t *f, uint64_t off, uint64_t len)
{
    cmd_t c = {.cmd = CMD_SUM, .off = off, .len = len};
    uint64_t sum = 0;
    assert_int_equal(fio_write_full(f->sock, &c, sizeof(c)), 0);
    assert_int_equal(fio_read_full(f->sock, &sum, sizeof(sum)), 0);
    return sum;
}

/* A size between 1 B and MAX_OP_BYTES, spread evenly over the powers of two. */
static size_t random_size(uint64_t *rng)
{
    *rng = splitmix64(*rng);
    unsigned shift = (unsigned)(*rng % 24); /* 2^0 .. 2^23 */
    *rng = splitmix64(*rng);
    size_t size = ((size_t)1 << shift) + (size_t)(*rng % ((size_t)1 << shift));
    return size > MAX_OP_BYTES ? MAX_OP_BYTES : size;
}

/* Reads len bytes from the target's socket into a new buffer. */
static void *read_blob(int sock, size_t len)
{
    void *p = malloc(len);

    assert_non_null(p);
    assert_int_equal(fio_read_full(sock, p, len), 0);
    return p;
}

static int group_setup(void **state)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) {
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        return -1;
    }
    if (pid == 0) {
        close(sv[0]);
        _exit(target_main(sv[1]));
    }
    close(sv[1]);

    fixture_t *f = calloc(1, sizeof(*f));
    assert_non_null(f);
    f->target = pid;
    f->sock = sv[0];
    hello_t h;
    if (fio_read_full(f->sock, &h, sizeof(h)) != 0) {
        fprintf(stderr, "target process did not start its transport\n");
        return -1;
    }
    f->peer_addr = read_blob(f->sock, h.addr_len);
    f->peer_rkey = read_blob(f->sock, h.rkey_len);
    f->user_rkey = read_blob(f->sock, h.user_rkey_len);
    f->user_rkey_len = h.user_rkey_len;
    f->user_base = h.user_base;
    f->ro_rkey = read_blob(f->sock, h.ro_rkey_len);
    f->rv_rkey = read_blob(f->sock, h.rv_rkey_len);
    f->ro_rkey_len = h.ro_rkey_len;
    f->rv_rkey_len = h.rv_rkey_len;
    f->ro_base = h.ro_base;
    f->rv_base = h.rv_base;
    f->peer_addr_len = h.addr_len;
    f->peer_rkey_len = h.rkey_len;
    f->remote_base = h.base;
    assert_int_equal(h.len, REGION_BYTES);

    f->pattern = malloc(PATTERN_BYTES);
    assert_non_null(f->pattern);
    fill_pattern(f->pattern, PATTERN_BYTES, PATTERN_SEED);

    assert_int_equal(tp_create(&g_cfg, &f->tp), ST_OK);
    f->local = aligned_alloc(4096, LOCAL_BYTES);
    assert_non_null(f->local);
    memset(f->local, 0, LOCAL_BYTES);
    assert_int_equal(tp_mem_register(f->tp, f->local, LOCAL_BYTES, &f->local_mem), ST_OK);
    assert_int_equal(tp_connect(f->tp, f->peer_addr, f->peer_addr_len, &f->ep), ST_OK);
    assert_int_equal(tp_rkey_unpack(f->ep, f->peer_rkey, f->peer_rkey_len, &f->rkey), ST_OK);
    uint64_t base;
    size_t len;
    tp_rkey_bounds(f->rkey, &base, &len);
    assert_int_equal(base, f->remote_base);
    assert_int_equal(len, REGION_BYTES);
    *state = f;
    return 0;
}

static void stop_target(fixture_t *f)
{
    if (f->target > 0) {
        cmd_t c = {.cmd = CMD_QUIT};
        (void)fio_write_full(f->sock, &c, sizeof(c));
        int wstatus = 0;
        waitpid(f->target, &wstatus, 0);
        f->target = 0;
        assert_true(WIFEXITED(wstatus));
        assert_int_equal(WEXITSTATUS(wstatus), 0);
    }
}

static int group_teardown(void **state)
{
    fixture_t *f = *state;
    if (f == NULL) {
        return 0;
    }
    tp_destroy(f->tp);
    if (f->target > 0) {
        kill(f->target, SIGKILL);
        waitpid(f->target, NULL, 0);
    }
    close(f->sock);
    free(f->local);
    free(f->pattern);
    free(f->peer_addr);
    free(f->peer_rkey);
    free(f->user_rkey);
    free(f->ro_rkey);
    free(f->rv_rkey);
    free(f);
    return 0;
}

/* --- the tests ---------------------------------------------------------- */

/* Gets of the target's known pattern, whole and in pieces. */
static void test_get_pattern(void **state)
{
    fixture_t *f = *state;
    waiter_t w = {0};
    memset(f->local, 0, PATTERN_BYTES);
    assert_int_equal(
        tp_get(f->ep, f->local, PATTERN_BYTES, f->local_mem, f->remote_base, f->rkey, on_done, &w),
        ST_OK);
    /* Callbacks run only from progress, never from inside the post. */
    assert_int_equal(w.done, 0);
    assert_int_equal(tp_inflight(f->tp), 1);
    wait_for(f->tp, &w, 1, 1);
    assert_int_equal(w.failed, 0);
    assert_int_equal(tp_inflight(f->tp), 0);
    assert_memory_equal(f->local, f->pattern, PATTERN_BYTES);
}

/* Random-size puts then gets in the scratch area, checked with XXH3-64 on
 * both sides. Sizes span 1 B to 8 MB; offsets are unaligned. */
static void test_put_get_roundtrip(void **state)
{
    fixture_t *f = *state;
    uint64_t rng = 0x1234;
    uint8_t *src = f->local;
    uint8_t *dst = f->local + MAX_OP_BYTES + 4096;
    for (int i = 0; i < 40; i++) {
        size_t size = i == 0 ? 1 : i == 1 ? MAX_OP_BYTES : random_size(&rng);
        rng = splitmix64(rng);
        uint64_t off = PATTERN_BYTES + rng % (SCRATCH_BYTES - size + 1);
        fill_pattern(src, size, rng ^ (uint64_t)i);
        uint64_t want = XXH3_64bits(src, size);

        waiter_t w = {0};
        assert_int_equal(
            tp_put(f->ep, src, size, f->local_mem, f->remote_base + off, f->rkey, on_done, &w),
            ST_OK);
        wait_for(f->tp, &w, 1, i & 1);
        assert_int_equal(w.failed, 0);
        assert_int_equal(tp_ep_flush(f->ep, HANG_GUARD_MS), ST_OK);
        assert_true(remote_sum(f, off, size) == want);

        memset(dst, 0xa5, size);
        assert_int_equal(
            tp_get(f->ep, dst, size, f->local_mem, f->remote_base + off, f->rkey, on_done, &w),
            ST_OK);
        wait_for(f->tp, &w, 2, 0);
        assert_int_equal(w.failed, 0);
        if (XXH3_64bits(dst, size) != want) {
            fail_msg("round trip %d: size=%zu off=%llu checksum differs", i, size,
                     (unsigned long long)off);
        }
    }
}

/* Many gets in flight at once, each into its own slot, of distinct sizes. */
static void test_many_inflight(void **state)
{
    fixture_t *f = *state;
    enum { N = 64, SLOT = 256 * 1024 };
    waiter_t w = {0};
    memset(f->local, 0, N * SLOT);
    for (int i = 0; i < N; i++) {
        size_t size = SLOT - (size_t)i * 1000;
        uint64_t off = (uint64_t)i * 100003u;
        assert_int_equal(tp_get(f->ep, f->local + (size_t)i * SLOT, size, f->local_mem,
                                f->remote_base + off, f->rkey, on_done, &w),
                         ST_OK);
    }
    assert_int_equal(tp_ep_flush(f->ep, HANG_GUARD_MS), ST_OK);
    assert_int_equal(w.done, N);
    assert_int_equal(w.failed, 0);
    for (int i = 0; i < N; i++) {
        size_t size = SLOT - (size_t)i * 1000;
        uint64_t off = (uint64_t)i * 100003u;
        assert_memory_equal(f->local + (size_t)i * SLOT, f->pattern + off, size);
    }
}

typedef struct row_state row_state_t;

typedef struct row_ctx {
    row_state_t *rs;
    int slot;
    uint32_t row;
} row_ctx_t;

struct row_state {
    fixture_t *f;
    waiter_t w;
    int mismatches;
    int free_slots[ROW_INFLIGHT];
    int n_free;
    row_ctx_t ctx[ROW_INFLIGHT];
};

static void on_row(void *user, st_status_t status)
{
    row_ctx_t *c = user;
    row_state_t *rs = c->rs;
    const uint8_t *got = rs->f->local + (size_t)c->slot * ROW_BYTES;
    on_done(&rs->w, status);
    if (status == ST_OK && memcmp(got, rs->f->pattern + (size_t)c->row * ROW_BYTES, ROW_BYTES)) {
        rs->mismatches++;
    }
    rs->free_slots[rs->n_free++] = c->slot;
}

/* 10,000 row-granular reads (row r at r x row_bytes), up to ROW_INFLIGHT in
 * flight, each checked byte by byte when it lands; a slot is reused as soon
 * as its callback ran. */
static void test_row_reads(void **state)
{
    fixture_t *f = *state;
    uint32_t n_rows = PATTERN_BYTES / ROW_BYTES;
    row_state_t *rs = calloc(1, sizeof(*rs));
    assert_non_null(rs);
    rs->f = f;
    for (int i = 0; i < ROW_INFLIGHT; i++) {
        rs->free_slots[rs->n_free++] = i;
        rs->ctx[i] = (row_ctx_t){.rs = rs, .slot = i};
    }
    uint64_t rng = 0x77;
    int posted = 0;
    uint64_t start = lg_now_ms();
    while (rs->w.done < ROW_READS) {
        while (posted < ROW_READS && rs->n_free > 0) {
            row_ctx_t *c = &rs->ctx[rs->free_slots[--rs->n_free]];
            uint8_t *slot = f->local + (size_t)c->slot * ROW_BYTES;
            rng = splitmix64(rng);
            c->row = (uint32_t)(rng % n_rows);
            memset(slot, 0, ROW_BYTES);
            assert_int_equal(tp_get(f->ep, slot, ROW_BYTES, f->local_mem,
                                    f->remote_base + (uint64_t)c->row * ROW_BYTES, f->rkey, on_row,
                                    c),
                             ST_OK);
            posted++;
        }
        assert_true(tp_progress(f->tp) >= 0);
        if (lg_now_ms() - start > HANG_GUARD_MS) {
            fail_msg("row reads hung: %d of %d", rs->w.done, ROW_READS);
        }
    }
    assert_int_equal(posted, ROW_READS);
    assert_int_equal(rs->w.failed, 0);
    assert_int_equal(rs->mismatches, 0);
    free(rs);
}

/* Bad input is refused with ST_ERR_INVALID, and the endpoint still works. */
static void test_errors(void **state)
{
    fixture_t *f = *state;
    tp_rkey_t *rkey = NULL;
    tp_ep_t *ep = NULL;
    waiter_t w = {0};

    /* Remote keys: corrupted, truncated, garbage, empty. */
    uint8_t *bad = malloc(f->peer_rkey_len);
    assert_non_null(bad);
    memcpy(bad, f->peer_rkey, f->peer_rkey_len);
    bad[f->peer_rkey_len - 1] ^= 0x40;
    assert_int_equal(tp_rkey_unpack(f->ep, bad, f->peer_rkey_len, &rkey), ST_ERR_INVALID);
    assert_int_equal(tp_rkey_unpack(f->ep, f->peer_rkey, f->peer_rkey_len - 3, &rkey),
                     ST_ERR_INVALID);
    fill_pattern(bad, f->peer_rkey_len, 99);
    assert_int_equal(tp_rkey_unpack(f->ep, bad, f->peer_rkey_len, &rkey), ST_ERR_INVALID);
    assert_int_equal(tp_rkey_unpack(f->ep, NULL, 0, &rkey), ST_ERR_INVALID);
    free(bad);
    assert_null(rkey);

    /* Addresses: garbage, corrupted, truncated, and a key offered as an address. */
    uint8_t junk[512];
    fill_pattern(junk, sizeof(junk), 7);
    assert_int_equal(tp_connect(f->tp, junk, sizeof(junk), &ep), ST_ERR_INVALID);
    uint8_t *addr = malloc(f->peer_addr_len);
    assert_non_null(addr);
    memcpy(addr, f->peer_addr, f->peer_addr_len);
    addr[f->peer_addr_len / 2] ^= 1;
    assert_int_equal(tp_connect(f->tp, addr, f->peer_addr_len, &ep), ST_ERR_INVALID);
    assert_int_equal(tp_connect(f->tp, f->peer_addr, 10, &ep), ST_ERR_INVALID);
    assert_int_equal(tp_connect(f->tp, f->peer_rkey, f->peer_rkey_len, &ep), ST_ERR_INVALID);
    free(addr);
    assert_null(ep);

    /* Out of bounds on either side, and empty operations. */
    uint64_t end = f->remote_base + REGION_BYTES;
    assert_int_equal(tp_get(f->ep, f->local, 64, f->local_mem, end - 63, f->rkey, on_done, &w),
                     ST_ERR_INVALID);
    assert_int_equal(
        tp_get(f->ep, f->local, 64, f->local_mem, f->remote_base - 1, f->rkey, on_done, &w),
        ST_ERR_INVALID);
    assert_int_equal(
        tp_put(f->ep, f->local, 64, f->local_mem, UINT64_MAX - 10, f->rkey, on_done, &w),
        ST_ERR_INVALID);
    assert_int_equal(tp_get(f->ep, f->local + LOCAL_BYTES - 10, 64, f->local_mem, f->remote_base,
                            f->rkey, on_done, &w),
                     ST_ERR_INVALID);
    assert_int_equal(tp_get(f->ep, f->local, 0, f->local_mem, f->remote_base, f->rkey, on_done, &w),
                     ST_ERR_INVALID);
    assert_int_equal(w.done, 0);
    assert_int_equal(tp_inflight(f->tp), 0);

    /* The last byte of the region is in bounds, and the endpoint still works. */
    assert_int_equal(tp_get(f->ep, f->local, 1, f->local_mem, end - 1, f->rkey, on_done, &w),
                     ST_OK);
    wait_for(f->tp, &w, 1, 0);
    assert_int_equal(w.failed, 0);
}

/* A second endpoint and key to the same peer work alongside the first and
 * close cleanly. */
static void test_second_endpoint(void **state)
{
    fixture_t *f = *state;
    tp_ep_t *ep;
    tp_rkey_t *rkey;
    waiter_t w = {0};
    assert_int_equal(tp_connect(f->tp, f->peer_addr, f->peer_addr_len, &ep), ST_OK);
    assert_int_equal(tp_rkey_unpack(ep, f->peer_rkey, f->peer_rkey_len, &rkey), ST_OK);
    /* A key belongs to the endpoint it was unpacked on. */
    assert_int_equal(tp_get(f->ep, f->local, 8, f->local_mem, f->remote_base, rkey, on_done, &w),
                     ST_ERR_INVALID);
    memset(f->local, 0, 4096);
    assert_int_equal(
        tp_get(ep, f->local, 4096, f->local_mem, f->remote_base + 4096, rkey, on_done, &w), ST_OK);
    assert_int_equal(tp_ep_flush(ep, HANG_GUARD_MS), ST_OK);
    assert_int_equal(w.done, 1);
    assert_int_equal(w.failed, 0);
    assert_memory_equal(f->local, f->pattern + 4096, 4096);
    tp_ep_close(ep); /* destroys rkey too */
}

/* Gets in flight when their endpoint is aborted: every callback has run when
 * tp_ep_abort returns; the ops the library still held (tp_orphaned) are let go
 * of by later progress where the backend does (UCX completes them in the close;
 * libfabric tcp releases them later; libfabric shm was seen to keep some), and
 * nothing writes the local buffer afterwards. */
static void test_abort_in_flight(void **state)
{
    fixture_t *f = *state;
    enum { N = 64, SLOT = 256 * 1024 };
    tp_ep_t *ep;
    tp_rkey_t *rkey;
    waiter_t w = {0};
    uint64_t start;
    size_t held;

    assert_int_equal(tp_connect(f->tp, f->peer_addr, f->peer_addr_len, &ep), ST_OK);
    assert_int_equal(tp_rkey_unpack(ep, f->peer_rkey, f->peer_rkey_len, &rkey), ST_OK);
    memset(f->local, 0, N * SLOT);
    for (int i = 0; i < N; i++) {
        assert_int_equal(tp_get(ep, f->local + (size_t)i * SLOT, SLOT, f->local_mem,
                                f->remote_base + (uint64_t)i * 4096, rkey, on_done, &w),
                         ST_OK);
    }
    tp_ep_abort(ep); /* destroys rkey too */
    assert_int_equal(w.done, N);
    held = tp_orphaned(f->tp);
    start = lg_now_ms();
    while (tp_orphaned(f->tp) > 0 && lg_now_ms() - start < 5000) {
        assert_true(tp_progress(f->tp) >= 0);
    }
    fprintf(stderr, "abort: %zu of %d gets held by the library at the abort, %zu after %llu ms\n",
            held, N, tp_orphaned(f->tp), (unsigned long long)(lg_now_ms() - start));
    memset(f->local, 0xa5, N * SLOT);
    start = lg_now_ms();
    while (lg_now_ms() - start < 200) {
        assert_true(tp_progress(f->tp) >= 0);
    }
    for (size_t i = 0; i < (size_t)N * SLOT; i++) {
        if (f->local[i] != 0xa5) {
            fail_msg("byte %zu of the local buffer was written after the abort settled", i);
        }
    }
    assert_int_equal(w.done, N);
}

/* The target's own memory, registered (not allocated by the transport):
 * a get of its pattern, then a put and the target's checksum of it. */
static void test_user_region(void **state)
{
    fixture_t *f = *state;
    tp_rkey_t *rkey;
    waiter_t w = {0};
    uint8_t *want = malloc(USER_BYTES);
    assert_non_null(want);
    fill_pattern(want, USER_BYTES, USER_SEED);
    assert_int_equal(tp_rkey_unpack(f->ep, f->user_rkey, f->user_rkey_len, &rkey), ST_OK);
    memset(f->local, 0, USER_BYTES);
    assert_int_equal(
        tp_get(f->ep, f->local, USER_BYTES, f->local_mem, f->user_base, rkey, on_done, &w), ST_OK);
    wait_for(f->tp, &w, 1, 0);
    assert_int_equal(w.failed, 0);
    assert_memory_equal(f->local, want, USER_BYTES);

    fill_pattern(f->local, 4099, 4242);
    assert_int_equal(
        tp_put(f->ep, f->local, 4099, f->local_mem, f->user_base + 77, rkey, on_done, &w), ST_OK);
    assert_int_equal(tp_ep_flush(f->ep, HANG_GUARD_MS), ST_OK);
    assert_int_equal(w.failed, 0);
    cmd_t c = {.cmd = CMD_SUM_USER, .off = 77, .len = 4099};
    uint64_t sum = 0;
    assert_int_equal(fio_write_full(f->sock, &c, sizeof(c)), 0);
    assert_int_equal(fio_read_full(f->sock, &sum, sizeof(sum)), 0);
    assert_true(sum == XXH3_64bits(f->local, 4099));
    /* This region ends where it ends, whatever else the peer registered. */
    assert_int_equal(
        tp_get(f->ep, f->local, 2, f->local_mem, f->user_base + USER_BYTES - 1, rkey, on_done, &w),
        ST_ERR_INVALID);
    tp_rkey_destroy(rkey);
    free(want);
}

/* Asks the target for a checksum (cmd) of [off, off + len) of one of its regions. */
static uint64_t target_sum(fixture_t *f, uint32_t cmd, uint64_t off, uint64_t len)
{
    cmd_t c = {.cmd = cmd, .off = off, .len = len};
    uint64_t sum = 0;
    assert_int_equal(fio_write_full(f->sock, &c, sizeof(c)), 0);
    assert_int_equal(fio_read_full(f->sock, &sum, sizeof(sum)), 0);
    return sum;
}

/*
 * Tries, on a fresh endpoint, a put of len bytes through the packed key
 * [key, +key_len) at remote_addr, and prints what each step said. Returns
 * nothing: the caller asks the target whether its bytes changed.
 */
static void attack_put(fixture_t *f, const char *what, const uint8_t *key, size_t key_len,
                       uint64_t remote_addr, size_t len)
{
    tp_ep_t *ep;
    tp_rkey_t *rkey = NULL;
    waiter_t w = {0};
    st_status_t post, flush = ST_OK;
    const char *completion = "none";

    assert_int_equal(tp_connect(f->tp, f->peer_addr, f->peer_addr_len, &ep), ST_OK);
    st_status_t unpack = tp_rkey_unpack(ep, key, key_len, &rkey);
    if (unpack != ST_OK) {
        printf("access: case=%s unpack=%s\n", what, st_strerror(unpack));
        tp_ep_close(ep);
        return;
    }
    memset(f->local, 0x5a, len);
    post = tp_put(ep, f->local, len, f->local_mem, remote_addr, rkey, on_done, &w);
    if (post == ST_OK) {
        uint64_t start = lg_now_ms();
        while (w.done == 0 && lg_now_ms() - start < ATTACK_WAIT_MS) {
            if (tp_progress(f->tp) == 0) {
                (void)tp_wait(f->tp, 1);
            }
        }
        completion = w.done == 0 ? "none" : w.failed ? st_strerror(w.last) : "ok";
        if (w.done != 0) {
            flush = tp_ep_flush(ep, ATTACK_WAIT_MS);
        }
    }
    printf("access: case=%s post=%s completion=%s flush=%s\n", what, st_strerror(post), completion,
           post == ST_OK && w.done != 0 ? st_strerror(flush) : "-");
    tp_ep_close(ep); /* cancels what is still in flight, destroys rkey */
}

/*
 * What the transport enforces at the target (docs/transport.md, "What each
 * transport enforces"): a put through the key of a region registered for
 * remote read only, and a put through the key of a region the target has
 * deregistered since. Prints what happened; where the transport claims to
 * enforce (tp_enforces_access()), the bytes must not change, and
 * where it does not, they are seen to change in at least one case (so the
 * claim is not stale the other way either). Reads of the read-only region
 * work either way.
 */
static void test_access_enforced(void **state)
{
    fixture_t *f = *state;
    uint8_t *want = malloc(RO_BYTES);
    tp_rkey_t *rkey;
    waiter_t w = {0};
    int enforced = tp_enforces_access(f->tp);

    assert_non_null(want);
    fill_pattern(want, RO_BYTES, RO_SEED);
    assert_int_equal(tp_rkey_unpack(f->ep, f->ro_rkey, f->ro_rkey_len, &rkey), ST_OK);
    memset(f->local, 0, RO_BYTES);
    assert_int_equal(tp_get(f->ep, f->local, RO_BYTES, f->local_mem, f->ro_base, rkey, on_done, &w),
                     ST_OK);
    wait_for(f->tp, &w, 1, 0);
    assert_int_equal(w.failed, 0);
    assert_memory_equal(f->local, want, RO_BYTES);
    tp_rkey_destroy(rkey);

    uint64_t ro_sum = XXH3_64bits(want, RO_BYTES);
    attack_put(f, "read-only key", f->ro_rkey, f->ro_rkey_len, f->ro_base + 4096, 8192);
    int ro_landed = target_sum(f, CMD_SUM_RO, 0, RO_BYTES) != ro_sum;

    fill_pattern(want, RV_BYTES, RV_SEED);
    uint64_t rv_sum = XXH3_64bits(want, RV_BYTES);
    assert_true(target_sum(f, CMD_SUM_RV, 0, RV_BYTES) == rv_sum);
    (void)target_sum(f, CMD_REVOKE, 0, 0); /* answered once deregistered */
    attack_put(f, "deregistered key", f->rv_rkey, f->rv_rkey_len, f->rv_base + 4096, 8192);
    int rv_landed = target_sum(f, CMD_SUM_RV, 0, RV_BYTES) != rv_sum;

    printf("access: backend=%s path=%s enforces_access=%d read_only_put=%s "
           "deregistered_put=%s\n",
           tp_backend_name(g_cfg.backend),
           g_cfg.backend == TP_UCX ? g_cfg.ucx_tls : g_cfg.fabric_provider, enforced,
           ro_landed ? "LANDED" : "refused", rv_landed ? "LANDED" : "refused");
    if (enforced) {
        assert_false(ro_landed);
        assert_false(rv_landed);
    } else {
        assert_true(ro_landed || rv_landed);
    }
    free(want);
}

/* After the target exits, nothing hangs: every accepted operation completes
 * by the time the endpoint is closed. Over TCP the loss is detected and the
 * operations fail. Over shared memory they may succeed: the initiator maps
 * the target's region, and the mapping outlives the target (UCX posix/sysv),
 * so the bytes read are still the region's bytes, which is checked; or they
 * stay in flight until the close cancels them. Runs last: it stops the
 * target. */
static void test_peer_gone(void **state)
{
    fixture_t *f = *state;
    static waiter_t w; /* outlives this frame if the test fails */
    bool over_tcp = (g_cfg.ucx_tls != NULL && strstr(g_cfg.ucx_tls, "tcp") != NULL) ||
                    (g_cfg.fabric_provider != NULL && strstr(g_cfg.fabric_provider, "tcp"));
    stop_target(f);
    memset(&w, 0, sizeof(w));
    memset(f->local, 0, 4 * 65536);
    int accepted = 0;
    for (int i = 0; i < 4; i++) {
        st_status_t st = tp_get(f->ep, f->local + i * 65536, 65536, f->local_mem,
                                f->remote_base + (uint64_t)i * 65536, f->rkey, on_done, &w);
        if (st == ST_OK) {
            accepted++;
        } else {
            assert_true(st == ST_ERR_UNAVAILABLE || st == ST_ERR_TRANSPORT);
        }
    }
    uint64_t start = lg_now_ms();
    while (w.done < accepted && lg_now_ms() - start < PEER_GONE_WAIT_MS) {
        assert_true(tp_progress(f->tp) >= 0);
    }
    tp_ep_close(f->ep);
    f->ep = NULL;
    assert_int_equal(w.done, accepted);
    assert_int_equal(tp_inflight(f->tp), 0);
    if (over_tcp) {
        assert_int_equal(w.failed, accepted);
    }
    if (w.failed == 0 && accepted == 4) {
        assert_memory_equal(f->local, f->pattern, 4 * 65536);
    }
    printf("peer gone: %d accepted, %d failed\n", accepted, w.failed);
}

/* Gets served at once by a copy (tp_get_now): over shared memory
 * the transport-allocated region is mapped here and every one is served, and
 * checked byte by byte; elsewhere they are refused as unsupported (and then
 * posted); out-of-range ones are refused as invalid either way. */
static void test_get_now(void **state)
{
    fixture_t *f = *state;
    uint64_t rng = 0x9e77;
    int served = 0, unsupported = 0;
    bool mapped = g_cfg.backend == TP_UCX && strstr(g_cfg.ucx_tls, "sm") != NULL;

    for (int i = 0; i < 300; i++) {
        rng = splitmix64(rng);
        size_t len = 1 + (size_t)(rng % (1u << 20));
        rng = splitmix64(rng);
        size_t off = (size_t)(rng % (PATTERN_BYTES - len));
        size_t loff = (size_t)(splitmix64(rng) % 4096);
        memset(f->local + loff, 0, len);
        st_status_t st =
            tp_get_now(f->ep, f->local + loff, len, f->local_mem, f->remote_base + off, f->rkey);
        if (st == ST_OK) {
            served++;
            assert_memory_equal(f->local + loff, f->pattern + off, len);
        } else {
            assert_int_equal(st, ST_ERR_UNSUPPORTED);
            unsupported++;
        }
    }
    if (mapped) {
        assert_int_equal(served, 300);
    } else {
        assert_int_equal(unsupported, 300);
    }
    assert_int_equal(tp_inflight(f->tp), 0); /* nothing was posted */
    assert_int_equal(
        tp_get_now(f->ep, f->local, 64, f->local_mem, f->remote_base + REGION_BYTES - 32, f->rkey),
        ST_ERR_INVALID);
    assert_int_equal(tp_get_now(f->ep, f->local, 0, f->local_mem, f->remote_base, f->rkey),
                     ST_ERR_INVALID);
    assert_int_equal(
        tp_get_now(f->ep, f->local + LOCAL_BYTES - 8, 64, f->local_mem, f->remote_base, f->rkey),
        ST_ERR_INVALID);
    printf("get_now: %d served by a copy, %d unsupported\n", served, unsupported);
}

/* Messages: the replies the initiator has seen, by sequence number. */
#define MSG_COUNT 300
#define MSG_MAX   (1u << 20)

typedef struct msg_seen {
    int n;
    int bad;
    uint8_t got[MSG_COUNT + 1];
} msg_seen_t;

static size_t msg_len(uint64_t seq)
{
    uint64_t r = splitmix64(seq * 7919 + 1);
    size_t len = (size_t)1 << (r % 21); /* 1 B .. 1 MiB */
    len += (size_t)(splitmix64(r) % len);
    if (seq == MSG_COUNT) {
        return 4u << 20; /* one message of several megabytes */
    }
    return len < 8 ? 8 : len > MSG_MAX ? MSG_MAX : len;
}

static void msg_fill(uint8_t *buf, uint64_t seq, size_t len)
{
    fill_pattern(buf, len, seq ^ 0x77);
    memcpy(buf, &seq, sizeof(seq));
}

static void on_reply(void *arg, tp_msg_t *msg, const void *data, size_t len)
{
    msg_seen_t *seen = arg;
    const uint8_t *d = data;
    uint64_t seq = 0;
    (void)msg;
    seen->n++;
    if (len < 8) {
        seen->bad++;
        return;
    }
    for (int i = 0; i < 8; i++) {
        seq |= (uint64_t)(uint8_t)~d[i] << (8 * i);
    }
    if (seq > MSG_COUNT || len != msg_len(seq) || seen->got[seq]) {
        seen->bad++;
        return;
    }
    uint8_t *want = malloc(len);
    assert_non_null(want);
    msg_fill(want, seq, len);
    for (size_t i = 0; i < len; i++) {
        unsigned inv = (unsigned)d[i] ^ 0xffu;
        if (inv != (unsigned)want[i]) {
            seen->bad++;
            break;
        }
    }
    free(want);
    seen->got[seq] = 1;
}

/* MSG_COUNT + 1 messages of 8 B to 4 MiB, each answered by the target with
 * its bytes inverted; every answer is checked byte by byte. libfabric has no
 * messages and says so. */
static void test_messages(void **state)
{
    fixture_t *f = *state;
    static msg_seen_t seen; /* outlives this frame if the test fails */
    uint8_t *buf = malloc(4u << 20);
    assert_non_null(buf);
    memset(&seen, 0, sizeof(seen));
    if (g_cfg.backend != TP_UCX) {
        assert_int_equal(tp_msg_listen(f->tp, on_reply, &seen), ST_ERR_UNSUPPORTED);
        assert_int_equal(tp_msg_send(f->ep, "x", 1), ST_ERR_UNSUPPORTED);
        free(buf);
        return;
    }
    assert_int_equal(tp_msg_listen(f->tp, on_reply, &seen), ST_OK);
    assert_int_equal(tp_msg_send(f->ep, buf, 0), ST_ERR_INVALID);
    assert_int_equal(tp_msg_send(f->ep, buf, (size_t)TP_MSG_MAX + 1), ST_ERR_INVALID);
    for (uint64_t seq = 0; seq <= MSG_COUNT; seq++) {
        size_t len = msg_len(seq);
        msg_fill(buf, seq, len);
        assert_int_equal(tp_msg_send(f->ep, buf, len), ST_OK);
        memset(buf, 0, len); /* the transport copied it */
        if (seq % 16 == 0) {
            (void)tp_progress(f->tp);
        }
    }
    uint64_t start = lg_now_ms();
    while (seen.n < MSG_COUNT + 1) {
        assert_true(tp_progress(f->tp) >= 0);
        if (lg_now_ms() - start > HANG_GUARD_MS) {
            fail_msg("only %d of %d replies", seen.n, MSG_COUNT + 1);
        }
    }
    assert_int_equal(seen.bad, 0);
    for (int i = 0; i <= MSG_COUNT; i++) {
        assert_int_equal(seen.got[i], 1);
    }
    assert_int_equal(tp_msg_listen(f->tp, NULL, NULL), ST_OK);
    free(buf);
}

/* --- configuration, without a peer --------------------------------------- */

static void test_parse_backend(void **state)
{
    tp_backend_t b = 0;
    assert_int_equal(tp_parse_backend("ucx", &b), ST_OK);
    assert_int_equal(b, TP_UCX);
    assert_int_equal(tp_parse_backend("LibFabric", &b), ST_OK);
    assert_int_equal(b, TP_FABRIC);
    assert_int_equal(tp_parse_backend("ofi", &b), ST_OK);
    assert_int_equal(tp_parse_backend("verbs", &b), ST_ERR_INVALID);
    assert_int_equal(tp_parse_backend(NULL, &b), ST_ERR_INVALID);
    assert_int_equal(b, TP_FABRIC);
    assert_string_equal(tp_backend_name(TP_UCX), "ucx");
    assert_string_equal(tp_backend_name((tp_backend_t)9), "unknown");
}

static void test_create_refused(void **state)
{
    tp_transport_t *tp = NULL;
    tp_config_t none = {0};
    assert_int_equal(tp_create(&none, &tp), ST_ERR_INVALID);
    assert_int_equal(tp_create(NULL, &tp), ST_ERR_INVALID);
    tp_config_t ucx = {.backend = TP_UCX, .ucx_tls = "no-such-transport"};
    assert_int_equal(tp_create(&ucx, &tp), ST_ERR_UNSUPPORTED);
    tp_config_t fab = {.backend = TP_FABRIC, .fabric_provider = "no-such"};
    assert_int_equal(tp_create(&fab, &tp), ST_ERR_UNSUPPORTED);
    assert_null(tp);
}

/* Regions alone: allocation, registration, bounds, and an address that a
 * transport of the other backend refuses by name. */
static void test_local_objects(void **state)
{
    tp_transport_t *tp, *other;
    tp_mem_t *mem;
    assert_int_equal(tp_create(&g_cfg, &tp), ST_OK);
    assert_int_equal(tp_mem_alloc(tp, 0, &mem), ST_ERR_INVALID);
    assert_int_equal(tp_mem_register(tp, NULL, 64, &mem), ST_ERR_INVALID);
    assert_int_equal(tp_mem_alloc(tp, 3 << 20, &mem), ST_OK);
    assert_int_equal(tp_mem_len(mem), 3 << 20);
    memset(tp_mem_addr(mem), 0x11, 3 << 20); /* writable, all of it */
    tp_mem_deregister(tp, mem);

    tp_config_t cfg = {.backend = g_cfg.backend == TP_UCX ? TP_FABRIC : TP_UCX};
    if (tp_create(&cfg, &other) == ST_OK) {
        const void *addr;
        size_t len;
        tp_ep_t *ep = NULL;
        tp_address(other, &addr, &len);
        assert_int_equal(tp_connect(tp, addr, len, &ep), ST_ERR_INVALID);
        assert_null(ep);
        tp_destroy(other);
    }
    assert_int_equal(tp_inflight(tp), 0);
    tp_destroy(tp); /* with nothing left to close */
}

/* The environment's UCX_TCP_TX_SEG_SIZE and UCX_TCP_RX_SEG_SIZE when main() started. */
static const char *g_env_tx, *g_env_rx;

/* UCX: the tcp segment sizes strata applies (transport/ucx.c,
 * docs/transport.md "UCX settings strata applies") are in the environment
 * once a transport was created, and an operator's own value is left as it
 * was (test_transport_ucx_tcp_env sets UCX_TCP_TX_SEG_SIZE=64K). */
static void test_ucx_defaults(void **state)
{
    if (g_cfg.backend != TP_UCX) {
        skip();
    }
    assert_non_null(getenv("UCX_TCP_TX_SEG_SIZE"));
    assert_non_null(getenv("UCX_TCP_RX_SEG_SIZE"));
    assert_string_equal(getenv("UCX_TCP_TX_SEG_SIZE"), g_env_tx != NULL ? g_env_tx : "256K");
    assert_string_equal(getenv("UCX_TCP_RX_SEG_SIZE"), g_env_rx != NULL ? g_env_rx : "512K");
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s ucx <tls> [peer-failure] | libfabric <provider> [domain]\n",
                argv[0]);
        return 2;
    }
    if (tp_parse_backend(argv[1], &g_cfg.backend) != ST_OK) {
        return 2;
    }
    if (g_cfg.backend == TP_UCX) {
        g_cfg.ucx_tls = argv[2];
        if (argc > 3 && strcmp(argv[3], "peer-failure") == 0) {
            g_cfg.ucx_peer_failure = TP_PEER_FAILURE_ON;
        }
    } else {
        g_cfg.fabric_provider = argv[2];
        g_cfg.fabric_domain = argc > 3 ? argv[3] : NULL;
    }
    signal(SIGPIPE, SIG_IGN);
    g_env_tx = getenv("UCX_TCP_TX_SEG_SIZE") != NULL ? strdup(getenv("UCX_TCP_TX_SEG_SIZE")) : NULL;
    g_env_rx = getenv("UCX_TCP_RX_SEG_SIZE") != NULL ? strdup(getenv("UCX_TCP_RX_SEG_SIZE")) : NULL;

    /* Skip (77) where this backend or provider is not offered here. */
    tp_transport_t *probe;
    st_status_t st = tp_create(&g_cfg, &probe);
    if (st == ST_ERR_UNSUPPORTED) {
        printf("skip: %s %s is not available here\n", argv[1], argv[2]);
        return 77;
    }
    if (st != ST_OK) {
        fprintf(stderr, "cannot create the transport: %s\n", st_strerror(st));
        return 1;
    }
    tp_destroy(probe);

    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_get_pattern),     cmocka_unit_test(test_put_get_roundtrip),
        cmocka_unit_test(test_many_inflight),   cmocka_unit_test(test_row_reads),
        cmocka_unit_test(test_errors),          cmocka_unit_test(test_second_endpoint),
        cmocka_unit_test(test_user_region),     cmocka_unit_test(test_get_now),
        cmocka_unit_test(test_messages),        cmocka_unit_test(test_access_enforced),
        cmocka_unit_test(test_abort_in_flight), cmocka_unit_test(test_peer_gone),
    };
    const struct CMUnitTest local_tests[] = {
        cmocka_unit_test(test_parse_backend),
        cmocka_unit_test(test_create_refused),
        cmocka_unit_test(test_local_objects),
        cmocka_unit_test(test_ucx_defaults),
    };
    int failed = cmocka_run_group_tests(local_tests, NULL, NULL);
    return failed + cmocka_run_group_tests(tests, group_setup, group_teardown);
}
