/*
 * tier_format.c - the daemon's values in the SSD tier (docs/tiers.md, "In
 * stratad"), little-endian, written and read only here:
 *
 *   object prefix (24 bytes, before a KV, IDX or KDA object's bytes):
 *     0 magic "CDT1", 4 flags (bit 0 a parent; bits 8..31 the row size, 0:
 *     none), 8 the parent hash (zeros without one);
 *   namespace record (SESSION kind, layer CD_TIER_NS_LAYER, id zero):
 *     0 magic "CDN1", 4 block_tokens, 8 tenant length, 12 model length,
 *     16 the tenant's bytes, then the model's;
 *   session record (64 bytes, SESSION kind, the session id):
 *     0 magic "CDS1", 8 head, 24 length, 32 version, 40 ttl_ms,
 *     48 created and 56 updated, milliseconds since 1970;
 *   placement record (40 bytes, SESSION kind, layer CD_TIER_PLACE_LAYER, a
 *   KDA block's hash): 0 magic "CDP1", 4 flags (bit 0 a parent), 8 the
 *   parent hash, 24 the hash the ring places the block by.
 */
#include "tier_internal.h"

#include <string.h>
#include <time.h>

#define T_ROWB_SHIFT  8
#define T_ROWB_MAX    ((1u << 24) - 1)
#define T_OBJ_MAGIC   0x31544443u /* "CDT1" */
#define T_NS_MAGIC    0x314e4443u /* "CDN1" */
#define T_SESS_MAGIC  0x31534443u /* "CDS1" */
#define T_PLACE_MAGIC 0x31504443u /* "CDP1" */

uint64_t cd_tier_unix_ms(void)
{
    return cm_real_ms();
}

void cd_tier_prefix_put(uint8_t *p, const st_hash_t *parent, uint32_t row_bytes)
{
    uint32_t rowb = row_bytes <= T_ROWB_MAX ? row_bytes : 0;

    cm_put_le32(p, T_OBJ_MAGIC);
    cm_put_le32(p + 4, (parent != NULL ? 1u : 0u) | rowb << T_ROWB_SHIFT);
    if (parent != NULL) {
        memcpy(p + 8, parent->b, ST_HASH_BYTES);
    } else {
        memset(p + 8, 0, ST_HASH_BYTES);
    }
}

int cd_tier_prefix_get(const uint8_t *p, int *has_parent_p, st_hash_t *parent_p,
                       uint32_t *row_bytes_p)
{
    uint32_t flags = cm_get_le32(p + 4);

    if (has_parent_p != NULL) {
        *has_parent_p = (int)(flags & 1u);
    }
    if (parent_p != NULL) {
        memcpy(parent_p->b, p + 8, ST_HASH_BYTES);
    }
    if (row_bytes_p != NULL) {
        *row_bytes_p = flags >> T_ROWB_SHIFT;
    }
    return cm_get_le32(p) == T_OBJ_MAGIC ? 0 : -1;
}

size_t cd_tier_ns_encode(uint8_t *buf, const char *tenant, const char *model, uint32_t block_tokens)
{
    size_t tl = strlen(tenant), ml = strlen(model);

    if (tl > CD_NAME_MAX || ml > CD_NAME_MAX) {
        return 0;
    }
    cm_put_le32(buf, T_NS_MAGIC);
    cm_put_le32(buf + 4, block_tokens);
    cm_put_le32(buf + 8, (uint32_t)tl);
    cm_put_le32(buf + 12, (uint32_t)ml);
    memcpy(buf + 16, tenant, tl);
    memcpy(buf + 16 + tl, model, ml);
    return 16 + tl + ml;
}

int cd_tier_ns_decode(const uint8_t *buf, size_t len, char *tenant, char *model,
                      uint32_t *block_tokens_p)
{
    size_t tl, ml;

    if (len < 16 || cm_get_le32(buf) != T_NS_MAGIC) {
        return -1;
    }
    tl = cm_get_le32(buf + 8);
    ml = cm_get_le32(buf + 12);
    if (tl == 0 || ml == 0 || tl > CD_NAME_MAX || ml > CD_NAME_MAX || 16 + tl + ml != len) {
        return -2;
    }
    memcpy(tenant, buf + 16, tl);
    tenant[tl] = '\0';
    memcpy(model, buf + 16 + tl, ml);
    model[ml] = '\0';
    *block_tokens_p = cm_get_le32(buf + 4);
    return 0;
}

void cd_tier_session_encode(uint8_t *buf, const cd_session_t *rec, uint64_t now_unix,
                            uint64_t now_store)
{
    memset(buf, 0, CD_TIER_SESS_BYTES);
    cm_put_le32(buf, T_SESS_MAGIC);
    memcpy(buf + 8, rec->head.b, ST_HASH_BYTES);
    cm_put_le64(buf + 24, rec->length);
    cm_put_le64(buf + 32, rec->version);
    cm_put_le64(buf + 40, rec->ttl_ms);
    cm_put_le64(buf + 48, now_unix - (now_store - rec->created_ms));
    cm_put_le64(buf + 56, now_unix - (now_store - rec->updated_ms));
}

int cd_tier_session_decode(const uint8_t *buf, size_t len, cd_session_t *rec, uint64_t *created_p,
                           uint64_t *updated_p)
{
    if (len != CD_TIER_SESS_BYTES || cm_get_le32(buf) != T_SESS_MAGIC) {
        return -1;
    }
    memcpy(rec->head.b, buf + 8, ST_HASH_BYTES);
    rec->length = cm_get_le64(buf + 24);
    rec->version = cm_get_le64(buf + 32);
    rec->ttl_ms = cm_get_le64(buf + 40);
    *created_p = cm_get_le64(buf + 48);
    *updated_p = cm_get_le64(buf + 56);
    return 0;
}

void cd_tier_place_encode(uint8_t *buf, const st_hash_t *parent, const st_hash_t *placement)
{
    cm_put_le32(buf, T_PLACE_MAGIC);
    cm_put_le32(buf + 4, parent != NULL ? 1u : 0u);
    memset(buf + 8, 0, ST_HASH_BYTES);
    if (parent != NULL) {
        memcpy(buf + 8, parent->b, ST_HASH_BYTES);
    }
    memcpy(buf + 24, placement->b, ST_HASH_BYTES);
}

int cd_tier_place_decode(const uint8_t *buf, size_t len, int *has_parent_p, st_hash_t *parent_p,
                         st_hash_t *placement_p)
{
    if (len != CD_TIER_PLACE_BYTES || cm_get_le32(buf) != T_PLACE_MAGIC) {
        return -1;
    }
    *has_parent_p = (int)(cm_get_le32(buf + 4) & 1u);
    memcpy(parent_p->b, buf + 8, ST_HASH_BYTES);
    memcpy(placement_p->b, buf + 24, ST_HASH_BYTES);
    return 0;
}
