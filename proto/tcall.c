/*
 * tcall.c - encoding and parsing of the frames of calls over the transport.
 */
#include "tcall.h"

#include <stdio.h>
#include <string.h>

static void tc_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

static uint32_t tc_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

const char *st_tcall_path(uint32_t method)
{
    switch (method) {
    case ST_TCALL_LOCATE: return "/strata.v1.Cache/Locate";
    case ST_TCALL_RELEASE: return "/strata.v1.Cache/Release";
    case ST_TCALL_LOOKUP: return "/strata.v1.Cache/Lookup";
    default: return NULL;
    }
}

size_t st_tcall_head(uint8_t *out, int resp, uint32_t method_or_code, uint64_t id, const char *text,
                     size_t text_len)
{
    size_t max = resp ? ST_TCALL_MSG_MAX : ST_TCALL_TOKEN_MAX;

    if (text_len > max) {
        text_len = max;
    }
    tc_put32(out, resp ? ST_TCALL_RESP_MAGIC : ST_TCALL_REQ_MAGIC);
    tc_put32(out + 4, method_or_code);
    tc_put32(out + 8, (uint32_t)id);
    tc_put32(out + 12, (uint32_t)(id >> 32));
    tc_put32(out + 16, (uint32_t)text_len);
    tc_put32(out + 20, 0);
    if (text_len > 0) {
        memcpy(out + ST_TCALL_HDR, text, text_len);
    }
    return ST_TCALL_HDR + text_len;
}

st_status_t st_tcall_parse(const void *buf, size_t len, int resp, st_tcall_frame_t *f, char *why,
                           size_t why_cap)
{
    const uint8_t *p = buf;
    uint32_t magic = resp ? ST_TCALL_RESP_MAGIC : ST_TCALL_REQ_MAGIC, v, text_len;
    size_t max = resp ? ST_TCALL_MSG_MAX : ST_TCALL_TOKEN_MAX;

    memset(f, 0, sizeof(*f));
    if (len < ST_TCALL_HDR) {
        snprintf(why, why_cap, "frame of %zu bytes is shorter than its %u-byte header", len,
                 ST_TCALL_HDR);
        return ST_ERR_INVALID;
    }
    f->id = (uint64_t)tc_get32(p + 8) | (uint64_t)tc_get32(p + 12) << 32;
    if (tc_get32(p) != magic) {
        snprintf(why, why_cap, "bad magic 0x%08x (want 0x%08x)", tc_get32(p), magic);
        return ST_ERR_INVALID;
    }
    v = tc_get32(p + 4);
    text_len = tc_get32(p + 16);
    if ((text_len >> 16) != 0 || tc_get32(p + 20) != 0) {
        snprintf(why, why_cap, "reserved header bytes are not zero");
        return ST_ERR_INVALID;
    }
    if (text_len > max || text_len > len - ST_TCALL_HDR) {
        snprintf(why, why_cap, "%s of %u bytes (at most %zu, %zu left in the frame)",
                 resp ? "message" : "token", text_len, max, len - ST_TCALL_HDR);
        return ST_ERR_INVALID;
    }
    if (resp) {
        if (v > 16) {
            snprintf(why, why_cap, "status code %u is not a gRPC code", v);
            return ST_ERR_INVALID;
        }
        f->code = v;
    } else {
        if (st_tcall_path(v) == NULL) {
            snprintf(why, why_cap, "method %u is not served over the transport", v);
            return ST_ERR_INVALID;
        }
        f->method = v;
    }
    f->text = (const char *)p + ST_TCALL_HDR;
    f->text_len = text_len;
    f->body = p + ST_TCALL_HDR + text_len;
    f->body_len = len - ST_TCALL_HDR - text_len;
    if (resp && f->code != 0 && f->body_len != 0) {
        snprintf(why, why_cap, "an error response carries %zu bytes of message", f->body_len);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}
