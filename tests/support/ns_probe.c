/* ns_probe.c - see ns_probe.h. */
#include "ns_probe.h"

#include <stdio.h>
#include <string.h>

size_t np_ns_only(uint64_t ns, uint8_t *buf)
{
    size_t n = 0;

    buf[n++] = 0x08;
    do {
        buf[n++] = (uint8_t)((ns & 0x7f) | (ns >= 0x80 ? 0x80 : 0));
        ns >>= 7;
    } while (ns != 0);
    return n;
}

void np_shape(char *s, uint64_t n)
{
    char num[32], *p;

    snprintf(num, sizeof(num), "%llu", (unsigned long long)n);
    while ((p = strstr(s, num)) != NULL) {
        *p = 'N';
        memmove(p + 1, p + strlen(num), strlen(p + strlen(num)) + 1);
    }
}
