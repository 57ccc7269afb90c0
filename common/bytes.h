/*
 * bytes.h - little- and big-endian loads and stores of fixed-width integers,
 * for the byte formats of the wire, the SSD tier and the object layouts.
 *
 * p needs no alignment. On a little-endian host the little-endian forms are
 * one memcpy of a constant size (one load or store); elsewhere, and for the
 * big-endian forms, a byte loop.
 * Header-only: any module may include it without linking strata_common.
 */
#ifndef STRATA_BYTES_H
#define STRATA_BYTES_H

#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define CM_BYTES_LE 1
#else
#define CM_BYTES_LE 0
#endif

/* The n (1..8) low bytes of v at p, least significant first. */
static inline void cm_put_le(uint8_t *p, uint64_t v, int n)
{
#if CM_BYTES_LE
    memcpy(p, &v, (size_t)n);
#else
    for (int i = 0; i < n; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
#endif
}

/* The n (1..8) bytes at p, least significant first. */
static inline uint64_t cm_get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;

#if CM_BYTES_LE
    memcpy(&v, p, (size_t)n);
#else
    for (int i = n - 1; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
#endif
    return v;
}

static inline void cm_put_le16(uint8_t *p, uint16_t v)
{
    cm_put_le(p, v, 2);
}

static inline void cm_put_le32(uint8_t *p, uint32_t v)
{
    cm_put_le(p, v, 4);
}

static inline void cm_put_le64(uint8_t *p, uint64_t v)
{
    cm_put_le(p, v, 8);
}

static inline uint32_t cm_get_le32(const uint8_t *p)
{
    return (uint32_t)cm_get_le(p, 4);
}

static inline uint64_t cm_get_le64(const uint8_t *p)
{
    return cm_get_le(p, 8);
}

static inline void cm_put_be64(uint8_t *p, uint64_t v)
{
    for (int i = 7; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static inline uint64_t cm_get_be64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++) {
        v = (v << 8) | p[i];
    }
    return v;
}

#endif
