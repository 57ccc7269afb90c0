/* fuzz_util.c - see fuzz_util.h. */
#include "fuzz_util.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------ generator -- */

static uint64_t fz_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void fz_rng_init(fz_rng_t *r, uint64_t seed, uint64_t stream)
{
    r->s = fz_mix(seed ^ fz_mix(stream + 0x9e3779b97f4a7c15ull));
}

uint64_t fz_next(fz_rng_t *r)
{
    r->s += 0x9e3779b97f4a7c15ull; /* splitmix64 */
    return fz_mix(r->s);
}

uint64_t fz_below(fz_rng_t *r, uint64_t n)
{
    return n <= 1 ? 0 : fz_next(r) % n;
}

int fz_chance(fz_rng_t *r, unsigned percent)
{
    return fz_below(r, 100) < percent;
}

void fz_fill(fz_rng_t *r, void *buf, size_t n)
{
    uint8_t *p = buf;

    for (size_t i = 0; i < n; i += 8) {
        uint64_t v = fz_next(r);

        memcpy(p + i, &v, n - i < 8 ? n - i : 8);
    }
}

uint64_t fz_seed(const char *prog)
{
    const char *env = getenv("STRATA_TEST_SEED");
    uint64_t seed;

    if (env != NULL && env[0] != '\0') {
        seed = strtoull(env, NULL, 0);
    } else {
        struct timespec ts;

        clock_gettime(CLOCK_REALTIME, &ts);
        seed =
            fz_mix((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ (uint64_t)getpid();
    }
    printf("%s: seed=0x%016llx (replay: STRATA_TEST_SEED=0x%016llx)\n", prog,
           (unsigned long long)seed, (unsigned long long)seed);
    fflush(stdout);
    return seed;
}

uint64_t fz_env_u64(const char *name, uint64_t def)
{
    const char *env = getenv(name);
    char *end;
    unsigned long long v;

    if (env == NULL || env[0] == '\0') {
        return def;
    }
    v = strtoull(env, &end, 0);
    return *end == '\0' ? (uint64_t)v : def;
}

double fz_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---------------------------------------------------------------- arena -- */

typedef struct fz_block {
    struct fz_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} fz_block_t;

static fz_block_t *fz_blocks;

void *fz_alloc(size_t n)
{
    fz_block_t *b = fz_blocks;

    n = (n + 15) & ~(size_t)15;
    if (n == 0) {
        n = 16;
    }
    if (b == NULL || b->cap - b->used < n) {
        size_t cap = n > (1u << 20) ? n : (1u << 20);

        b = malloc(sizeof(*b) + cap);
        if (b == NULL) {
            fprintf(stderr, "fuzz: out of memory (%zu bytes)\n", n);
            abort();
        }
        b->used = 0;
        b->cap = cap;
        b->next = fz_blocks;
        fz_blocks = b;
    }
    b->used += n;
    memset(b->data + b->used - n, 0, n);
    return b->data + b->used - n;
}

void *fz_dup(const void *p, size_t n)
{
    void *q = fz_alloc(n);

    if (n != 0) {
        memcpy(q, p, n);
    }
    return q;
}

void fz_arena_reset(void)
{
    while (fz_blocks != NULL) {
        fz_block_t *next = fz_blocks->next;

        free(fz_blocks);
        fz_blocks = next;
    }
}

/* ------------------------------------------------------- mutation log -- */

void fz_log_clear(fz_log_t *log)
{
    log->len = 0;
    log->text[0] = '\0';
}

void fz_logf(fz_log_t *log, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (log == NULL || log->len + 2 >= sizeof(log->text)) {
        return;
    }
    if (log->len > 0) {
        log->text[log->len++] = ';';
        log->text[log->len++] = ' ';
        log->text[log->len] = '\0';
    }
    va_start(ap, fmt);
    n = vsnprintf(log->text + log->len, sizeof(log->text) - log->len, fmt, ap);
    va_end(ap);
    if (n > 0) {
        log->len += (size_t)n;
        if (log->len >= sizeof(log->text)) {
            log->len = sizeof(log->text) - 1;
        }
    }
}

/* ------------------------------------------------------ byte mutation -- */

/* Writes v as a varint at p; returns its length. */
static size_t fz_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;

    do {
        p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v != 0);
    return n;
}

uint8_t *fz_mutate_bytes(fz_rng_t *r, const uint8_t *buf, size_t len, size_t *len_p, fz_log_t *log)
{
    unsigned n_ops = 1 + (unsigned)fz_below(r, 3);
    uint8_t *cur = fz_dup(buf, len);

    for (unsigned op = 0; op < n_ops; op++) {
        uint8_t *out = fz_alloc(2 * len + 1024);
        size_t pos = fz_below(r, len + 1), k;

        memcpy(out, cur, len);
        switch (fz_below(r, 9)) {
        case 0: /* bit flips */
            k = 1 + fz_below(r, 8);
            for (size_t i = 0; i < k && len > 0; i++) {
                out[fz_below(r, len)] ^= (uint8_t)(1u << fz_below(r, 8));
            }
            fz_logf(log, "bytes: %zu bit flips", k);
            break;
        case 1: /* truncation */
            fz_logf(log, "bytes: truncated %zu -> %zu", len, pos);
            len = pos;
            break;
        case 2: /* random append */
            k = 1 + fz_below(r, 64);
            fz_fill(r, out + len, k);
            len += k;
            fz_logf(log, "bytes: appended %zu random", k);
            break;
        case 3: /* overwrite */
            k = 1 + fz_below(r, 16);
            if (pos + k > len) {
                k = len - pos;
            }
            fz_fill(r, out + pos, k);
            fz_logf(log, "bytes: overwrote %zu at %zu", k, pos);
            break;
        case 4: /* insert random */
            k = 1 + fz_below(r, 16);
            memmove(out + pos + k, out + pos, len - pos);
            fz_fill(r, out + pos, k);
            len += k;
            fz_logf(log, "bytes: inserted %zu random at %zu", k, pos);
            break;
        case 5: { /* a length-delimited field longer than what follows */
            uint8_t bomb[16];
            uint64_t claim = fz_chance(r, 50) ? (uint64_t)(len - pos) + 1 + fz_below(r, 100)
                                              : (fz_chance(r, 50) ? 0xffffffffull : UINT64_MAX);
            size_t bl = fz_varint(bomb, ((1 + fz_below(r, 20)) << 3) | 2);

            bl += fz_varint(bomb + bl, claim);
            memmove(out + pos + bl, out + pos, len - pos);
            memcpy(out + pos, bomb, bl);
            len += bl;
            fz_logf(log, "bytes: field claiming %llu bytes at %zu", (unsigned long long)claim, pos);
            break;
        }
        case 6: /* duplicate a chunk */
            k = len > pos ? 1 + fz_below(r, len - pos) : 0;
            if (k > 256) {
                k = 256;
            }
            memmove(out + pos + k, out + pos, len - pos);
            memcpy(out + pos, cur + pos, k);
            len += k;
            fz_logf(log, "bytes: duplicated %zu at %zu", k, pos);
            break;
        case 7: /* fresh random bytes */
            len = fz_below(r, 257);
            fz_fill(r, out, len);
            fz_logf(log, "bytes: %zu fresh random bytes", len);
            break;
        default: /* a wire type changed */
            if (len > 0) {
                pos = fz_below(r, len);
                out[pos] = (uint8_t)((out[pos] & ~7u) | fz_below(r, 8));
            }
            fz_logf(log, "bytes: wire type at %zu", pos);
            break;
        }
        cur = out;
    }
    *len_p = len;
    return cur;
}

/* ------------------------------------------------- message mutation -- */

static size_t fz_elt_size(const ProtobufCFieldDescriptor *fd)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
    case PROTOBUF_C_TYPE_ENUM: return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE: return 8;
    case PROTOBUF_C_TYPE_BOOL: return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_STRING: return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES: return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE: return sizeof(ProtobufCMessage *);
    }
    return 8;
}

