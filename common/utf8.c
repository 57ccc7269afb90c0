/*
 * utf8.c - the UTF-8 check of utf8.h.
 */
#include "utf8.h"

#include <stddef.h>

long utf8_bad_byte(const char *s, int no_controls)
{
    const unsigned char *p = (const unsigned char *)s;

    while (*p != '\0') {
        unsigned c = *p, min;
        size_t n;

        if (c < 0x80) {
            if (no_controls && (c < 0x20 || c == 0x7f)) {
                return (long)(p - (const unsigned char *)s);
            }
            p++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1, min = 0x80, c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, min = 0x800, c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, min = 0x10000, c &= 0x07;
        } else {
            return (long)(p - (const unsigned char *)s);
        }
        for (size_t i = 1; i <= n; i++) {
            /* A NUL here is not a continuation byte: the loop stops at it. */
            if ((p[i] & 0xc0) != 0x80) {
                return (long)(p - (const unsigned char *)s);
            }
            c = (c << 6) | (p[i] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) {
            return (long)(p - (const unsigned char *)s);
        }
        p += n + 1;
    }
    return -1;
}
