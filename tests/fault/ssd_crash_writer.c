/*
 * ssd_crash_writer.c - the two halves of the SSD tier's kill -9 test
 * (driven by test_ssd_crash.py).
 *
 *   ssd_crash_writer write DIR RUN
 *     Opens the environment in DIR and writes until killed: durable session
 *     appends (a few session records, each rewritten longer every time),
 *     durable KDA puts (new keys), and every fifth write a queued KDA put
 *     (printed "Q <kind> <n> <version> <length>" before it is queued: it
 *     may be lost, but must never be wrong). Before each durable put it prints
 *       I <kind> <n> <version> <length>
 *     and after the put returned ST_OK
 *       A <kind> <n> <version> <length> <checksum>
 *     each line with one write(2), so a line is either whole or absent.
 *
 *   ssd_crash_writer verify DIR LOG
 *     Opens the environment and checks every key of LOG: the value must be
 *     the last acknowledged version, or the one version written after it
 *     whose put was in flight when the writer died; bytes are compared in
 *     full. Prints a summary; exits 0 when everything holds, 1 otherwise.
 *
 * The payload of a version is a function of the version number alone, so
 * the verifier regenerates the exact bytes it expects.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <xxhash.h>

#include "log.h"
#include "ssd.h"

#define N_SESSIONS 4
#define MAP_SIZE   (1ull << 30)
#define MAX_LEN    (48 * 1024)
#define MAX_KEYS   (1 << 16)
#define CRASH_NS   77

static ssd_key_t crash_key(unsigned kind, uint64_t n)
{
    ssd_key_t k;

    memset(&k, 0, sizeof(k));
    k.ns = CRASH_NS;
    k.kind = (uint8_t)kind;
    for (int i = 0; i < 8; i++) {
        k.id.b[i] = (uint8_t)(n >> (8 * i));
        k.id.b[8 + i] = (uint8_t)(0x5A + i);
    }
    k.layer = kind == SSD_KDA ? (uint16_t)(n % 16) : 0;
    return k;
}

static void gen(uint8_t *buf, size_t len, uint64_t version)
{
    uint64_t x = version * 0x9E3779B97F4A7C15ull ^ 0xD1B54A32D192ED03ull;

    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
    if (len >= 8) {
        memcpy(buf, &version, 8);
    }
}

static ssd_t *open_env(const char *dir)
{
    ssd_params_t p = {0};
    ssd_t *ssd = NULL;

    p.dir = dir;
    p.map_size = MAP_SIZE;
    p.sync = SSD_SYNC_DURABLE;
    if (ssd_open(&p, &ssd) != ST_OK) {
        fprintf(stderr, "cannot open %s\n", dir);
        exit(2);
    }
    return ssd;
}

static void say(const char *line)
{
    size_t len = strlen(line), off = 0;

    while (off < len) {
        ssize_t n = write(1, line + off, len - off);

        if (n <= 0) {
            exit(3);
        }
        off += (size_t)n;
    }
}

static int do_write(const char *dir, uint64_t run)
{
    ssd_t *ssd = open_env(dir);
    uint8_t *buf = malloc(MAX_LEN);
    uint64_t x = run * 2654435761u + 1;
    char line[160];

    if (buf == NULL) {
        return 2;
    }
    for (uint64_t i = 0;; i++) {
        unsigned kind;
        uint64_t n, version = (run << 32) | i;
        size_t len;
        st_status_t status;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (i % 5 == 4) {
            /* A queued (not durable) KDA put: it may be lost at the kill,
             * but if it is there its bytes must be right. */
            n = (run << 20) | i;
            len = 16 + (size_t)(x % (MAX_LEN - 16));
            gen(buf, len, version);
            snprintf(line, sizeof(line), "Q %u %" PRIu64 " %" PRIu64 " %zu\n", SSD_KDA, n, version,
                     len);
            say(line);
            ssd_key_t qkey = crash_key(SSD_KDA, n);
            status = ssd_put(ssd, &qkey, buf, len, 0, NULL, NULL); /* copied */
            if (status != ST_OK) {
                fprintf(stderr, "queued put failed: %s\n", st_strerror(status));
                return 1;
            }
            continue;
        }
        if (i % 3 == 0) {
            /* A session append: the record of one of a few sessions grows. */
            kind = SSD_SESSION;
            n = x % N_SESSIONS;
            len = 64 + (size_t)(i % 512) * 16;
        } else {
            kind = SSD_KDA;
            n = (run << 20) | i;
            len = 16 + (size_t)(x % (MAX_LEN - 16));
        }
        gen(buf, len, version);
        snprintf(line, sizeof(line), "I %u %" PRIu64 " %" PRIu64 " %zu\n", kind, n, version, len);
        say(line);
        ssd_key_t key = crash_key(kind, n);
        status = ssd_put(ssd, &key, buf, len, SSD_DURABLE, NULL, NULL);
        if (status != ST_OK) {
            fprintf(stderr, "put failed: %s\n", st_strerror(status));
            return 1;
        }
        snprintf(line, sizeof(line), "A %u %" PRIu64 " %" PRIu64 " %zu %016" PRIx64 "\n", kind, n,
                 version, len, XXH3_64bits(buf, len));
        say(line);
    }
}