static uint64_t fz_interesting(fz_rng_t *r, const fz_domain_t *dom)
{
    static const uint64_t table[] = {0,
                                     1,
                                     2,
                                     15,
                                     16,
                                     17,
                                     63,
                                     64,
                                     127,
                                     128,
                                     129,
                                     999,
                                     1000,
                                     4095,
                                     4096,
                                     4097,
                                     65535,
                                     65536,
                                     0x7fffffffull,
                                     0x80000000ull,
                                     0xffffffffull,
                                     0x100000000ull,
                                     0x7fffffffffffffffull,
                                     0x8000000000000000ull,
                                     UINT64_MAX - 15,
                                     UINT64_MAX - 1,
                                     UINT64_MAX};

    switch (fz_below(r, 4)) {
    case 0: {
        uint32_t lim = dom->limits[fz_below(r, 8)];

        return (uint64_t)lim + fz_below(r, 3) - 1; /* lim - 1, lim, lim + 1 */
    }
    case 1: return fz_below(r, 300);
    case 2: return fz_next(r);
    default: return table[fz_below(r, sizeof(table) / sizeof(table[0]))];
    }
}

static void fz_scalar(fz_rng_t *r, const fz_domain_t *dom, const ProtobufCFieldDescriptor *fd,
                      void *p)
{
    uint64_t v;

    switch (fd->type) {
    case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumDescriptor *ed = fd->descriptor;
        static const int32_t odd[] = {-1, 99, INT32_MAX, INT32_MIN, 6, 7, 8, 255};
        int32_t e;

        if (fz_chance(r, 60) && ed->n_values > 0) {
            e = ed->values[fz_below(r, ed->n_values)].value;
        } else {
            e = odd[fz_below(r, sizeof(odd) / sizeof(odd[0]))];
        }
        memcpy(p, &e, sizeof(e));
        return;
    }
    case PROTOBUF_C_TYPE_BOOL: {
        protobuf_c_boolean b = fz_chance(r, 50);

        memcpy(p, &b, sizeof(b));
        return;
    }
    case PROTOBUF_C_TYPE_FLOAT: {
        float f = (float)(int64_t)fz_interesting(r, dom);

        memcpy(p, &f, sizeof(f));
        return;
    }
    case PROTOBUF_C_TYPE_DOUBLE: {
        double d = (double)(int64_t)fz_interesting(r, dom);

        memcpy(p, &d, sizeof(d));
        return;
    }
    default: break;
    }
    if (!(dom->u64 != NULL && dom->u64(dom->user, r, fd, &v))) {
        v = fz_interesting(r, dom);
    }
    if (fz_elt_size(fd) == 4) {
        uint32_t w = (uint32_t)v;

        memcpy(p, &w, sizeof(w));
    } else {
        memcpy(p, &v, sizeof(v));
    }
}

