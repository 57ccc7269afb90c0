/*
 * fuzz_epoch.c - the ring epoch's fold (srpc_epoch_fold(), rpc/etcd_members.c),
 * which every daemon's watch and full read, libstrata and `strata status`
 * run over the keys etcd hands them (docs/membership.md "The ring epoch").
 *
 * Part 1, one key: random keys (members/ with short, empty and too long
 * names, epoch, epoch_base, look-alikes such as epochs or membersx, other
 * prefixes, random bytes) with random values (20-digit decimals, short and
 * long digit runs, signs, spaces, junk), put or deleted, each from a buffer
 * of exactly its size (the sanitizer build sees any read past it). Oracle:
 * a reference classifier and reader of the documented keys and values,
 * written apart: the kind, the name, and rev and base after the fold.
 *
 * Part 2, histories: a model etcd store (a revision per put or delete of a
 * key that exists) under random puts and deletes of members, other keys,
 * raises of epoch_base, and the delete records a daemon writes (a put of
 * <prefix>epoch only when it raises it, after every delete under
 * members/). Oracle: for every point of the history, a full read there
 * followed by the watch's events from there gives the epoch of a full read
 * of the final store; this is what makes a node that joins late, or lost
 * its watch, agree with the others. The same histories without the delete
 * records must break it at least once (the check can fail).
 *
 * Bounds: STRATA_FUZZ_ITERS inputs per part (default 20,000). The seed is
 * printed; STRATA_TEST_SEED replays it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_members.h"
#include "fuzz_util.h"
#include "log.h"

#define FE_ITERS   20000
#define FE_PREFIX  "/strata/"
#define FE_MAX_OPS 40
#define FE_KEYS    12

static uint64_t g_seed, g_iter;

static void fe_fail(const char *what, const char *key, size_t klen)
{
    char hex[2 * 256 + 1];

    fz_hex((const uint8_t *)key, klen < 256 ? klen : 256, hex, sizeof(hex));
    fprintf(stderr, "fuzz_epoch: %s (seed %llu iteration %llu)\nkey: %s\n", what,
            (unsigned long long)g_seed, (unsigned long long)g_iter, hex);
    exit(1);
}

/* --------------------------------------------------------------- part 1 -- */

/* The reference reader of a recorded number: 1 to 20 digits, at most INT64_MAX. */
static int fe_ref_number(const uint8_t *v, size_t len, uint64_t *n_p)
{
    char buf[32];
    unsigned long long n;
    char *end;

    if (len == 0 || len > 20) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        if (v[i] < '0' || v[i] > '9') {
            return 0;
        }
    }
    memcpy(buf, v, len);
    buf[len] = '\0';
    errno = 0;
    n = strtoull(buf, &end, 10);
    if (errno != 0 || n > (unsigned long long)INT64_MAX) {
        return 0;
    }
    *n_p = n;
    return 1;
}

/* The reference classifier of docs/membership.md's keys. */
static srpc_members_key_t fe_ref_kind(const char *k, size_t len, char *name, size_t cap)
{
    const char *m = FE_PREFIX "members/";
    size_t mlen = strlen(m);

    name[0] = '\0';
    if (len > mlen && memcmp(k, m, mlen) == 0) {
        if (len - mlen < cap) {
            memcpy(name, k + mlen, len - mlen);
            name[len - mlen] = '\0';
        }
        return SRPC_KEY_MEMBER;
    }
    if (len == strlen(FE_PREFIX "epoch") && memcmp(k, FE_PREFIX "epoch", len) == 0) {
        return SRPC_KEY_EPOCH;
    }
    if (len == strlen(FE_PREFIX "epoch_base") && memcmp(k, FE_PREFIX "epoch_base", len) == 0) {
        return SRPC_KEY_BASE;
    }
    return SRPC_KEY_OTHER;
}

