/*
 * daemon_etcd.h - membership on etcd (docs/membership.md): the node's
 * record under <etcd_prefix>members/<name> with a lease kept alive, a watch
 * on the members that hands the daemon every new list (cd_members_apply,
 * members.h) with etcd's revision of the change as the ring epoch, and the
 * membership ops (set_state, leave) that drain uses.
 *
 * Losing etcd: the node keeps serving with the last ring, retries with
 * backoff (100 ms doubling to 5 s), logs the change once and shows it in
 * strata_etcd_up; when etcd no longer knows its lease it registers again.
 * Static `peers` stays the default: with `etcd` empty nothing here runs.
 */
#ifndef STRATA_CACHED_DAEMON_ETCD_H
#define STRATA_CACHED_DAEMON_ETCD_H

#include "strata/status.h"

struct cd_daemon;

/*
 * Checks the etcd settings before anything starts: peers and etcd are
 * exclusive; the host others reach this node at (advertise, else the listen
 * host) must not be a wildcard; the prefix starts and ends with '/'.
 * ST_OK (also when etcd is off) or ST_ERR_INVALID, logged naming the setting.
 */
st_status_t cd_etcd_check(struct cd_daemon *d);

/*
 * Once the listeners are up (port: the gRPC port bound, which the record
 * carries): registers this node (joining, then serving),
 * reads the members, applies them and starts the thread that keeps the
 * lease and watches. etcd unreachable at start: it retries for etcd_ttl
 * seconds, then fails with ST_ERR_UNAVAILABLE and a log line naming the
 * endpoints (the daemon does not start). ST_OK at once when etcd is off.
 */
st_status_t cd_etcd_start(struct cd_daemon *d, int port);

/*
 * Stops the thread and deregisters (revokes the lease, so that the others
 * drop this node at once) unless the node has left already. Idempotent.
 */
void cd_etcd_stop(struct cd_daemon *d);

/* Frees what cd_etcd_start() set up (after cd_etcd_stop()). */
void cd_etcd_free(struct cd_daemon *d);

#endif /* STRATA_CACHED_DAEMON_ETCD_H */
