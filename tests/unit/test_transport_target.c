/*
 * test_transport_target.c - the target process of test_transport (see
 * test_transport.c): it registers the regions the initiator reads and
 * writes, announces them, and answers commands over its socket.
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

uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ULL;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

void fill_pattern(uint8_t *buf, size_t len, uint64_t seed)
{
    for (size_t w = 0; w * 8 < len; w++) {
        uint64_t v = splitmix64(seed ^ w);
        size_t n = len - w * 8 < 8 ? len - w * 8 : 8;
        memcpy(buf + w * 8, &v, n);
    }
}

/* --- the target process ------------------------------------------------- */

/* The target answers every message with its bytes inverted: those whose
 * first byte is even at once, the others after its progress call returned
 * (kept, as the daemon does). */
#define TARGET_KEPT_MAX 4096
static tp_msg_t *g_kept[TARGET_KEPT_MAX];
static const void *g_kept_data[TARGET_KEPT_MAX];
static size_t g_kept_len[TARGET_KEPT_MAX], g_n_kept;

static void target_on_msg(void *arg, tp_msg_t *msg, const void *data, size_t len)
{
    uint8_t *out;
    (void)arg;
    if ((((const uint8_t *)data)[0] & 1) && g_n_kept < TARGET_KEPT_MAX) {
        tp_msg_keep(msg);
        g_kept[g_n_kept] = msg;
        g_kept_data[g_n_kept] = data;
        g_kept_len[g_n_kept++] = len;
        return;
    }
    out = malloc(len);
    if (out == NULL) {
        return;
    }
    for (size_t i = 0; i < len; i++) {
        out[i] = (uint8_t) ~((const uint8_t *)data)[i];
    }
    (void)tp_msg_reply(msg, out, len);
    free(out);
}

