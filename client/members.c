/*
 * members.c - libstrata's membership on etcd (docs/membership.md): the
 * nodes come from the serving members registered under <prefix>members/,
 * read with the same full read as the daemons' (rpc/etcd_members.c), and
 * are followed while the client runs: a new epoch adds new members to the
 * node table and the ring (ring_rebuild) and takes those that left off it.
 * Nodes are never removed from the table (their index stays valid for
 * calls in flight); a member that comes back takes its old index again.
 */
#include "client_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "etcd_members.h"
#include "log.h"

#define SC_ETCD_CALL_MS 2000

st_status_t sc_members_nodes(st_client_t *c, const char *etcd, const char *prefix, char **list_p)
{
    srpc_members_t mb;
    size_t cap = 1, off = 0, n = 0;
    char *list;
    st_status_t st;

    if (srpc_etcd_open(etcd, &c->etcd) != ST_OK) {
        return sc_error(ST_ERR_INVALID, "bad etcd endpoints '%s' (want http://host:port,...)",
                        etcd);
    }
    c->etcd_prefix = strdup(prefix != NULL && prefix[0] != '\0' ? prefix : "/strata/");
    if (c->etcd_prefix == NULL) {
        return ST_ERR_NOMEM;
    }
    st = srpc_etcd_members(c->etcd, c->etcd_prefix, SC_ETCD_CALL_MS, &mb);
    if (st != ST_OK) {
        return sc_error(st, "cannot read the members from etcd=%s: %s", etcd, st_strerror(st));
    }
    for (size_t i = 0; i < mb.n; i++) {
        cap += strlen(mb.m[i].grpc) + 1;
    }
    list = malloc(cap);
    if (list == NULL) {
        srpc_members_free(&mb);
        return ST_ERR_NOMEM;
    }
    list[0] = '\0';
    for (size_t i = 0; i < mb.n; i++) {
        if (mr_on_ring(mb.m[i].state)) {
            off += (size_t)snprintf(list + off, cap - off, "%s%s", n++ ? "," : "", mb.m[i].grpc);
        }
    }
    __atomic_store_n(&c->ring_epoch, mb.epoch, __ATOMIC_RELEASE);
    c->etcd_read_epoch = mb.epoch;
    srpc_members_free(&mb);
    if (n == 0) {
        free(list);
        return sc_error(ST_ERR_UNAVAILABLE, "etcd=%s lists no serving member under %smembers/",
                        etcd, c->etcd_prefix);
    }
    c->etcd_checked_ms = cm_mono_ms();
    *list_p = list;
    return ST_OK;
}

/* The index of the node serving at addr, or -1. */
static int sc_members_find(const st_client_t *c, const char *addr)
{
    for (uint32_t i = 0; i < c->n_nodes; i++) {
        if (strcmp(c->nodes[i].addr, addr) == 0) {
            return (int)i;
        }
    }
    return -1;
}

/* Appends a node for addr (down until its Hello); its index or -1. */
static int sc_members_add(st_client_t *c, const char *addr)
{
    uint32_t i = c->n_nodes;

    if (i == SC_MAX_NODES) {
        lg_warn("member not used node=%s (at most %d nodes)", addr, SC_MAX_NODES);
        return -1;
    }
    c->nodes[i].addr = strdup(addr);
    if (c->nodes[i].addr == NULL || sc_node_channel_open(c, i) != ST_OK) {
        free(c->nodes[i].addr);
        c->nodes[i].addr = NULL;
        lg_warn("member not used node=%s: %s", addr, st_client_last_error());
        return -1;
    }
    ring_set_up(&c->ring, i, 0); /* the health thread says Hello first */
    return (int)i;
}

/* Makes the serving members of mb the ring: new nodes added, left ones off. */
static void sc_members_apply(st_client_t *c, const srpc_members_t *mb)
{
    const char *names[SC_MAX_NODES];
    uint32_t n = c->n_nodes;
    int serving[SC_MAX_NODES] = {0};

    for (size_t k = 0; k < mb->n; k++) {
        int i;

        if (!mr_on_ring(mb->m[k].state)) {
            continue;
        }
        i = sc_members_find(c, mb->m[k].grpc);
        if (i < 0 && (i = sc_members_add(c, mb->m[k].grpc)) >= 0) {
            n = (uint32_t)i + 1;
            __atomic_store_n(&c->n_nodes, n, __ATOMIC_RELEASE);
            lg_info("member joined node=%s epoch=%llu", mb->m[k].grpc,
                    (unsigned long long)mb->epoch);
        }
        if (i >= 0) {
            serving[i] = 1;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        if (!serving[i] && !c->nodes[i].left) {
            lg_info("member left node=%s epoch=%llu", c->nodes[i].addr,
                    (unsigned long long)mb->epoch);
        } else if (serving[i] && c->nodes[i].left) {
            ring_set_up(&c->ring, i, 0); /* back: Hello first */
        }
        c->nodes[i].left = !serving[i];
        names[i] = serving[i] ? c->nodes[i].addr : NULL;
    }
    if (ring_rebuild(&c->ring, names, n) != ST_OK) {
        lg_warn("ring not rebuilt epoch=%llu (no serving member, or out of memory): the last "
                "ring stays",
                (unsigned long long)mb->epoch);
        return;
    }
    __atomic_add_fetch(&c->view_gen, 1, __ATOMIC_ACQ_REL);
    /* Only up: between a delete and the record of its revision under
     * <prefix>epoch a read gives an older epoch (docs/membership.md). */
    if (mb->epoch > __atomic_load_n(&c->ring_epoch, __ATOMIC_ACQUIRE)) {
        __atomic_store_n(&c->ring_epoch, mb->epoch, __ATOMIC_RELEASE);
    }
}

void sc_members_refresh(st_client_t *c)
{
    uint64_t now = cm_mono_ms();
    srpc_members_t mb;

    if (c->etcd == NULL || now - c->etcd_checked_ms < c->health_interval_ms) {
        return;
    }
    c->etcd_checked_ms = now;
    if (srpc_etcd_members(c->etcd, c->etcd_prefix, SC_ETCD_CALL_MS, &mb) != ST_OK) {
        lg_warn_ratelimited("cannot read the members from etcd=%s: keeping the last ring",
                            srpc_etcd_endpoints(c->etcd));
        return;
    }
    if (mb.epoch != c->etcd_read_epoch) {
        c->etcd_read_epoch = mb.epoch;
        sc_members_apply(c, &mb);
    }
    srpc_members_free(&mb);
}

void sc_members_close(st_client_t *c)
{
    srpc_etcd_close(c->etcd);
    c->etcd = NULL;
    free(c->etcd_prefix);
    c->etcd_prefix = NULL;
}

uint64_t st_client_ring_epoch(const st_client_t *c)
{
    return __atomic_load_n(&c->ring_epoch, __ATOMIC_ACQUIRE);
}
