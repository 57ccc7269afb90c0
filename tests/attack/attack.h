/*
 * attack.h - what the files of the attack suite share (attack.c: set-up,
 * the gRPC and transport-call cases, the run; attack_rma.c: one-sided
 * transport cases; attack_quota.c: the quota cases): the tenants, the run's
 * state, the helpers the cases call, and the cases kept out of attack.c.
 */
#ifndef STRATA_TEST_ATTACK_H
#define STRATA_TEST_ATTACK_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "srpc.h"
#include "transport.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "tcall_raw.h"
#include "tenants.h"

#define AT_MODEL   "at"
#define AT_TOKEN_A "attack-acme-token-0123456789abcdef"
#define AT_TOKEN_B "attack-beta-token-fedcba9876543210"
#define AT_BLOCKS  8
#define AT_OBJ     4096
#define AT_TIMEOUT 10000
#define AT_MSG     256

/* acme's quotas (the tenants file; beta has none): the quota cases hold
 * acme at them and check that beta is not starved. */
#define AT_A_QUOTAS "memory=16M pins=16 leases=16 namespaces=2"
#define AT_MODELS   "at,n1,n2,n3"
#define AT_BIG      (256 * 1024) /* the quota cases' objects */
#define AT_BIG_N    320          /* 80 MiB of them: more than the daemon's 64 MiB */

/* AT_BROKEN: the case could not make its attack (set-up failed): a failure
 * whether or not the case is an expected one. */
enum { AT_PASS = 0, AT_FAIL = 1, AT_BROKEN = 2, AT_SKIP = 3 };

/* One tenant: its token, libstrata client, raw gRPC channel, raw transport client. */
typedef struct at_tenant {
    const char *name, *token;
    st_client_t *lib;
    srpc_channel_t *ch;
    tr_client_t tr;
    st_hash_t chain[AT_BLOCKS];
    uint8_t data[AT_BLOCKS][AT_OBJ]; /* KV layer 0 of each block */
} at_tenant_t;

/* The run: the daemon, both tenants and their tokens, the transport. */
typedef struct at_state {
    tc_cluster_t cl;
    int metrics_port;
    tt_set_t tenants; /* their tokens, and the daemon's flags for them */
    at_tenant_t a, b;
    const char *stratad;
    char why[AT_MSG];
    char spec[128];       /* libstrata's transport: "ucx" or "libfabric:<provider>" */
    const char *provider; /* libfabric's provider, NULL over UCX */
    tp_config_t tcfg;     /* the raw clients' transport */
} at_state_t;

extern at_state_t A;

/* Records why (printf-style) into A.why and returns verdict; at_fail() for a
 * case that failed (AT_FAIL), at_broken() for one that could not run (AT_BROKEN). */
int at_verdict(int verdict, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
#define at_fail(...)   at_verdict(AT_FAIL, __VA_ARGS__)
#define at_broken(...) at_verdict(AT_BROKEN, __VA_ARGS__)

/* Says why the suite cannot go on, stops the daemon and exits 1. */
void at_die(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

/* Calls method m as tenant t over its channel; returns the gRPC code (0: OK). */
int at_call(at_tenant_t *t, int m, const void *req, ProtobufCMessage **resp, srpc_error_t *err);

/* Frees an answer (NULL: nothing). */
void at_free(ProtobufCMessage *m);

/* The key of KV layer 0 of t's block b. */
Strata__V1__ObjectKey at_key(const at_tenant_t *t, size_t b);

/* The one-sided cases (attack_rma.c). */
int at_cross_tenant_get(void);
int at_committed_write(void);
int at_tcp_client_vanishes(void);

/* The quota cases (attack_quota.c). */
int at_quota_holds(void);
int at_namespaces_quota(void);

#endif
