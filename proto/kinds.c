/*
 * kinds.c - object kinds and key statuses between the API and the wire
 * (kinds.h): one table each.
 */
#include "kinds.h"

#include <stddef.h>

#include "strata/strata.h"

static const struct {
    uint8_t kind;
    Strata__V1__ObjectKind wire;
} pk_kinds[] = {
    [ST_KIND_KV] = {ST_KIND_KV, STRATA__V1__OBJECT_KIND__KV},
    [ST_KIND_IDX] = {ST_KIND_IDX, STRATA__V1__OBJECT_KIND__IDX},
    [ST_KIND_KDA] = {ST_KIND_KDA, STRATA__V1__OBJECT_KIND__KDA},
    [ST_KIND_SESSION] = {ST_KIND_SESSION, STRATA__V1__OBJECT_KIND__SESSION},
    [ST_KIND_VIS] = {ST_KIND_VIS, STRATA__V1__OBJECT_KIND__VIS},
};

static const struct {
    st_status_t status;
    Strata__V1__KeyStatus wire;
} pk_key_statuses[] = {
    {ST_OK, STRATA__V1__KEY_STATUS__KEY_OK},
    {ST_ERR_NOT_FOUND, STRATA__V1__KEY_STATUS__KEY_NOT_FOUND},
    {ST_ERR_EXISTS, STRATA__V1__KEY_STATUS__KEY_EXISTS},
    {ST_ERR_EXHAUSTED, STRATA__V1__KEY_STATUS__KEY_EXHAUSTED},
    {ST_ERR_CORRUPT, STRATA__V1__KEY_STATUS__KEY_CORRUPT},
    {ST_ERR_BUSY, STRATA__V1__KEY_STATUS__KEY_BUSY},
    {ST_ERR_TIMEOUT, STRATA__V1__KEY_STATUS__KEY_EXPIRED},
};

#define PK_COUNT(a) (sizeof(a) / sizeof((a)[0]))

Strata__V1__ObjectKind pk_kind_to_wire(uint8_t kind)
{
    /* The table is in ST_KIND_* order. */
    return kind < PK_COUNT(pk_kinds) ? pk_kinds[kind].wire
                                     : STRATA__V1__OBJECT_KIND__KIND_UNSPECIFIED;
}

int pk_kind_from_wire(Strata__V1__ObjectKind kind)
{
    for (size_t i = 0; i < PK_COUNT(pk_kinds); i++) {
        if (pk_kinds[i].wire == kind) {
            return pk_kinds[i].kind;
        }
    }
    return -1;
}

st_status_t pk_key_status_to_status(Strata__V1__KeyStatus ks)
{
    for (size_t i = 0; i < PK_COUNT(pk_key_statuses); i++) {
        if (pk_key_statuses[i].wire == ks) {
            return pk_key_statuses[i].status;
        }
    }
    return ST_ERR_INVALID;
}

Strata__V1__KeyStatus pk_status_to_key_status(st_status_t status)
{
    if (status == ST_ERR_NOMEM) {
        return STRATA__V1__KEY_STATUS__KEY_EXHAUSTED;
    }
    for (size_t i = 0; i < PK_COUNT(pk_key_statuses); i++) {
        if (pk_key_statuses[i].status == status) {
            return pk_key_statuses[i].wire;
        }
    }
    return STRATA__V1__KEY_STATUS__KEY_INVALID;
}