static void fz_bytes(fz_rng_t *r, const fz_domain_t *dom, const ProtobufCFieldDescriptor *fd,
                     ProtobufCBinaryData *b)
{
    static const size_t odd[] = {1, 8, 15, 17, 24, 31, 33, 47};
    size_t len;

    if (dom->bytes != NULL && fz_chance(r, 50) && dom->bytes(dom->user, r, fd, b)) {
        return;
    }
    switch (fz_below(r, 10)) {
    case 0:
    case 1: len = 0; break;
    case 2:
    case 3: len = odd[fz_below(r, sizeof(odd) / sizeof(odd[0]))]; break;
    case 4:
    case 5: len = 16; break;
    case 6:
    case 7: len = 16 * (2 + fz_below(r, 300)); break;
    case 8: len = fz_below(r, 4096); break;
    default: /* oversize: up to max_bytes */
        len = dom->max_bytes / 2 + fz_below(r, dom->max_bytes / 2 + 1);
        break;
    }
    b->len = len;
    b->data = fz_alloc(len + 1);
    fz_fill(r, b->data, len);
}

static char *fz_string(fz_rng_t *r)
{
    static const char *const names[] = {"",
                                        "default",
                                        "acme",
                                        "fuzz",
                                        "strata.v1.Cache",
                                        "grpc.health.v1.Health",
                                        "strata.v1.Cache ",
                                        "\xff\xfe invalid utf-8",
                                        "k3"};
    static const size_t lens[] = {1, 5, 127, 128, 129, 200, 5000};
    size_t len;
    char *s;

    if (fz_chance(r, 50)) {
        return (char *)names[fz_below(r, sizeof(names) / sizeof(names[0]))];
    }
    len = lens[fz_below(r, sizeof(lens) / sizeof(lens[0]))];
    s = fz_alloc(len + 1);
    if (fz_chance(r, 50)) {
        for (size_t i = 0; i < len; i++) {
            s[i] = (char)('a' + fz_below(r, 26));
        }
    } else {
        for (size_t i = 0; i < len; i++) {
            s[i] = (char)(1 + fz_below(r, 255)); /* any byte but NUL */
        }
    }
    return s;
}

