/*
 * member.c - the member record's format and parser (member.h).
 */
#include "member.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const mr_states[MR_N_STATES] = {"joining", "serving", "draining"};

const char *mr_state_name(mr_state_t state)
{
    return (unsigned)state < MR_N_STATES ? mr_states[state] : "?";
}

st_status_t mr_state_parse(const char *name, mr_state_t *state_p)
{
    for (int i = 0; i < MR_N_STATES; i++) {
        if (strcmp(name, mr_states[i]) == 0) {
            *state_p = (mr_state_t)i;
            return ST_OK;
        }
    }
    return ST_ERR_INVALID;
}

int mr_on_ring(mr_state_t state)
{
    return state == MR_SERVING;
}

static st_status_t mr_bad(char *why, size_t cap, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static st_status_t mr_bad(char *why, size_t cap, const char *fmt, ...)
{
    va_list ap;

    if (why != NULL && cap != 0) {
        va_start(ap, fmt);
        vsnprintf(why, cap, fmt, ap);
        va_end(ap);
    }
    return ST_ERR_INVALID;
}

static int mr_printable(const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e) {
            return 0;
        }
    }
    return 1;
}

enum { MR_K_V, MR_K_NAME, MR_K_GRPC, MR_K_TRANSPORT, MR_K_METRICS, MR_K_STATE, MR_N_KEYS };
static const char *const mr_keys[MR_N_KEYS] = {"v",         "name",    "grpc",
                                               "transport", "metrics", "state"};

/* The field of key k in m, or NULL for those that are not strings. */
static char *mr_field(mr_member_t *m, int k)
{
    switch (k) {
    case MR_K_NAME: return m->name;
    case MR_K_GRPC: return m->grpc;
    case MR_K_TRANSPORT: return m->transport;
    case MR_K_METRICS: return m->metrics;
    default: return NULL;
    }
}

/* Takes one "key=value" line into out; seen marks keys already taken. */
static st_status_t mr_line(const char *line, size_t len, mr_member_t *out, unsigned *seen,
                           char *why, size_t cap)
{
    const char *eq = memchr(line, '=', len);
    size_t klen, vlen;
    char value[MR_MAX_FIELD];
    int k;

    if (eq == NULL) {
        return mr_bad(why, cap, "a line without '=' (%.*s)", (int)(len > 40 ? 40 : len), line);
    }
    klen = (size_t)(eq - line);
    vlen = len - klen - 1;
    for (k = 0; k < MR_N_KEYS; k++) {
        if (strlen(mr_keys[k]) == klen && memcmp(mr_keys[k], line, klen) == 0) {
            break;
        }
    }
    if (k == MR_N_KEYS) {
        return ST_OK; /* a key of a newer writer */
    }
    if (*seen & (1u << k)) {
        return mr_bad(why, cap, "key %s twice", mr_keys[k]);
    }
    *seen |= 1u << k;
    if (vlen >= MR_MAX_FIELD) {
        return mr_bad(why, cap, "value of %s has %zu bytes (max %d)", mr_keys[k], vlen,
                      MR_MAX_FIELD - 1);
    }
    memcpy(value, eq + 1, vlen);
    value[vlen] = '\0';
    if (k == MR_K_V) {
        if (strcmp(value, "1") != 0) {
            return mr_bad(why, cap, "format version %s (this reader knows %d)", value, MR_VERSION);
        }
    } else if (k == MR_K_STATE) {
        if (mr_state_parse(value, &out->state) != ST_OK) {
            return mr_bad(why, cap, "state \"%s\" (want joining, serving or draining)", value);
        }
    } else {
        memcpy(mr_field(out, k), value, vlen + 1);
    }
    return ST_OK;
}

st_status_t mr_parse(const char *key_name, const uint8_t *rec, size_t len, mr_member_t *m,
                     char *why, size_t why_cap)
{
    const unsigned required =
        (1u << MR_K_V) | (1u << MR_K_NAME) | (1u << MR_K_GRPC) | (1u << MR_K_STATE);
    const char *p = (const char *)rec, *end = p + len;
    mr_member_t out;
    unsigned seen = 0;

    if (rec == NULL && len != 0) {
        return mr_bad(why, why_cap, "no record");
    }
    if (len > MR_MAX_RECORD) {
        return mr_bad(why, why_cap, "record of %zu bytes (max %d)", len, MR_MAX_RECORD);
    }
    memset(&out, 0, sizeof(out));
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t l = nl != NULL ? (size_t)(nl - p) : (size_t)(end - p);
        st_status_t st;

        if (!mr_printable(p, l)) {
            return mr_bad(why, why_cap, "a byte outside printable ASCII");
        }
        if (l != 0) {
            st = mr_line(p, l, &out, &seen, why, why_cap);
            if (st != ST_OK) {
                return st;
            }
        }
        p += l + (nl != NULL);
    }
    if ((seen & required) != required) {
        for (int k = 0; k < MR_N_KEYS; k++) {
            if ((required & (1u << k)) && !(seen & (1u << k))) {
                return mr_bad(why, why_cap, "no %s", mr_keys[k]);
            }
        }
    }
    if (out.grpc[0] == '\0' || strchr(out.grpc, ':') == NULL) {
        return mr_bad(why, why_cap, "grpc \"%s\" is not host:port", out.grpc);
    }
    if (key_name == NULL || strcmp(out.name, key_name) != 0) {
        return mr_bad(why, why_cap, "name \"%s\" is not the key's \"%s\"", out.name,
                      key_name != NULL ? key_name : "");
    }
    *m = out;
    return ST_OK;
}

size_t mr_format(const mr_member_t *m, char *buf, size_t cap)
{
    const char *fields[4] = {m->name, m->grpc, m->transport, m->metrics};
    int n;

    for (int i = 0; i < 4; i++) {
        if (strnlen(fields[i], MR_MAX_FIELD) == MR_MAX_FIELD ||
            !mr_printable(fields[i], strlen(fields[i]))) {
            return 0;
        }
    }
    if ((unsigned)m->state >= MR_N_STATES) {
        return 0;
    }
    n = snprintf(buf, cap, "v=%d\nname=%s\ngrpc=%s\ntransport=%s\nmetrics=%s\nstate=%s\n",
                 MR_VERSION, m->name, m->grpc, m->transport, m->metrics, mr_state_name(m->state));
    return n > 0 && (size_t)n < cap && n <= MR_MAX_RECORD ? (size_t)n : 0;
}