static size_t fe_random_key(fz_rng_t *r, char *k, size_t cap)
{
    static const char *const fixed[] = {
        FE_PREFIX "members/a",
        FE_PREFIX "members/10.0.0.5:7700",
        FE_PREFIX "members/",
        FE_PREFIX "members",
        FE_PREFIX "membersx/a",
        FE_PREFIX "epoch",
        FE_PREFIX "epoch_base",
        FE_PREFIX "epochs",
        FE_PREFIX "epoc",
        FE_PREFIX "epoch_bas",
        FE_PREFIX "epoch_basex",
        "/other/members/a",
        "/strata",
        "",
        FE_PREFIX "Members/a",
    };
    size_t n = 0;

    switch (fz_below(r, 4)) {
    case 0:
        return (size_t)snprintf(k, cap, "%s", fixed[fz_below(r, sizeof(fixed) / sizeof(*fixed))]);
    case 1: /* a member name of any length, at and over the limit */
        n = (size_t)snprintf(k, cap, "%smembers/", FE_PREFIX);
        for (size_t len = fz_below(r, MR_MAX_FIELD + 8); len > 0 && n + 1 < cap; len--) {
            k[n++] = (char)('a' + fz_below(r, 26));
        }
        k[n] = '\0';
        return n;
    case 2: /* the prefix and random bytes */
        n = (size_t)snprintf(k, cap, "%s", FE_PREFIX);
        for (size_t len = fz_below(r, 24); len > 0 && n < cap; len--) {
            k[n++] = (char)fz_below(r, 256);
        }
        return n;
    default:
        n = fz_below(r, 32);
        fz_fill(r, k, n);
        return n;
    }
}

static size_t fe_random_value(fz_rng_t *r, char *v, size_t cap)
{
    static const char *const fixed[] = {"00000000000000000007",
                                        "7",
                                        "",
                                        "-1",
                                        "+5",
                                        " 5",
                                        "5 ",
                                        "9223372036854775807",
                                        "9223372036854775808",
                                        "18446744073709551615",
                                        "99999999999999999999",
                                        "000000000000000000001",
                                        "0x10",
                                        "00000000000000000000"};
    size_t n;

    switch (fz_below(r, 3)) {
    case 0:
        return (size_t)snprintf(v, cap, "%s", fixed[fz_below(r, sizeof(fixed) / sizeof(*fixed))]);
    case 1:
        n = fz_below(r, 26);
        for (size_t i = 0; i < n; i++) {
            v[i] = (char)('0' + fz_below(r, 10));
        }
        return n;
    default:
        n = fz_below(r, 40);
        fz_fill(r, v, n);
        return n;
    }
}

static void fe_one_key(fz_rng_t *r)
{
    char kbuf[MR_MAX_FIELD + 64], vbuf[64], name[MR_MAX_FIELD], ref_name[MR_MAX_FIELD];
    size_t klen = fe_random_key(r, kbuf, sizeof(kbuf)), vlen = fe_random_value(r, vbuf, 64);
    Etcdserverpb__EtcdKv kv = ETCDSERVERPB__ETCD_KV__INIT;
    srpc_epoch_t ep = {fz_below(r, 1000), fz_below(r, 1000)}, want = ep;
    int deleted = fz_chance(r, 30);
    srpc_members_key_t kind, ref;
    uint64_t n;

    /* Exactly sized copies: a read past either is the sanitizer's to see. */
    kv.key.len = klen;
    kv.key.data = malloc(klen ? klen : 1);
    kv.value.len = deleted ? 0 : vlen;
    kv.value.data = malloc(vlen ? vlen : 1);
    if (kv.key.data == NULL || kv.value.data == NULL) {
        fe_fail("out of memory", "", 0);
    }
    memcpy(kv.key.data, kbuf, klen);
    memcpy(kv.value.data, vbuf, vlen);
    kv.mod_revision = (int64_t)fz_below(r, 2000) - 10;
    memset(name, 'x', sizeof(name));
    kind = srpc_epoch_fold(&ep, FE_PREFIX, &kv, deleted, name, sizeof(name));
    ref = fe_ref_kind(kbuf, klen, ref_name, sizeof(ref_name));
    if (kind != ref) {
        fe_fail("the kind differs from the reference's", kbuf, klen);
    }
    if (ref == SRPC_KEY_MEMBER) {
        if (strcmp(name, ref_name) != 0) {
            fe_fail("the member name differs from the reference's", kbuf, klen);
        }
        if (kv.mod_revision > 0 && (uint64_t)kv.mod_revision > want.rev) {
            want.rev = (uint64_t)kv.mod_revision;
        }
    } else if (ref == SRPC_KEY_EPOCH && !deleted && fe_ref_number(kv.value.data, vlen, &n)) {
        want.rev = n > want.rev ? n : want.rev;
    } else if (ref == SRPC_KEY_BASE && !deleted) {
        want.base = fe_ref_number(kv.value.data, vlen, &n) ? n : 0;
    }
    if (ep.rev != want.rev || ep.base != want.base) {
        fprintf(stderr, "rev %llu want %llu, base %llu want %llu, deleted %d, value %.*s\n",
                (unsigned long long)ep.rev, (unsigned long long)want.rev,
                (unsigned long long)ep.base, (unsigned long long)want.base, deleted, (int)vlen,
                vbuf);
        fe_fail("the fold differs from the reference's", kbuf, klen);
    }
    free(kv.key.data);
    free(kv.value.data);
}

