/*
 * buf.c - the growable text buffer and the small JSON writer used by the
 * exposition, /stats and the /stats hooks.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

/* Makes room for n more bytes plus a NUL. Returns 0, or -1 with b->err set. */
static int mx_buf_reserve(mx_mbuf_t *b, size_t n)
{
    if (b->err != ST_OK) {
        return -1;
    }
    if (b->len + n + 1 <= b->cap) {
        return 0;
    }
    size_t ncap = b->cap ? b->cap : 4096;
    while (ncap < b->len + n + 1) {
        ncap *= 2;
    }
    char *nd = realloc(b->data, ncap);
    if (nd == NULL) {
        b->err = ST_ERR_NOMEM;
        return -1;
    }
    b->data = nd;
    b->cap = ncap;
    return 0;
}

void mx_mbuf_append(mx_mbuf_t *b, const char *s, size_t n)
{
    if (mx_buf_reserve(b, n) != 0) {
        return;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void mx_mbuf_puts(mx_mbuf_t *b, const char *s)
{
    mx_mbuf_append(b, s, strlen(s));
}

void mx_mbuf_printf(mx_mbuf_t *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof(small), fmt, ap);
    va_end(ap);
    if (n < 0) {
        return;
    }
    if ((size_t)n < sizeof(small)) {
        mx_mbuf_append(b, small, (size_t)n);
        return;
    }
    if (mx_buf_reserve(b, (size_t)n) != 0) {
        return;
    }
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void mx_mbuf_free(mx_mbuf_t *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
    b->err = ST_OK;
}

void mx_format_double(double v, char *buf, size_t size)
{
    if (isnan(v)) {
        snprintf(buf, size, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, size, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    /*
     * The shortest digits that read back as the same double, laid out the way
     * Go's strconv.FormatFloat(v, 'g', -1, 64) does (as Prometheus' own client
     * libraries do), so that le labels match theirs: exponent form when the
     * exponent is below -4 or at least 6, plain decimals otherwise.
     */
    int digits = 17;
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, size, "%.*e", p - 1, v);
        if (strtod(buf, NULL) == v) {
            digits = p;
            break;
        }
    }
    snprintf(buf, size, "%.*e", digits - 1, v);
    const char *e = strchr(buf, 'e');
    int exp10 = e ? atoi(e + 1) : 0;
    if (exp10 < -4 || exp10 >= 6) {
        return;
    }
    int decimals = digits - 1 - exp10;
    snprintf(buf, size, "%.*f", decimals > 0 ? decimals : 0, v);
}

/* ---- JSON ------------------------------------------------------------------- */

void mx_json_init(mx_json_t *j, mx_mbuf_t *out)
{
    memset(j, 0, sizeof(*j));
    j->out = out;
}

/* Writes the comma before a value that is not the first of its container. */
static void mx_json_sep(mx_json_t *j)
{
    if (j->need_comma[j->depth]) {
        mx_mbuf_append(j->out, ",", 1);
    }
    j->need_comma[j->depth] = 1;
}

/* A value after a key: the key already wrote the separator. */
static void mx_json_value_start(mx_json_t *j)
{
    if (j->depth > 0 && j->need_comma[j->depth] == 2) {
        j->need_comma[j->depth] = 1;
        return;
    }
    mx_json_sep(j);
}

static void mx_json_push(mx_json_t *j, const char *open)
{
    mx_json_value_start(j);
    mx_mbuf_puts(j->out, open);
    if (j->depth + 1 < (int)sizeof(j->need_comma)) {
        j->depth++;
        j->need_comma[j->depth] = 0;
    }
}

static void mx_json_pop(mx_json_t *j, const char *close)
{
    mx_mbuf_puts(j->out, close);
    if (j->depth > 0) {
        j->depth--;
    }
}

void mx_json_begin_object(mx_json_t *j)
{
    mx_json_push(j, "{");
}

void mx_json_end_object(mx_json_t *j)
{
    mx_json_pop(j, "}");
}

void mx_json_begin_array(mx_json_t *j)
{
    mx_json_push(j, "[");
}

void mx_json_end_array(mx_json_t *j)
{
    mx_json_pop(j, "]");
}

static void mx_json_escaped(mx_mbuf_t *b, const char *s)
{
    mx_mbuf_append(b, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': mx_mbuf_append(b, "\\\"", 2); break;
        case '\\': mx_mbuf_append(b, "\\\\", 2); break;
        case '\n': mx_mbuf_append(b, "\\n", 2); break;
        case '\r': mx_mbuf_append(b, "\\r", 2); break;
        case '\t': mx_mbuf_append(b, "\\t", 2); break;
        default:
            if (*p < 0x20) {
                mx_mbuf_printf(b, "\\u%04x", *p);
            } else {
                mx_mbuf_append(b, (const char *)p, 1);
            }
        }
    }
    mx_mbuf_append(b, "\"", 1);
}

void mx_json_key(mx_json_t *j, const char *key)
{
    mx_json_sep(j);
    mx_json_escaped(j->out, key);
    mx_mbuf_append(j->out, ":", 1);
    j->need_comma[j->depth] = 2;
}

void mx_json_string(mx_json_t *j, const char *s)
{
    mx_json_value_start(j);
    mx_json_escaped(j->out, s ? s : "");
}

void mx_json_uint(mx_json_t *j, uint64_t v)
{
    mx_json_value_start(j);
    mx_mbuf_printf(j->out, "%llu", (unsigned long long)v);
}

void mx_json_int(mx_json_t *j, int64_t v)
{
    mx_json_value_start(j);
    mx_mbuf_printf(j->out, "%lld", (long long)v);
}

void mx_json_double(mx_json_t *j, double v)
{
    mx_json_value_start(j);
    if (!isfinite(v)) {
        mx_mbuf_puts(j->out, "null");
        return;
    }
    if (v == floor(v) && fabs(v) < 9007199254740992.0) {
        mx_mbuf_printf(j->out, "%.0f", v); /* integral: no exponent, no ".0" */
        return;
    }
    char buf[40];
    mx_format_double(v, buf, sizeof(buf));
    mx_mbuf_puts(j->out, buf);
}

void mx_json_bool(mx_json_t *j, int v)
{
    mx_json_value_start(j);
    mx_mbuf_puts(j->out, v ? "true" : "false");
}

void mx_json_null(mx_json_t *j)
{
    mx_json_value_start(j);
    mx_mbuf_puts(j->out, "null");
}
