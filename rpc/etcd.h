/*
 * etcd.h - a small etcd v3 client over its gRPC API (proto/etcd.proto) on
 * the gRPC C core that strata already uses: the KV calls on one prefix, a
 * lease and its keep-alive, and a watch. Membership (docs/membership.md)
 * uses it in the daemon (cached/daemon_etcd.c) and in libstrata.
 *
 * Endpoints are "http://host:port" (or bare "host:port"), comma-separated;
 * a call that finds its endpoint unreachable tries the next one once round.
 * TLS to etcd is not supported yet ("https://" is refused with a clear
 * error). Every function is thread-safe; a watch is read by one thread.
 */
#ifndef STRATA_RPC_ETCD_H
#define STRATA_RPC_ETCD_H

#include <stddef.h>
#include <stdint.h>

#include "etcd.pb-c.h"
#include "srpc.h"

#define SRPC_ETCD_MAX_ENDPOINTS 8

typedef struct srpc_etcd srpc_etcd_t;

/*
 * Parses endpoints and opens (lazily connecting) channels to them.
 * Returns ST_OK and sets *e_p; ST_ERR_INVALID (logged, naming the entry) for
 * an empty list, more than SRPC_ETCD_MAX_ENDPOINTS, an https:// or other
 * scheme, an entry without host:port; ST_ERR_NOMEM.
 */
st_status_t srpc_etcd_open(const char *endpoints, srpc_etcd_t **e_p);

/* Closes every channel; no call or watch may be running. NULL: no-op. */
void srpc_etcd_close(srpc_etcd_t *e);

/* The endpoint list as given. */
const char *srpc_etcd_endpoints(const srpc_etcd_t *e);

/*
 * Reads every key under prefix (sorted by key, as etcd returns them).
 * On ST_OK *resp_p is etcd's answer (kvs, header.revision); free it with
 * protobuf_c_message_free_unpacked(&(*resp_p)->base, NULL). Returns as
 * srpc_call() (ST_ERR_UNAVAILABLE: no endpoint answered).
 */
st_status_t srpc_etcd_range_prefix(srpc_etcd_t *e, const char *prefix, int timeout_ms,
                                   Etcdserverpb__EtcdRangeResponse **resp_p);

/* Puts key = value[0..len) under lease (0: none); *revision_p (may be NULL) the put's revision. */
st_status_t srpc_etcd_put(srpc_etcd_t *e, const char *key, const void *value, size_t len,
                          int64_t lease, int timeout_ms, int64_t *revision_p);

/* Deletes key; *revision_p (may be NULL) the revision after it. */
st_status_t srpc_etcd_delete(srpc_etcd_t *e, const char *key, int timeout_ms, int64_t *revision_p);

/*
 * Puts key = value only when key is missing or its value compares less
 * (bytewise) than value, in one transaction: values of equal length that
 * are zero-padded decimals keep the largest number. *put_p (may be NULL) is
 * 1 when it was written.
 */
st_status_t srpc_etcd_put_if_less(srpc_etcd_t *e, const char *key, const char *value,
                                  int timeout_ms, int *put_p);

/* Grants a lease of ttl_s seconds; *lease_p its id. */
st_status_t srpc_etcd_lease_grant(srpc_etcd_t *e, int64_t ttl_s, int timeout_ms, int64_t *lease_p);

/*
 * Renews lease once (a LeaseKeepAlive stream of one request). Returns ST_OK
 * with *ttl_p (may be NULL) the seconds it has again; ST_ERR_NOT_FOUND when
 * etcd no longer knows the lease (expired, revoked: register again); else
 * as srpc_call().
 */
st_status_t srpc_etcd_lease_keepalive(srpc_etcd_t *e, int64_t lease, int timeout_ms,
                                      int64_t *ttl_p);

/* Revokes lease (its keys are deleted at once). */
st_status_t srpc_etcd_lease_revoke(srpc_etcd_t *e, int64_t lease, int timeout_ms);

/* A watch on a prefix. */
typedef struct srpc_etcd_watch srpc_etcd_watch_t;

/*
 * Watches every key under prefix from start_revision (0: from now) on.
 * Returns ST_OK and sets *w_p once etcd has confirmed it (within
 * timeout_ms); as srpc_call() otherwise.
 */
st_status_t srpc_etcd_watch_open(srpc_etcd_t *e, const char *prefix, int64_t start_revision,
                                 int timeout_ms, srpc_etcd_watch_t **w_p);

/*
 * Waits at most timeout_ms for the next batch of events. On ST_OK *resp_p
 * is etcd's answer (events, header.revision; free it with
 * protobuf_c_message_free_unpacked). ST_ERR_TIMEOUT: nothing yet, the watch
 * is still open. Any other status: the watch has ended (etcd down, the
 * watch cancelled, ST_ERR_EXHAUSTED when start_revision was compacted):
 * close it and open a new one from a fresh read.
 */
st_status_t srpc_etcd_watch_next(srpc_etcd_watch_t *w, int timeout_ms,
                                 Etcdserverpb__EtcdWatchResponse **resp_p);

/* Cancels and frees the watch. NULL: no-op. */
void srpc_etcd_watch_close(srpc_etcd_watch_t *w);

#endif /* STRATA_RPC_ETCD_H */