/* --------------------------------------------------------------- part 2 -- */

typedef struct fe_key {
    char key[64];
    char value[24];
    int64_t mod_revision;
    int present;
} fe_key_t;

typedef struct fe_event {
    int key; /* index into the store */
    char value[24];
    int64_t mod_revision;
    int deleted;
} fe_event_t;

typedef struct fe_store {
    fe_key_t k[FE_KEYS];
    int64_t revision;
    fe_event_t ev[FE_MAX_OPS * 3];
    int n_ev;
    int record; /* write the delete records a daemon writes */
} fe_store_t;

/* The keys before each event (where a full read may come), and after the last. */
typedef struct fe_snap {
    fe_key_t k[FE_KEYS];
    int n_ev; /* the events after it start here */
} fe_snap_t;

static fe_snap_t g_snap[FE_MAX_OPS * 3 + 1];
static int g_n_snap;

static void fe_snap(const fe_store_t *s)
{
    memcpy(g_snap[g_n_snap].k, s->k, sizeof(s->k));
    g_snap[g_n_snap++].n_ev = s->n_ev;
}

/* The key and value as etcd hands them (pointing into the model's strings). */
static void fe_kv(const fe_key_t *k, int key, const char *value, int64_t rev,
                  Etcdserverpb__EtcdKv *kv)
{
    *kv = (Etcdserverpb__EtcdKv)ETCDSERVERPB__ETCD_KV__INIT;
    kv->key.len = strlen(k[key].key);
    kv->key.data = (uint8_t *)k[key].key;
    kv->value.len = strlen(value);
    kv->value.data = (uint8_t *)value;
    kv->mod_revision = rev;
}

static void fe_put(fe_store_t *s, int key, const char *value)
{
    fe_event_t *e;

    fe_snap(s);
    e = &s->ev[s->n_ev++];
    s->revision++;
    snprintf(s->k[key].value, sizeof(s->k[key].value), "%s", value);
    s->k[key].mod_revision = s->revision;
    s->k[key].present = 1;
    *e = (fe_event_t){key, "", s->revision, 0};
    snprintf(e->value, sizeof(e->value), "%s", value);
}

/* etcd's put_if_less: only when missing or bytewise less. */
static void fe_put_if_less(fe_store_t *s, int key, const char *value)
{
    if (!s->k[key].present || strcmp(s->k[key].value, value) < 0) {
        fe_put(s, key, value);
    }
}

static void fe_delete(fe_store_t *s, int key)
{
    char v[24];

    if (!s->k[key].present) {
        return; /* etcd: no revision for a delete of nothing */
    }
    fe_snap(s);
    s->revision++;
    s->k[key].present = 0;
    s->ev[s->n_ev++] = (fe_event_t){key, "", s->revision, 1};
    if (s->record && key >= 3) { /* a member: a watcher records the delete */
        snprintf(v, sizeof(v), "%020lld", (long long)s->revision);
        fe_put_if_less(s, 0, v);
    }
}

