/*
 * status.c - names of st_status_t codes and their mapping to gRPC codes.
 */
#include "strata/status.h"

#include <stddef.h>

#include <grpc/status.h>

struct status_info {
    const char *name;
    const char *text;
    int grpc;
};

/* Indexed by -status. */
static const struct status_info status_table[] = {
    {"ST_OK", "success", GRPC_STATUS_OK},
    {"ST_ERR_INVALID", "invalid argument", GRPC_STATUS_INVALID_ARGUMENT},
    {"ST_ERR_NOMEM", "out of memory", GRPC_STATUS_RESOURCE_EXHAUSTED},
    {"ST_ERR_NOT_FOUND", "not found", GRPC_STATUS_NOT_FOUND},
    {"ST_ERR_EXISTS", "already exists", GRPC_STATUS_ALREADY_EXISTS},
    {"ST_ERR_EXHAUSTED", "resource exhausted", GRPC_STATUS_RESOURCE_EXHAUSTED},
    {"ST_ERR_IO", "input/output error", GRPC_STATUS_INTERNAL},
    {"ST_ERR_UNAVAILABLE", "unavailable", GRPC_STATUS_UNAVAILABLE},
    {"ST_ERR_TIMEOUT", "deadline exceeded", GRPC_STATUS_DEADLINE_EXCEEDED},
    {"ST_ERR_CORRUPT", "checksum or generation mismatch", GRPC_STATUS_DATA_LOSS},
    {"ST_ERR_PERMISSION", "permission denied", GRPC_STATUS_PERMISSION_DENIED},
    {"ST_ERR_PROTOCOL", "protocol error", GRPC_STATUS_INTERNAL},
    {"ST_ERR_TRANSPORT", "transport error", GRPC_STATUS_UNAVAILABLE},
    {"ST_ERR_BUSY", "object is busy (leased or pinned)", GRPC_STATUS_FAILED_PRECONDITION},
    {"ST_ERR_UNSUPPORTED", "not supported", GRPC_STATUS_UNIMPLEMENTED},
    {"ST_ERR_CANCELLED", "cancelled", GRPC_STATUS_CANCELLED},
    {"ST_ERR_INTERNAL", "internal error", GRPC_STATUS_INTERNAL},
    {"ST_ERR_UNAUTHENTICATED", "unauthenticated", GRPC_STATUS_UNAUTHENTICATED},
    /* Decided by the client from its replicas' answers; a daemon never sends it. Were it
     * sent, UNAVAILABLE is the closest code (some replicas could not take the write). */
    {"ST_ERR_PARTIAL", "written to fewer replicas than asked", GRPC_STATUS_UNAVAILABLE},
    /* Admission control: the node has too much work queued. On the wire it is
     * RESOURCE_EXHAUSTED with the trailing metadata strata-retry-after-ms; the client maps
     * it back to ST_ERR_OVERLOADED only when that hint is present. */
    {"ST_ERR_OVERLOADED", "the node refused the call: too much work queued; retry after the hint",
     GRPC_STATUS_RESOURCE_EXHAUSTED},
};

#define STATUS_COUNT (sizeof(status_table) / sizeof(status_table[0]))

static const struct status_info *status_lookup(st_status_t status)
{
    int idx = -(int)status;

    if (idx < 0 || (unsigned)idx >= STATUS_COUNT) {
        return NULL;
    }
    return &status_table[idx];
}

const char *st_strerror(st_status_t status)
{
    const struct status_info *info = status_lookup(status);

    return info ? info->text : "unknown status";
}

const char *st_status_name(st_status_t status)
{
    const struct status_info *info = status_lookup(status);

    return info ? info->name : "ST_ERR_UNKNOWN";
}

int st_status_to_grpc(st_status_t status)
{
    const struct status_info *info = status_lookup(status);

    return info ? info->grpc : GRPC_STATUS_UNKNOWN;
}

st_status_t st_status_from_grpc(int grpc_code)
{
    switch (grpc_code) {
    case GRPC_STATUS_OK: return ST_OK;
    case GRPC_STATUS_CANCELLED: return ST_ERR_CANCELLED;
    case GRPC_STATUS_INVALID_ARGUMENT: return ST_ERR_INVALID;
    case GRPC_STATUS_OUT_OF_RANGE: return ST_ERR_INVALID;
    case GRPC_STATUS_DEADLINE_EXCEEDED: return ST_ERR_TIMEOUT;
    case GRPC_STATUS_NOT_FOUND: return ST_ERR_NOT_FOUND;
    case GRPC_STATUS_ALREADY_EXISTS: return ST_ERR_EXISTS;
    case GRPC_STATUS_PERMISSION_DENIED: return ST_ERR_PERMISSION;
    case GRPC_STATUS_UNAUTHENTICATED: return ST_ERR_UNAUTHENTICATED;
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return ST_ERR_EXHAUSTED;
    case GRPC_STATUS_FAILED_PRECONDITION: return ST_ERR_BUSY;
    case GRPC_STATUS_ABORTED: return ST_ERR_BUSY;
    case GRPC_STATUS_UNIMPLEMENTED: return ST_ERR_UNSUPPORTED;
    case GRPC_STATUS_UNAVAILABLE: return ST_ERR_UNAVAILABLE;
    case GRPC_STATUS_DATA_LOSS: return ST_ERR_CORRUPT;
    default: return ST_ERR_INTERNAL;
    }
}
