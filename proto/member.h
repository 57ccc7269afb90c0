/*
 * member.h - the member record that every daemon keeps in etcd under
 * <etcd_prefix>members/<name> (docs/membership.md "The member record"), and
 * its one parser, shared by the daemon's watch and libstrata's.
 *
 * The record is text, one "key=value" a line (UTF-8 not needed: printable
 * ASCII only), in any order:
 *
 *   v=1                       format version (required; other versions refused)
 *   name=<name>               = the key's last part (required)
 *   grpc=<host:port>          the control plane; also the node's name on the ring (required)
 *   transport=<backend>       the data plane's backend ("ucx", "fabric"; may be empty:
 *                             its endpoint itself travels in Hello)
 *   metrics=<host:port>       the metrics server ("" when off)
 *   state=joining|serving|draining   (required)
 *
 * Unknown keys are skipped (a newer writer may add some); a duplicate key,
 * a line without '=', a value over MR_MAX_FIELD - 1 bytes, a byte outside
 * printable ASCII, a missing required key or a name that is not the key's
 * make the record malformed: it is ignored (and logged) by its readers.
 */
#ifndef STRATA_PROTO_MEMBER_H
#define STRATA_PROTO_MEMBER_H

#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

#define MR_MAX_FIELD  128  /* bytes of a value, NUL included */
#define MR_MAX_RECORD 1024 /* bytes of a whole record */
#define MR_VERSION    1

typedef enum mr_state {
    MR_JOINING = 0,  /* registered, not yet serving: not on the ring */
    MR_SERVING = 1,  /* on the ring */
    MR_DRAINING = 2, /* handing its durable objects over: off the ring, registered until done */
    MR_N_STATES = 3
} mr_state_t;

typedef struct mr_member {
    char name[MR_MAX_FIELD];
    char grpc[MR_MAX_FIELD];
    char transport[MR_MAX_FIELD];
    char metrics[MR_MAX_FIELD];
    mr_state_t state;
    int64_t mod_revision; /* etcd's revision of the record's last change (set by the reader) */
} mr_member_t;

/* "joining", "serving", "draining" ("?" out of range). */
const char *mr_state_name(mr_state_t state);

/* Parses a state name; ST_ERR_INVALID for anything else. */
st_status_t mr_state_parse(const char *name, mr_state_t *state_p);

/*
 * Parses the record rec[0..len) stored under the member name key_name (the
 * part of the key after "<prefix>members/") into *m (mod_revision 0).
 * Returns ST_OK; ST_ERR_INVALID when malformed, with why[0..why_cap) naming
 * what is wrong (may be NULL). *m is written only on success.
 */
st_status_t mr_parse(const char *key_name, const uint8_t *rec, size_t len, mr_member_t *m,
                     char *why, size_t why_cap);

/*
 * Writes m's record into buf[0..cap), NUL-terminated. Returns its length;
 * 0 when it does not fit or a field is not printable ASCII (no '\n').
 */
size_t mr_format(const mr_member_t *m, char *buf, size_t cap);

/* Whether a member in this state is on the ring: serving only (a joining
 * member is not there yet, a draining one no longer). */
int mr_on_ring(mr_state_t state);

#endif /* STRATA_PROTO_MEMBER_H */
