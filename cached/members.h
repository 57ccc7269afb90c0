/*
 * members.h - the cluster's member list as the daemon uses it: the ring over
 * the members, its epoch, and the entry point through which a membership
 * source (the static `peers` setting, reloaded on SIGHUP; etcd, issue #23)
 * hands the daemon a new list. The implementation: daemon_members.c.
 *
 * The daemon holds one view at a time (cd_view_t): the members, the ring over
 * their gRPC addresses (as libstrata builds its ring: a node is named by the
 * address it serves on), this node's place among them and the epoch. A
 * handler takes the current view with cd_view_get() and gives it back with
 * cd_view_put(); cd_members_apply() swaps in a new one while handlers run, and
 * a view is freed when its last holder gives it back.
 *
 * On every change the durable objects this node holds (KDA checkpoints and
 * session records) are moved to their replica sets under the new ring by the
 * rebalancer (rebalance.h), in the background: cd_members_apply() returns at
 * once.
 *
 * Thread safety: every function may be called from any thread once the
 * daemon started; cd_members_apply() calls are serialised by the daemon.
 */
#ifndef STRATA_CACHED_MEMBERS_H
#define STRATA_CACHED_MEMBERS_H

#include <stddef.h>
#include <stdint.h>

#include "ring.h"
#include "strata/status.h"

#define CD_MEMBER_NAME_MAX 255
#define CD_MEMBER_ADDR_MAX 255

struct cd_daemon;

/* A member's state, as registered (etcd) or implied (static: serving). */
typedef enum cd_member_state {
    CD_MEMBER_JOINING = 0,  /* registered, taking its share; not yet serving */
    CD_MEMBER_SERVING = 1,  /* in the ring and serving */
    CD_MEMBER_DRAINING = 2, /* handing its durable objects away; out of the new ring */
} cd_member_state_t;

/* One member of the cluster. Strings are NUL-terminated; metrics may be empty. */
typedef struct cd_member {
    char name[CD_MEMBER_NAME_MAX + 1];      /* node_id */
    char grpc[CD_MEMBER_ADDR_MAX + 1];      /* gRPC host:port: the ring's name of the node */
    char transport[CD_MEMBER_ADDR_MAX + 1]; /* data-plane address (informational) */
    char metrics[CD_MEMBER_ADDR_MAX + 1];   /* metrics host:port, "" none */
    cd_member_state_t state;
} cd_member_t;

/*
 * What a membership source does for the daemon. Static mode's ops are no-ops
 * (cd_membership_static_ops); etcd's write the node's record.
 * set_state(): publish this node's state (a drain sets CD_MEMBER_DRAINING
 * first); *epoch_p is the ring epoch at which the source applies that
 * change (etcd: base + the put's revision), 0 when it does not know one
 * (static mode, or the state could not be published). leave(): deregister
 * (after a drain handed everything away). Both return ST_OK or the
 * source's error (logged by it).
 */
typedef struct cd_membership_ops {
    st_status_t (*set_state)(void *ctx, cd_member_state_t state, uint64_t *epoch_p);
    st_status_t (*leave)(void *ctx);
    void *ctx;
} cd_membership_ops_t;

extern const cd_membership_ops_t cd_membership_static_ops;

/* One version of the member list and the ring over it. Read-only once published. */
typedef struct cd_view {
    cd_member_t *members; /* n, in the order given */
    const char **names;   /* n: members[i].grpc, the ring's node names */
    uint32_t n;
    ring_t ring;    /* valid when n > 0 */
    int self;       /* this node's index, -1 when it is not a member (draining, removed) */
    uint64_t epoch; /* grows with every applied change: the source's (etcd's), or the last
                       one plus one (static peers); 1 for the list at start */
    int refs;       /* holders (the daemon's pointer included); under the daemon's view lock */
} cd_view_t;

/*
 * Builds a view over m[0..n) for the node named self_name or listening on
 * self_addr (either may match a member's name or gRPC address), with vnodes
 * points per member. n may be 0 (a node alone). Returns ST_OK with *view_p
 * (refs 1), ST_ERR_INVALID (a member without a gRPC address, a duplicate
 * address, too many members: logged with the member) or ST_ERR_NOMEM.
 */
st_status_t cd_view_build(const cd_member_t *m, size_t n, const char *self_name,
                          const char *self_addr, uint32_t vnodes, uint64_t epoch,
                          cd_view_t **view_p);

/* The daemon's current view, held until cd_view_put(); never NULL once started. */
cd_view_t *cd_view_get(struct cd_daemon *d);

/* Gives a view back; the last holder frees it. v may be NULL. */
void cd_view_put(struct cd_daemon *d, cd_view_t *v);

/* The index of the member whose gRPC address is addr in v, or -1. */
int cd_view_find(const cd_view_t *v, const char *addr);

/*
 * Makes m[0..n) the cluster's member list: builds the ring over it (members
 * in state CD_MEMBER_DRAINING, and this node while it drains, are left out
 * of the ring: their share goes to the others), swaps it
 * in for the handlers (calls in flight keep the view they took), sets the
 * ring epoch to epoch and wakes the rebalancer, which moves durable objects
 * in the background. epoch 0: the current one plus one (static peers, a
 * drain without a source's epoch). A source's epoch (etcd's, a function of
 * its keys alone, so that every node gives the same one) is taken as it is
 * when above the current one; one not above it with the same ring as the
 * current view (the same state read again, after a lost watch) changes
 * nothing; one not above it with another ring is applied at the current one
 * plus one (logged), so that every applied ring has an epoch of its own and
 * epochs only grow. Serialized with other calls. Returns at once: ST_OK, or
 * as cd_view_build() (the old view stays then).
 */
st_status_t cd_members_apply(struct cd_daemon *d, const cd_member_t *m, size_t n, uint64_t epoch);

/* The current ring epoch (answers carry it, so that a client refreshes its ring). */
uint64_t cd_ring_epoch(struct cd_daemon *d);

/*
 * Installs the membership source's ops (NULL: static mode's no-ops). Before
 * the source applies its first list; the daemon calls them on drain.
 */
void cd_members_set_ops(struct cd_daemon *d, const cd_membership_ops_t *ops);

/* 1 when a membership source other than static mode installed its ops (etcd):
 * then SIGTERM drains before it stops, as `strata drain` does. */
int cd_members_dynamic(struct cd_daemon *d);

/*
 * Parses a static peer list "host:port,host:port" into members (name and
 * gRPC address both the entry, state serving). Returns ST_OK with *m_p (free
 * it) and *n_p; ST_ERR_INVALID (an entry without ':', more than max, a
 * duplicate: logged) or ST_ERR_NOMEM. An empty or NULL list is 0 members.
 */
st_status_t cd_members_parse(const char *peers, size_t max, cd_member_t **m_p, size_t *n_p);

#endif /* STRATA_CACHED_MEMBERS_H */