static void fz_pb_mutate_depth(fz_rng_t *r, ProtobufCMessage *m, const fz_domain_t *dom,
                               unsigned n_ops, fz_log_t *log, int depth);

/* Repeated-field elements one fz_pb_mutate() call may still create, so that
 * nested growth (thousands of messages, each with thousands of entries)
 * stays within reach of the daemon's limits and the test's time. */
static size_t fz_budget;

/* A fresh element of a repeated field at p. */
static void fz_element(fz_rng_t *r, const fz_domain_t *dom, const ProtobufCFieldDescriptor *fd,
                       void *p, fz_log_t *log, int depth)
{
    switch (fd->type) {
    case PROTOBUF_C_TYPE_STRING: *(char **)p = fz_string(r); break;
    case PROTOBUF_C_TYPE_BYTES: fz_bytes(r, dom, fd, p); break;
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessageDescriptor *md = fd->descriptor;
        ProtobufCMessage *sub = fz_alloc(md->sizeof_message);

        protobuf_c_message_init(md, sub);
        if (depth < 3) {
            fz_pb_mutate_depth(r, sub, dom, 1 + (unsigned)fz_below(r, 3), NULL, depth + 1);
        }
        *(ProtobufCMessage **)p = sub;
        (void)log;
        break;
    }
    default: fz_scalar(r, dom, fd, p); break;
    }
}

