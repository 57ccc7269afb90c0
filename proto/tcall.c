/*
 * tcall.c - encoding and parsing of the frames of calls over the transport.
 */
#include "tcall.h"

#include <stdio.h>
#include <string.h>

#include "bytes.h"

const char *tcall_path(uint32_t method)
{
    switch (method) {
    case TCALL_LOCATE: return "/strata.v1.Cache/Locate";
    case TCALL_RELEASE: return "/strata.v1.Cache/Release";
    case TCALL_LOOKUP: return "/strata.v1.Cache/Lookup";
    case TCALL_SCORE: return "/strata.v1.Cache/Score";
    default: return NULL;
    }
}

size_t tcall_head(uint8_t *out, int resp, uint32_t method_or_code, uint64_t id, const char *text,
                  size_t text_len)
{
    size_t max = resp ? TCALL_MSG_MAX : TCALL_TOKEN_MAX;

    if (text_len > max) {
        text_len = max;
    }
    cm_put_le32(out, resp ? TCALL_RESP_MAGIC : TCALL_REQ_MAGIC);
    cm_put_le32(out + 4, method_or_code);
    cm_put_le32(out + 8, (uint32_t)id);
    cm_put_le32(out + 12, (uint32_t)(id >> 32));
    cm_put_le32(out + 16, (uint32_t)text_len);
    cm_put_le32(out + 20, 0);
    if (text_len > 0) {
        memcpy(out + TCALL_HDR, text, text_len);
    }
    return TCALL_HDR + text_len;
}

void tcall_set_hint(uint8_t *out, uint32_t ms)
{
    cm_put_le32(out + 20, ms < 1 ? 1 : ms > TCALL_HINT_MAX ? TCALL_HINT_MAX : ms);
}

st_status_t tcall_parse(const void *buf, size_t len, int resp, tcall_frame_t *f, char *why,
                        size_t why_cap)
{
    const uint8_t *p = buf;
    uint32_t magic = resp ? TCALL_RESP_MAGIC : TCALL_REQ_MAGIC, v, text_len;
    size_t max = resp ? TCALL_MSG_MAX : TCALL_TOKEN_MAX;

    memset(f, 0, sizeof(*f));
    if (len < TCALL_HDR) {
        snprintf(why, why_cap, "frame of %zu bytes is shorter than its %u-byte header", len,
                 TCALL_HDR);
        return ST_ERR_INVALID;
    }
    f->id = (uint64_t)cm_get_le32(p + 8) | (uint64_t)cm_get_le32(p + 12) << 32;
    if (cm_get_le32(p) != magic) {
        snprintf(why, why_cap, "bad magic 0x%08x (want 0x%08x)", cm_get_le32(p), magic);
        return ST_ERR_INVALID;
    }
    v = cm_get_le32(p + 4);
    text_len = cm_get_le32(p + 16);
    if ((text_len >> 16) != 0 || (!resp && cm_get_le32(p + 20) != 0)) {
        snprintf(why, why_cap, "reserved header bytes are not zero");
        return ST_ERR_INVALID;
    }
    if (text_len > max || text_len > len - TCALL_HDR) {
        snprintf(why, why_cap, "%s of %u bytes (at most %zu, %zu left in the frame)",
                 resp ? "message" : "token", text_len, max, len - TCALL_HDR);
        return ST_ERR_INVALID;
    }
    if (resp) {
        if (v > 16) {
            snprintf(why, why_cap, "status code %u is not a gRPC code", v);
            return ST_ERR_INVALID;
        }
        f->code = v;
        f->hint_ms = cm_get_le32(p + 20);
        if (f->hint_ms != 0 && (v != TCALL_CODE_EXHAUSTED || f->hint_ms > TCALL_HINT_MAX)) {
            snprintf(why, why_cap,
                     "retry hint %u ms with status code %u (a hint is 1 to %u, "
                     "with code %u only)",
                     f->hint_ms, v, TCALL_HINT_MAX, TCALL_CODE_EXHAUSTED);
            f->hint_ms = 0;
            return ST_ERR_INVALID;
        }
    } else {
        if (tcall_path(v) == NULL) {
            snprintf(why, why_cap, "method %u is not served over the transport", v);
            return ST_ERR_INVALID;
        }
        f->method = v;
    }
    f->text = (const char *)p + TCALL_HDR;
    f->text_len = text_len;
    f->body = p + TCALL_HDR + text_len;
    f->body_len = len - TCALL_HDR - text_len;
    if (resp && f->code != 0 && f->body_len != 0) {
        snprintf(why, why_cap, "an error response carries %zu bytes of message", f->body_len);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}
