/*
 * ring_check.c - rings and epochs as the membership tests compare them
 * (ring_check.h).
 */
#include "ring_check.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "grpc_conn.h"

void rc_join_sorted(const char **names, size_t n, char *out, size_t cap)
{
    size_t off = 0;

    for (size_t a = 1; a < n; a++) { /* insertion sort: a handful of names */
        for (size_t b = a; b > 0 && strcmp(names[b - 1], names[b]) > 0; b--) {
            const char *t = names[b];

            names[b] = names[b - 1];
            names[b - 1] = t;
        }
    }
    out[0] = '\0';
    for (size_t k = 0; k < n && off < cap; k++) {
        off += (size_t)snprintf(out + off, cap - off, "%s%s", k ? "," : "", names[k]);
    }
}

uint64_t rc_hello_ring(const char *addr, char *ring, size_t cap)
{
    const char *names[TC_MAX_NODES * 2];
    Strata__V1__HelloResponse *h;
    uint64_t epoch;
    gc_conn_t c;
    size_t n;

    h = gc_hello(&c, addr, "acme", "k3", NULL);
    n = h->n_peers < TC_MAX_NODES * 2 ? h->n_peers : TC_MAX_NODES * 2;
    for (size_t k = 0; k < n; k++) {
        names[k] = h->peers[k]->address;
    }
    rc_join_sorted(names, n, ring, cap);
    epoch = h->ring_epoch;
    protobuf_c_message_free_unpacked(&h->base, NULL);
    gc_close(&c);
    return epoch;
}

void rc_live_ring(const tc_cluster_t *c, const int *live, char *ring, size_t cap)
{
    const char *names[TC_MAX_NODES];
    size_t n = 0;

    for (int i = 0; i < c->n; i++) {
        if (live[i]) {
            names[n++] = c->node[i].addr;
        }
    }
    rc_join_sorted(names, n, ring, cap);
}

void rc_start_etcd_cluster(et_etcd_t *etcd, tc_cluster_t *c, const char *stratad, int n, int ttl_s,
                           int *live)
{
    char extra[128];
    int rc = et_start(etcd, NULL);

    if (rc == 77) {
        printf("SKIP: no etcd-server\n");
        exit(77);
    }
    assert_int_equal(rc, 0);
    snprintf(extra, sizeof(extra), "--etcd-ttl %d", ttl_s);
    assert_int_equal(tc_start_etcd(c, stratad, n, etcd->endpoint, extra), 0);
    for (int i = 0; i < n; i++) {
        live[i] = 1;
    }
}
