/*
 * etcd_members.h - the one full read of a cluster's members from etcd
 * (docs/membership.md), used alike by the daemon (cached/daemon_etcd.c, at
 * start and after a lost watch), by libstrata (connect and refresh) and by
 * `strata status`, so that all of them derive the same list and epoch.
 */
#ifndef STRATA_RPC_ETCD_MEMBERS_H
#define STRATA_RPC_ETCD_MEMBERS_H

#include <stddef.h>
#include <stdint.h>

#include "etcd.h"
#include "member.h"

/*
 * The ring epoch's parts as read so far (docs/membership.md "The ring
 * epoch"): a function of etcd's keys under the prefix alone, so that every
 * daemon and client that has seen the same changes, through one full read
 * or through a watch's events from any revision on, holds the same one.
 */
typedef struct srpc_epoch {
    uint64_t rev;  /* the largest revision of a change under members/ (a put, a delete,
                      or the delete recorded under <prefix>epoch) */
    uint64_t base; /* <prefix>epoch_base: 0 until an etcd lost its data (below) */
} srpc_epoch_t;

/* The epoch: base + rev. */
static inline uint64_t srpc_epoch_value(const srpc_epoch_t *ep)
{
    return ep->base + ep->rev;
}

/* What a key under the prefix is to the members. */
typedef enum srpc_members_key {
    SRPC_KEY_OTHER = 0, /* not read: changes nothing */
    SRPC_KEY_MEMBER,    /* <prefix>members/<name> */
    SRPC_KEY_EPOCH,     /* <prefix>epoch: the revision of the last delete under members/ */
    SRPC_KEY_BASE,      /* <prefix>epoch_base */
} srpc_members_key_t;

/*
 * Folds one key's change (a full read's key: deleted 0; a watch's event)
 * into *ep: a member's put or delete raises rev to its mod_revision; a put
 * of <prefix>epoch raises rev to the revision recorded; a put of
 * <prefix>epoch_base sets base. Deletes of those two, and other keys,
 * change nothing. For a member key, its name goes into name[0..cap) (""
 * when it does not fit). Returns what the key is.
 */
srpc_members_key_t srpc_epoch_fold(srpc_epoch_t *ep, const char *prefix,
                                   const Etcdserverpb__EtcdKv *kv, int deleted, char *name,
                                   size_t cap);

typedef struct srpc_members {
    mr_member_t *m; /* n well-formed records, in key order (malloc'd) */
    size_t n;
    size_t malformed; /* records under members/ that did not parse (ignored, logged) */
    srpc_epoch_t ep;  /* the epoch's parts (above) */
    uint64_t epoch;   /* srpc_epoch_value(&ep) */
    int64_t revision; /* the store's revision at the read: watch from revision + 1 */
} srpc_members_t;

/*
 * Reads every key under prefix: the records under <prefix>members/ and the
 * epoch, every key folded with srpc_epoch_fold(): the largest of the
 * records' mod_revisions (malformed ones included) and of the revision
 * recorded under <prefix>epoch (the last delete's), plus the base recorded
 * under <prefix>epoch_base. An etcd that lost its data starts its
 * revisions again at 1: the first daemon that finds the store's revision
 * gone back records its last epoch as the base (cached/daemon_etcd.c), so
 * that epochs only grow.
 * Returns ST_OK with *out filled (free with srpc_members_free()); as
 * srpc_etcd_range_prefix(); ST_ERR_NOMEM.
 */
st_status_t srpc_etcd_members(srpc_etcd_t *e, const char *prefix, int timeout_ms,
                              srpc_members_t *out);

void srpc_members_free(srpc_members_t *mb);

/*
 * The member name of key (the part after <prefix>members/) into
 * name[0..cap); 0 when key is not under it or the name does not fit.
 */
int srpc_members_key_name(const char *prefix, const uint8_t *key, size_t len, char *name,
                          size_t cap);

#endif /* STRATA_RPC_ETCD_MEMBERS_H */