/* The epoch of a full read of the keys k. */
static srpc_epoch_t fe_full_read(const fe_key_t *k)
{
    srpc_epoch_t ep = {0, 0};
    char name[MR_MAX_FIELD];

    for (int i = 0; i < FE_KEYS; i++) {
        Etcdserverpb__EtcdKv kv;

        if (k[i].present) {
            fe_kv(k, i, k[i].value, k[i].mod_revision, &kv);
            (void)srpc_epoch_fold(&ep, FE_PREFIX, &kv, 0, name, sizeof(name));
        }
    }
    return ep;
}

/* Keys 0, 1: epoch, epoch_base; 2: another key; 3..: members. */
static void fe_store_init(fe_store_t *s, int record)
{
    memset(s, 0, sizeof(*s));
    s->record = record;
    s->revision = 1;
    snprintf(s->k[0].key, sizeof(s->k[0].key), "%sepoch", FE_PREFIX);
    snprintf(s->k[1].key, sizeof(s->k[1].key), "%sepoch_base", FE_PREFIX);
    snprintf(s->k[2].key, sizeof(s->k[2].key), "%sother", FE_PREFIX);
    for (int i = 3; i < FE_KEYS; i++) {
        snprintf(s->k[i].key, sizeof(s->k[i].key), "%smembers/n%d", FE_PREFIX, i);
    }
}

/*
 * Runs one random history; 1 when a full read at every point (before each
 * event, and after the last) plus the events after it gives the final
 * read's epoch.
 */
static int fe_history(uint64_t seed, int record)
{
    static fe_store_t s;
    srpc_epoch_t final;
    int n_ops, agree = 1;
    fz_rng_t r;

    fz_rng_init(&r, seed, 2);
    n_ops = 1 + (int)fz_below(&r, FE_MAX_OPS);
    fe_store_init(&s, record);
    g_n_snap = 0;
    for (int op = 0; op < n_ops; op++) {
        int key = 3 + (int)fz_below(&r, FE_KEYS - 3);
        char v[24];

        switch (fz_below(&r, 10)) {
        case 0:
            snprintf(v, sizeof(v), "%020llu", (unsigned long long)fz_below(&r, 5000));
            fe_put_if_less(&s, 1, v);
            break;
        case 1: fe_put(&s, 2, "x"); break;
        case 2:
        case 3:
        case 4: fe_delete(&s, key); break;
        default: fe_put(&s, key, "v=1"); break;
        }
    }
    fe_snap(&s);
    final = fe_full_read(s.k);
    for (int t = 0; t < g_n_snap; t++) {
        srpc_epoch_t ep = fe_full_read(g_snap[t].k);
        char name[MR_MAX_FIELD];

        for (int i = g_snap[t].n_ev; i < s.n_ev; i++) {
            Etcdserverpb__EtcdKv kv;

            fe_kv(s.k, s.ev[i].key, s.ev[i].value, s.ev[i].mod_revision, &kv);
            (void)srpc_epoch_fold(&ep, FE_PREFIX, &kv, s.ev[i].deleted, name, sizeof(name));
        }
        if (srpc_epoch_value(&ep) != srpc_epoch_value(&final)) {
            agree = 0;
        }
    }
    return agree;
}

int main(void)
{
    uint64_t iters = fz_env_u64("STRATA_FUZZ_ITERS", FE_ITERS), broken = 0;
    fz_rng_t r;

    lg_set_level(LG_ERROR); /* the fold warns of every bad value it ignores */
    g_seed = fz_seed("fuzz_epoch");
    fz_rng_init(&r, g_seed, 1);
    for (g_iter = 0; g_iter < iters; g_iter++) {
        fe_one_key(&r);
    }
    for (g_iter = 0; g_iter < iters; g_iter++) {
        uint64_t seed = fz_next(&r);

        if (!fe_history(seed, 1)) {
            fe_fail("a read plus the events after it is not the final read's epoch", "", 0);
        }
        broken += !fe_history(seed, 0);
    }
    if (broken == 0) {
        fprintf(stderr, "fuzz_epoch: without the delete records no history disagreed: the "
                        "check cannot fail\n");
        return 1;
    }
    printf("fuzz_epoch: %llu keys and %llu histories agree with the reference; without the "
           "delete records %llu histories disagree\n",
           (unsigned long long)iters, (unsigned long long)iters, (unsigned long long)broken);
    return 0;
}
