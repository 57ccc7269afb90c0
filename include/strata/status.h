/*
 * strata/status.h - the one status type of strata.
 *
 * Every function of the project that can fail returns st_status_t: ST_OK (0) on
 * success, a negative code otherwise. st_strerror() names a code in words;
 * st_status_to_grpc() maps it to the gRPC status code that the control plane
 * sends, and st_status_from_grpc() maps it back on the client side.
 */
#ifndef STRATA_STATUS_H
#define STRATA_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define ST_API __attribute__((visibility("default")))
#else
#define ST_API
#endif

typedef enum st_status {
    ST_OK = 0,
    ST_ERR_INVALID = -1,          /* a parameter or request is malformed */
    ST_ERR_NOMEM = -2,            /* an allocation failed */
    ST_ERR_NOT_FOUND = -3,        /* the object, key or session does not exist */
    ST_ERR_EXISTS = -4,           /* the object already exists */
    ST_ERR_EXHAUSTED = -5,        /* a limit or capacity is reached (memory, map, quota) */
    ST_ERR_IO = -6,               /* a system call or file operation failed */
    ST_ERR_UNAVAILABLE = -7,      /* the peer is down, shutting down or unreachable */
    ST_ERR_TIMEOUT = -8,          /* a deadline passed */
    ST_ERR_CORRUPT = -9,          /* a checksum or generation did not match */
    ST_ERR_PERMISSION = -10,      /* authentication or authorisation failed */
    ST_ERR_PROTOCOL = -11,        /* a peer sent something that breaks the protocol */
    ST_ERR_TRANSPORT = -12,       /* the data-plane transport reported an error */
    ST_ERR_BUSY = -13,            /* the object is leased or pinned */
    ST_ERR_UNSUPPORTED = -14,     /* the operation is not supported in this build or config */
    ST_ERR_CANCELLED = -15,       /* the operation was cancelled */
    ST_ERR_INTERNAL = -16,        /* a bug: an invariant did not hold */
    ST_ERR_UNAUTHENTICATED = -17, /* the call carried no credential, or one nobody holds */
    ST_ERR_PARTIAL = -18,         /* a replicated write reached fewer replicas than asked (the
                                     write quorum W); the call says how many did */
    ST_ERR_OVERLOADED = -19,      /* the node refused the call: too much work queued; retry
                                     after the hint (RESOURCE_EXHAUSTED on the wire, with
                                     strata-retry-after-ms) */
    ST_ERR_LAST_ = -20
} st_status_t;

/*
 * Returns a short static English description of status. Unknown codes give
 * "unknown status". Never returns NULL. Thread-safe.
 */
ST_API const char *st_strerror(st_status_t status);

/* Returns the symbolic name of status ("ST_ERR_NOMEM"). Never NULL. */
ST_API const char *st_status_name(st_status_t status);

/*
 * Maps status to the numeric gRPC status code (grpc_status_code values:
 * 0 OK, 3 INVALID_ARGUMENT, 5 NOT_FOUND, 8 RESOURCE_EXHAUSTED, ...).
 */
ST_API int st_status_to_grpc(st_status_t status);

/* Maps a gRPC status code back to the closest st_status_t. */
ST_API st_status_t st_status_from_grpc(int grpc_code);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_STATUS_H */
