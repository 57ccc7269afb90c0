/*
 * kinds.h - the one mapping between the API's object kinds and statuses and
 * the wire's ObjectKind and KeyStatus (strata.proto), for the client and the
 * daemon alike.
 *
 * ST_KIND_* (strata/strata.h) and the daemon's CD_KIND_* have the same
 * values. Every function is pure and thread-safe.
 */
#ifndef STRATA_PROTO_KINDS_H
#define STRATA_PROTO_KINDS_H

#include <stdint.h>

#include "strata.pb-c.h"
#include "strata/status.h"

/* The wire kind of an ST_KIND_* value; KIND_UNSPECIFIED for any other. */
Strata__V1__ObjectKind pk_kind_to_wire(uint8_t kind);

/* The ST_KIND_* value of a wire kind, or -1 when it names none. */
int pk_kind_from_wire(Strata__V1__ObjectKind kind);

/* The status a key's KeyStatus stands for: KEY_OK is ST_OK, KEY_EXPIRED is
 * ST_ERR_TIMEOUT, KEY_INVALID and unknown values ST_ERR_INVALID. */
st_status_t pk_key_status_to_status(Strata__V1__KeyStatus ks);

/* The KeyStatus that reports status for one key (ST_ERR_NOMEM as
 * KEY_EXHAUSTED; statuses without a KeyStatus of their own as KEY_INVALID). */
Strata__V1__KeyStatus pk_status_to_key_status(st_status_t status);

#endif /* STRATA_PROTO_KINDS_H */