int target_main(int sock)
{
    tp_transport_t *tp;
    if (tp_create(&g_cfg, &tp) != ST_OK) {
        return 2;
    }
    /* The main region is allocated by the transport (the daemon's arenas);
     * a second one is the process's own memory, registered. */
    tp_mem_t *mem, *user_mem;
    if (tp_mem_alloc(tp, REGION_BYTES, &mem) != ST_OK || tp_mem_len(mem) != REGION_BYTES) {
        return 4;
    }
    uint8_t *region = tp_mem_addr(mem);
    fill_pattern(region, PATTERN_BYTES, PATTERN_SEED);
    memset(region + PATTERN_BYTES, 0, SCRATCH_BYTES);
    uint8_t *user = malloc(USER_BYTES);
    if (user == NULL) {
        return 3;
    }
    fill_pattern(user, USER_BYTES, USER_SEED);
    if (tp_mem_register(tp, user, USER_BYTES, &user_mem) != ST_OK) {
        return 4;
    }
    /* For test_access_enforced: a region allocated for remote read only (as
     * committed arena memory), and the process's own memory registered for
     * write, then deregistered on CMD_REVOKE (as a reservation's key). */
    tp_mem_t *ro_mem, *rv_mem;
    uint8_t *rv = malloc(RV_BYTES);
    if (rv == NULL || tp_mem_map(tp, NULL, RO_BYTES, TP_REMOTE_READ, &ro_mem) != ST_OK ||
        tp_mem_map(tp, rv, RV_BYTES, TP_REMOTE_RW, &rv_mem) != ST_OK) {
        return 4;
    }
    uint8_t *ro = tp_mem_addr(ro_mem);
    fill_pattern(ro, RO_BYTES, RO_SEED);
    fill_pattern(rv, RV_BYTES, RV_SEED);
    const void *addr, *rkey, *user_rkey, *ro_rkey, *rv_rkey;
    size_t addr_len, rkey_len, user_rkey_len, ro_rkey_len, rv_rkey_len;
    tp_address(tp, &addr, &addr_len);
    tp_mem_rkey(mem, &rkey, &rkey_len);
    tp_mem_rkey(user_mem, &user_rkey, &user_rkey_len);
    tp_mem_rkey(ro_mem, &ro_rkey, &ro_rkey_len);
    tp_mem_rkey(rv_mem, &rv_rkey, &rv_rkey_len);
    hello_t h = {.addr_len = (uint32_t)addr_len,
                 .rkey_len = (uint32_t)rkey_len,
                 .base = (uint64_t)(uintptr_t)region,
                 .len = REGION_BYTES,
                 .user_rkey_len = (uint32_t)user_rkey_len,
                 .user_base = (uint64_t)(uintptr_t)user,
                 .ro_rkey_len = (uint32_t)ro_rkey_len,
                 .ro_base = (uint64_t)(uintptr_t)ro,
                 .rv_rkey_len = (uint32_t)rv_rkey_len,
                 .rv_base = (uint64_t)(uintptr_t)rv};
    if (fio_write_full(sock, &h, sizeof(h)) != 0 || fio_write_full(sock, addr, addr_len) != 0 ||
        fio_write_full(sock, rkey, rkey_len) != 0 ||
        fio_write_full(sock, user_rkey, user_rkey_len) ||
        fio_write_full(sock, ro_rkey, ro_rkey_len) || fio_write_full(sock, rv_rkey, rv_rkey_len)) {
        return 5;
    }

    /* Serve: keep the transport progressing (TCP needs the target's CPU)
     * and answer messages, and checksum requests on the socket. */
    (void)tp_msg_listen(tp, target_on_msg, NULL);
    int efd = -1;
    (void)tp_event_fd(tp, &efd);
    for (;;) {
        while (tp_progress(tp) > 0) {
        }
        for (size_t i = 0; i < g_n_kept; i++) {
            uint8_t *out = malloc(g_kept_len[i]);
            for (size_t j = 0; out != NULL && j < g_kept_len[i]; j++) {
                out[j] = (uint8_t) ~((const uint8_t *)g_kept_data[i])[j];
            }
            if (out != NULL) {
                (void)tp_msg_reply(g_kept[i], out, g_kept_len[i]);
            }
            free(out);
            tp_msg_free(g_kept[i]);
        }
        g_n_kept = 0;
        struct pollfd pfd[2] = {{.fd = sock, .events = POLLIN}, {.fd = efd, .events = POLLIN}};
        int nfds = 1, timeout = 0;
        if (efd >= 0 && tp_arm(tp) == ST_OK) {
            nfds = 2;
            timeout = 1; /* bounded: some providers need polling to serve peers */
        }
        int n = poll(pfd, (nfds_t)nfds, timeout);
        if (n <= 0 || (pfd[0].revents & (POLLIN | POLLHUP)) == 0) {
            continue;
        }
        cmd_t c;
        if (fio_read_full(sock, &c, sizeof(c)) != 0) {
            break; /* the initiator went away */
        }
        if (c.cmd == CMD_QUIT) {
            break;
        }
        uint64_t sum = 0;
        if (c.cmd == CMD_SUM && c.off <= REGION_BYTES && c.len <= REGION_BYTES - c.off) {
            sum = XXH3_64bits(region + c.off, c.len);
        } else if (c.cmd == CMD_SUM_USER && c.off <= USER_BYTES && c.len <= USER_BYTES - c.off) {
            sum = XXH3_64bits(user + c.off, c.len);
        } else if (c.cmd == CMD_SUM_RO && c.off <= RO_BYTES && c.len <= RO_BYTES - c.off) {
            sum = XXH3_64bits(ro + c.off, c.len);
        } else if (c.cmd == CMD_SUM_RV && c.off <= RV_BYTES && c.len <= RV_BYTES - c.off) {
            sum = XXH3_64bits(rv + c.off, c.len);
        } else if (c.cmd == CMD_REVOKE && rv_mem != NULL) {
            tp_mem_deregister(tp, rv_mem);
            rv_mem = NULL;
        }
        if (fio_write_full(sock, &sum, sizeof(sum)) != 0) {
            break;
        }
    }
    tp_destroy(tp); /* deregisters, and frees the allocated region */
    free(user);
    free(rv);
    return 0;
}