static void fz_repeated(fz_rng_t *r, ProtobufCMessage *m, const ProtobufCFieldDescriptor *fd,
                        const fz_domain_t *dom, fz_log_t *log, int depth)
{
    size_t *np = (size_t *)(void *)((char *)m + fd->quantifier_offset);
    void **ap = (void **)(void *)((char *)m + fd->offset);
    size_t n = *np, esz = fz_elt_size(fd);
    unsigned op = (unsigned)fz_below(r, 7);

    if (n == 0 && (op == 1 || op == 3 || op == 4)) {
        op = 2;
    }
    switch (op) {
    case 0:
        *np = 0;
        *ap = NULL;
        fz_logf(log, "%s: cleared", fd->name);
        break;
    case 1:
        *np = fz_below(r, n);
        fz_logf(log, "%s: %zu -> %zu entries", fd->name, n, *np);
        break;
    case 2:
    case 6: {
        static const size_t sizes[] = {1, 2, 3, 5, 17, 100, 1000, 5000};
        size_t target;
        uint8_t *arr;

        switch (fz_below(r, 4)) {
        case 0: target = n + 1 + fz_below(r, 3); break;
        case 1: target = dom->limits[fz_below(r, 8)] + fz_below(r, 3); break;
        case 2: target = fz_below(r, dom->max_repeat + 1); break;
        default: target = sizes[fz_below(r, sizeof(sizes) / sizeof(sizes[0]))]; break;
        }
        if (target > dom->max_repeat) {
            target = dom->max_repeat;
        }
        if (target > n + fz_budget) {
            target = n + fz_budget;
        }
        fz_budget -= target > n ? target - n : 0;
        /* Keep the message small enough to send: big elements, fewer of them. */
        if (fd->type == PROTOBUF_C_TYPE_BYTES || fd->type == PROTOBUF_C_TYPE_STRING ||
            fd->type == PROTOBUF_C_TYPE_MESSAGE) {
            if (target > dom->max_repeat / 4) {
                target = dom->max_repeat / 4;
            }
        }
        arr = fz_alloc(esz * (target + 1));
        for (size_t i = 0; i < target; i++) {
            if (n > 0 && (i < n || fz_chance(r, 70))) {
                memcpy(arr + i * esz, (uint8_t *)*ap + (i < n ? i : fz_below(r, n)) * esz, esz);
            } else {
                fz_element(r, dom, fd, arr + i * esz, log, depth);
            }
        }
        *ap = arr;
        *np = target;
        fz_logf(log, "%s: %zu -> %zu entries", fd->name, n, target);
        break;
    }
    case 3: {
        size_t i = fz_below(r, n);
        uint8_t *arr = fz_dup(*ap, esz * n);

        if (fd->type == PROTOBUF_C_TYPE_MESSAGE && fz_chance(r, 70)) {
            const ProtobufCMessageDescriptor *md = fd->descriptor;
            ProtobufCMessage *sub =
                fz_dup(((ProtobufCMessage **)(void *)arr)[i], md->sizeof_message);

            fz_logf(log, "%s[%zu]:", fd->name, i);
            fz_pb_mutate_depth(r, sub, dom, 1, log, depth + 1);
            ((ProtobufCMessage **)(void *)arr)[i] = sub;
        } else {
            fz_element(r, dom, fd, arr + i * esz, log, depth);
            fz_logf(log, "%s[%zu]: new value", fd->name, i);
        }
        *ap = arr;
        break;
    }
    case 4: {
        uint8_t *arr;

        if (n > fz_budget) {
            break;
        }
        fz_budget -= n;
        arr = fz_alloc(esz * (2 * n + 1));

        memcpy(arr, *ap, esz * n);
        memcpy(arr + esz * n, *ap, esz * n);
        *ap = arr;
        *np = 2 * n;
        fz_logf(log, "%s: doubled to %zu", fd->name, 2 * n);
        break;
    }
    default: { /* op 5: one fresh value, repeated */
        size_t target = 1 + fz_below(r, 64);

        if (target > fz_budget + 1) {
            target = fz_budget + 1;
        }
        fz_budget -= target - 1;
        uint8_t *arr = fz_alloc(esz * (target + 1));

        fz_element(r, dom, fd, arr, log, depth);
        for (size_t i = 1; i < target; i++) {
            memcpy(arr + i * esz, arr, esz);
        }
        *ap = arr;
        *np = target;
        fz_logf(log, "%s: %zu copies of one value", fd->name, target);
        break;
    }
    }
}

static void fz_pb_mutate_depth(fz_rng_t *r, ProtobufCMessage *m, const fz_domain_t *dom,
                               unsigned n_ops, fz_log_t *log, int depth)
{
    const ProtobufCMessageDescriptor *md = m->descriptor;

    for (unsigned op = 0; op < n_ops && md->n_fields > 0; op++) {
        const ProtobufCFieldDescriptor *fd = &md->fields[fz_below(r, md->n_fields)];
        void *p = (char *)m + fd->offset;

        if (fd->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            continue; /* strata.proto has none */
        }
        if (fd->label == PROTOBUF_C_LABEL_REPEATED) {
            fz_repeated(r, m, fd, dom, log, depth);
            continue;
        }
        if (fd->label == PROTOBUF_C_LABEL_OPTIONAL && fd->quantifier_offset != 0 &&
            fd->type != PROTOBUF_C_TYPE_MESSAGE && fd->type != PROTOBUF_C_TYPE_STRING) {
            *(protobuf_c_boolean *)(void *)((char *)m + fd->quantifier_offset) = 1;
        }
        switch (fd->type) {
        case PROTOBUF_C_TYPE_MESSAGE: {
            ProtobufCMessage **pp = p;
            const ProtobufCMessageDescriptor *sd = fd->descriptor;

            if (*pp != NULL && fz_chance(r, 25)) {
                *pp = NULL;
                fz_logf(log, "%s: removed", fd->name);
                break;
            }
            if (*pp == NULL) {
                *pp = fz_alloc(sd->sizeof_message);
                protobuf_c_message_init(sd, *pp);
                fz_logf(log, "%s: added", fd->name);
            } else {
                *pp = fz_dup(*pp, sd->sizeof_message);
                fz_logf(log, "%s:", fd->name);
            }
            if (depth < 3) {
                fz_pb_mutate_depth(r, *pp, dom, 1 + (unsigned)fz_below(r, 2), log, depth + 1);
            }
            break;
        }
        case PROTOBUF_C_TYPE_BYTES:
            fz_bytes(r, dom, fd, p);
            fz_logf(log, "%s: %zu bytes", fd->name, ((ProtobufCBinaryData *)p)->len);
            break;
        case PROTOBUF_C_TYPE_STRING:
            *(char **)p = fz_string(r);
            fz_logf(log, "%s: string of %zu", fd->name, strlen(*(char **)p));
            break;
        default: {
            uint64_t v = 0;

            fz_scalar(r, dom, fd, p);
            memcpy(&v, p, fz_elt_size(fd));
            fz_logf(log, "%s = %llu", fd->name, (unsigned long long)v);
            break;
        }
        }
    }
}