typedef struct expect {
    unsigned kind;
    uint64_t n;
    int acked;
    uint64_t acked_version;
    size_t acked_len;
    int pending;
    uint64_t pending_version;
    size_t pending_len;
} expect_t;

static expect_t *find(expect_t *tab, size_t *count, unsigned kind, uint64_t n)
{
    for (size_t i = *count; i-- > 0;) {
        if (tab[i].kind == kind && tab[i].n == n) {
            return &tab[i];
        }
    }
    if (*count == MAX_KEYS) {
        return NULL;
    }
    memset(&tab[*count], 0, sizeof(tab[0]));
    tab[*count].kind = kind;
    tab[*count].n = n;
    return &tab[(*count)++];
}

static int do_verify(const char *dir, const char *log)
{
    FILE *f = fopen(log, "r");
    expect_t *tab = calloc(MAX_KEYS, sizeof(*tab));
    uint8_t *want = malloc(MAX_LEN), *got = malloc(MAX_LEN);
    size_t count = 0, acked = 0, pending_seen = 0, bad = 0, queued = 0;
    char line[200];
    ssd_t *ssd;
    ssd_stats_t st;

    if (f == NULL || tab == NULL || want == NULL || got == NULL) {
        fprintf(stderr, "cannot read %s\n", log);
        return 2;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char type;
        unsigned kind;
        uint64_t n, version;
        size_t len;
        expect_t *e;

        if (strchr(line, '\n') == NULL || sscanf(line, "%c %u %" SCNu64 " %" SCNu64 " %zu", &type,
                                                 &kind, &n, &version, &len) != 5) {
            continue; /* a torn last line */
        }
        e = find(tab, &count, kind, n);
        if (e == NULL) {
            fprintf(stderr, "too many keys\n");
            return 2;
        }
        if (type == 'Q') {
            e->pending = 1;
            e->pending_version = version;
            e->pending_len = len;
            queued++;
        } else if (type == 'I') {
            e->pending = 1;
            e->pending_version = version;
            e->pending_len = len;
        } else if (type == 'A') {
            e->acked = 1;
            e->acked_version = version;
            e->acked_len = len;
            e->pending = 0;
            acked++;
        }
    }
    fclose(f);

    ssd = open_env(dir);
    for (size_t i = 0; i < count; i++) {
        expect_t *e = &tab[i];
        ssd_key_t key = crash_key(e->kind, e->n);
        size_t len = 0;
        st_status_t status = ssd_get_buf(ssd, &key, got, MAX_LEN, &len, NULL);
        int ok = 0;

        if (status == ST_OK) {
            if (e->acked && len == e->acked_len) {
                gen(want, len, e->acked_version);
                ok = memcmp(want, got, len) == 0;
            }
            if (!ok && e->pending && len == e->pending_len) {
                gen(want, len, e->pending_version);
                ok = memcmp(want, got, len) == 0;
                pending_seen += ok;
            }
        } else if (status == ST_ERR_NOT_FOUND) {
            ok = !e->acked; /* only an unacknowledged write may be missing */
        }
        if (!ok) {
            bad++;
            fprintf(stderr, "BAD kind=%u n=%" PRIu64 " status=%s len=%zu acked=%d\n", e->kind, e->n,
                    st_status_name(status), len, e->acked);
        }
    }
    ssd_stats(ssd, &st);
    printf("verify keys=%zu acks=%zu queued=%zu unacked_found=%zu bad=%zu corrupt=%" PRIu64 "\n",
           count, acked, queued, pending_seen, bad, st.corrupt);
    ssd_close(ssd);
    free(tab);
    free(want);
    free(got);
    return bad == 0 && st.corrupt == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
    lg_set_level(LG_WARN);
    if (argc == 4 && strcmp(argv[1], "write") == 0) {
        return do_write(argv[2], strtoull(argv[3], NULL, 10));
    }
    if (argc == 4 && strcmp(argv[1], "verify") == 0) {
        return do_verify(argv[2], argv[3]);
    }
    fprintf(stderr, "usage: %s write DIR RUN | verify DIR LOG\n", argv[0]);
    return 2;
}
