/*
 * test_transport.h - what the two files of test_transport share
 * (test_transport.c: the initiator and the tests; test_transport_target.c:
 * the target process it forks): the sizes and seeds of the regions, the
 * commands and the hello the two exchange over their socket.
 */
#ifndef STRATA_TEST_TRANSPORT_H
#define STRATA_TEST_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "transport.h"

#define PATTERN_BYTES     (8u << 20)  /* read-only part: the known pattern */
#define SCRATCH_BYTES     (16u << 20) /* put/get round trips land here */
#define REGION_BYTES      (PATTERN_BYTES + SCRATCH_BYTES)
#define LOCAL_BYTES       (24u << 20)
#define MAX_OP_BYTES      (8u << 20)
#define PATTERN_SEED      0x5eedf00dULL
#define USER_BYTES        (1u << 20) /* the target's own memory, registered */
#define USER_SEED         0xabcdefULL
#define ROW_BYTES         656u /* one DSA latent-KV row */
#define ROW_READS         10000
#define ROW_INFLIGHT      256
#define HANG_GUARD_MS     60000      /* not a speed check: a hung test fails instead of blocking */
#define PEER_GONE_WAIT_MS 1000       /* how long to let a transport notice a dead peer */
#define RO_BYTES          (1u << 20) /* allocated for remote read only */
#define RO_SEED           0x0123456789ULL
#define RV_BYTES          (1u << 20) /* the target's memory, registered, then deregistered */
#define RV_SEED           0x7777ULL
#define ATTACK_WAIT_MS    5000 /* how long a refused put may take to report */

enum {
    CMD_SUM = 1,
    CMD_QUIT = 2,
    CMD_SUM_USER = 3,
    CMD_SUM_RO = 4, /* checksum of the read-only region */
    CMD_SUM_RV = 5, /* checksum of the revocable region's memory */
    CMD_REVOKE = 6  /* deregister the revocable region (its memory stays) */
};

typedef struct cmd {
    uint32_t cmd;
    uint32_t pad;
    uint64_t off;
    uint64_t len;
} cmd_t;

typedef struct hello {
    uint32_t addr_len;
    uint32_t rkey_len;
    uint64_t base;
    uint64_t len;
    uint32_t user_rkey_len;
    uint32_t ro_rkey_len;
    uint64_t user_base;
    uint64_t ro_base;
    uint64_t rv_base;
    uint32_t rv_rkey_len;
    uint32_t pad;
} hello_t;

/* The transport under test (argv). */
extern tp_config_t g_cfg;

/* One step of the splitmix64 generator. */
uint64_t splitmix64(uint64_t x);

/* The deterministic bytes of the target's regions: splitmix64 of seed ^ word. */
void fill_pattern(uint8_t *buf, size_t len, uint64_t seed);

/* The target process: registers its regions, sends the hello over sock,
 * then serves commands and progresses until the socket closes; returns its
 * exit status. */
int target_main(int sock);

#endif