void fz_pb_mutate(fz_rng_t *r, ProtobufCMessage *m, const fz_domain_t *dom, unsigned n_ops,
                  fz_log_t *log)
{
    fz_budget = dom->max_repeat;
    fz_pb_mutate_depth(r, m, dom, n_ops, log, 0);
}

uint8_t *fz_pb_pack(const ProtobufCMessage *m, size_t *len_p)
{
    size_t len = protobuf_c_message_get_packed_size(m);
    uint8_t *buf = fz_alloc(len + 1);

    *len_p = protobuf_c_message_pack(m, buf);
    return buf;
}

uint32_t fz_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

uint64_t fz_get64(const uint8_t *p)
{
    return (uint64_t)fz_get32(p) | (uint64_t)fz_get32(p + 4) << 32;
}

void fz_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) {
        p[i] = (uint8_t)(v >> (8 * i));
    }
}

void fz_put64(uint8_t *p, uint64_t v)
{
    fz_put32(p, (uint32_t)v);
    fz_put32(p + 4, (uint32_t)(v >> 32));
}

void fz_fail_head(const char *fmt, va_list ap)
{
    fprintf(stderr, "\nFAIL: ");
    vfprintf(stderr, fmt, ap);
}

void fz_fail_one(uint64_t seed, uint64_t iter, const fz_log_t *log, const char *what,
                 const uint8_t *buf, size_t len, const char *fmt, va_list ap)
{
    char hex[600];

    fz_fail_head(fmt, ap);
    fz_hex(buf, len < 200 ? len : 200, hex, sizeof(hex));
    fprintf(stderr, "\n  seed=0x%016llx iteration=%llu\n  mutations: %s\n  %s (%zu bytes): %s\n",
            (unsigned long long)seed, (unsigned long long)iter, log->len ? log->text : "(none)",
            what, len, hex);
    fprintf(stderr, "  replay: STRATA_TEST_SEED=0x%016llx\n", (unsigned long long)seed);
    exit(1);
}

void fz_fail_input(const char *what, const uint8_t *bytes, size_t len, size_t shown,
                   const char *path)
{
    char hex[600];
    FILE *f;

    fz_hex(bytes, len < shown ? len : shown, hex, sizeof(hex));
    fprintf(stderr, "  %s (%zu bytes): %s\n", what, len, hex);
    f = fopen(path, "wb");
    if (f != NULL) {
        fwrite(bytes, 1, len, f);
        fclose(f);
        fprintf(stderr, "  %s saved to %s\n", what, path);
    }
}

void fz_hex(const uint8_t *buf, size_t len, char *out, size_t outlen)
{
    size_t o = 0;

    out[0] = '\0';
    for (size_t i = 0; i < len && o + 3 < outlen; i++) {
        o += (size_t)snprintf(out + o, outlen - o, "%02x", buf[i]);
    }
    if (o + 4 < outlen && len * 2 > o) {
        snprintf(out + o, outlen - o, "...");
    }
}

void fz_file_tail(const char *path, long lines)
{
    char line[512];
    long n = 0, skip;
    FILE *f = fopen(path, "r");

    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        n++;
    }
    rewind(f);
    skip = n > lines ? n - lines : 0;
    for (long i = 0; fgets(line, sizeof(line), f) != NULL; i++) {
        if (i >= skip) {
            fprintf(stderr, "    %s", line);
        }
    }
    fclose(f);
}
