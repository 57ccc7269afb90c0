/*
 * ssd_format.c - the bytes on disk: the key layout, the value header and the
 * usage record. docs/tiers.md is the specification.
 *
 * Key (27 bytes): ns u64 BE | id 16 B | kind u8 | layer u16 BE.
 * Header (48 bytes, little-endian):
 *   0 magic u32 "STSV" | 4 version u8 | 5 kind u8 | 6 flags u16 |
 *   8 length u64 | 16 checksum u64 (XXH3-64 of the payload) | 24 seq u64 |
 *   32 created_us u64 | 40 check u32 (low half of XXH3-64 of key || bytes
 *   0..40) | 44 reserved u32 (0)
 */
#include <string.h>

#include <xxhash.h>

#include "bytes.h"
#include "ssd_internal.h"

void ssd_key_encode(const ssd_key_t *key, uint8_t out[SSD_KEY_BYTES])
{
    cm_put_be64(out, key->ns);
    memcpy(out + 8, key->id.b, ST_HASH_BYTES);
    out[24] = key->kind;
    out[25] = (uint8_t)(key->layer >> 8);
    out[26] = (uint8_t)key->layer;
}

st_status_t ssd_key_decode(const uint8_t in[SSD_KEY_BYTES], ssd_key_t *key)
{
    if (!ssd_kind_valid(in[24])) {
        return ST_ERR_INVALID;
    }
    key->ns = cm_get_be64(in);
    memcpy(key->id.b, in + 8, ST_HASH_BYTES);
    key->kind = in[24];
    key->layer = (uint16_t)(in[25] << 8 | in[26]);
    return ST_OK;
}

const char *ssd_kind_name(unsigned kind)
{
    switch (kind) {
    case SSD_KV: return "KV";
    case SSD_IDX: return "IDX";
    case SSD_KDA: return "KDA";
    case SSD_SESSION: return "SESSION";
    default: return "?";
    }
}

static uint32_t hdr_check(const ssd_key_t *key, const uint8_t *hdr)
{
    uint8_t buf[SSD_KEY_BYTES + 40];

    ssd_key_encode(key, buf);
    memcpy(buf + SSD_KEY_BYTES, hdr, 40);
    return (uint32_t)XXH3_64bits(buf, sizeof(buf));
}

void ssd_hdr_encode(const ssd_key_t *key, const ssd_hdr_t *hdr, uint8_t *out)
{
    cm_put_le32(out, SSD_MAGIC);
    out[4] = SSD_VERSION;
    out[5] = hdr->kind;
    out[6] = (uint8_t)hdr->flags;
    out[7] = (uint8_t)(hdr->flags >> 8);
    cm_put_le64(out + 8, hdr->length);
    cm_put_le64(out + 16, hdr->checksum);
    cm_put_le64(out + 24, hdr->seq);
    cm_put_le64(out + 32, hdr->created_us);
    cm_put_le32(out + 40, hdr_check(key, out));
    cm_put_le32(out + 44, 0);
}

st_status_t ssd_hdr_decode(const ssd_key_t *key, const uint8_t *in, size_t in_len, ssd_hdr_t *hdr)
{
    if (in_len < SSD_HDR_BYTES || cm_get_le32(in) != SSD_MAGIC || in[4] != SSD_VERSION ||
        in[5] != key->kind || cm_get_le32(in + 40) != hdr_check(key, in)) {
        return ST_ERR_CORRUPT;
    }
    hdr->kind = in[5];
    hdr->flags = (uint16_t)(in[6] | in[7] << 8);
    hdr->length = cm_get_le64(in + 8);
    hdr->checksum = cm_get_le64(in + 16);
    hdr->seq = cm_get_le64(in + 24);
    hdr->created_us = cm_get_le64(in + 32);
    return ST_OK;
}

/*
 * Usage record (96 bytes, little-endian): version u64 (1) | seq u64 |
 * objects[1..4] u64 x4 | bytes[1..4] u64 x4 | check u64 (XXH3-64 of 0..88).
 */
void ssd_usage_encode(const ssd_usage_t *u, uint8_t out[SSD_USAGE_BYTES])
{
    cm_put_le64(out, 1);
    cm_put_le64(out + 8, u->seq);
    for (int k = 1; k < SSD_KIND_MAX_; k++) {
        cm_put_le64(out + 16 + 8 * (k - 1), u->objects[k]);
        cm_put_le64(out + 48 + 8 * (k - 1), u->bytes[k]);
    }
    cm_put_le64(out + 80, 0);
    cm_put_le64(out + 88, XXH3_64bits(out, 88));
}

st_status_t ssd_usage_decode(const uint8_t *in, size_t len, ssd_usage_t *u)
{
    if (len != SSD_USAGE_BYTES || cm_get_le64(in) != 1 ||
        cm_get_le64(in + 88) != XXH3_64bits(in, 88)) {
        return ST_ERR_CORRUPT;
    }
    memset(u, 0, sizeof(*u));
    u->seq = cm_get_le64(in + 8);
    for (int k = 1; k < SSD_KIND_MAX_; k++) {
        u->objects[k] = cm_get_le64(in + 16 + 8 * (k - 1));
        u->bytes[k] = cm_get_le64(in + 48 + 8 * (k - 1));
    }
    return ST_OK;
}
