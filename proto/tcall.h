/*
 * tcall.h - the frame of a call over the data-plane transport (docs/protocol.md,
 * "Calls over the transport"): a fixed header, then a token or an error
 * message, then the same protobuf message the gRPC call would carry.
 *
 *   request:  magic "SCQ1" | method u32 | call id u64 | token_len u32 | 0 u32
 *             | token | request message
 *   response: magic "SCP1" | gRPC code u32 | call id u64 | msg_len u32 | hint u32
 *             | error message | response message (only with code 0)
 *
 * A response's hint is 0, or with RESOURCE_EXHAUSTED (a call refused for load) the retry
 * hint in milliseconds, 1 to TCALL_HINT_MAX; a request's is 0.
 *
 * Integers are little-endian. Both sides and the fuzz tests use these
 * functions; a frame that does not parse is refused with the reason.
 */
#ifndef STRATA_TCALL_H
#define STRATA_TCALL_H

#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

#define TCALL_HDR            24u
#define TCALL_TOKEN_MAX      1024u
#define TCALL_MSG_MAX        1024u
#define TCALL_REQ_MAGIC      0x31514353u /* "SCQ1" */
#define TCALL_RESP_MAGIC     0x31504353u /* "SCP1" */
#define TCALL_HINT_MAX       60000u      /* ms, as strata-retry-after-ms */
#define TCALL_CODE_EXHAUSTED 8u          /* gRPC RESOURCE_EXHAUSTED */

/* The methods a daemon serves over the transport: short, never blocking. */
typedef enum tcall_method {
    TCALL_LOCATE = 1,
    TCALL_RELEASE = 2,
    TCALL_LOOKUP = 3,
    TCALL_SCORE = 4, /* near-data scoring: bounded by max_hashes blocks a call */
} tcall_method_t;

typedef struct tcall_frame {
    uint32_t method;  /* request: tcall_method_t */
    uint32_t code;    /* response: gRPC status code */
    uint32_t hint_ms; /* response: the retry hint of a refusal for load (0: none) */
    uint64_t id;      /* the caller's call id, echoed */
    const char *text; /* request: token; response: error message (not NUL-terminated) */
    size_t text_len;
    const uint8_t *body; /* the protobuf message */
    size_t body_len;
} tcall_frame_t;

/* The gRPC path of method ("/strata.v1.Cache/Locate"), NULL when unknown. */
const char *tcall_path(uint32_t method);

/*
 * Writes the header and text of a request (resp = 0) or response (resp = 1)
 * into out, which holds TCALL_HDR + text_len bytes; the body follows at
 * out + the returned length. text_len is cut to the maximum.
 */
size_t tcall_head(uint8_t *out, int resp, uint32_t method_or_code, uint64_t id, const char *text,
                  size_t text_len);

/* Sets the retry hint of a response header written by tcall_head() (code
 * RESOURCE_EXHAUSTED; ms is clamped to 1..TCALL_HINT_MAX). */
void tcall_set_hint(uint8_t *out, uint32_t ms);

/*
 * Parses buf[0..len) as a request (resp = 0) or response (resp = 1) into *f
 * (pointers into buf). Returns ST_OK, or ST_ERR_INVALID with the reason in
 * why[0..why_cap) (f->id is set when the header was long enough to hold it).
 */
st_status_t tcall_parse(const void *buf, size_t len, int resp, tcall_frame_t *f, char *why,
                        size_t why_cap);

#endif /* STRATA_TCALL_H */
