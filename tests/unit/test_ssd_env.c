/*
 * test_ssd_env.c - the SSD tier over its environment (cases of test_ssd):
 * a full map, reopening, batched writes, iteration, invalid arguments, a
 * full disk, a stale reader, fork, concurrent readers and writers.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <pthread.h>
#include <stdatomic.h>
#include <cmocka.h>

#include <lmdb.h>
#include <xxhash.h>

#include "log.h"
#include "ssd.h"

#include "test_ssd.h"

void test_map_full(void **state)
{
    enum { LEN = 65536, MAX = 64 };
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 1ull << 20, 0);
    uint8_t *buf = malloc(LEN);
    ssd_stats_t st;
    st_status_t status = ST_OK;
    int n = 0;

    assert_non_null(buf);
    for (n = 0; n < MAX; n++) {
        ssd_key_t k = mkkey(6, (uint64_t)n, SSD_KDA, 0);

        fill(buf, LEN, (uint64_t)n);
        status = ssd_put(ssd, &k, buf, LEN, SSD_DURABLE, NULL, NULL);
        if (status != ST_OK) {
            break;
        }
    }
    assert_int_equal(status, ST_ERR_EXHAUSTED);
    assert_true(n > 2);
    ssd_stats(ssd, &st);
    assert_true(st.map_full >= 1);
    assert_int_equal(st.objects[SSD_KDA], (uint64_t)n);
    /* Nothing of the refused write is there; everything before it reads back. */
    ssd_key_t failed = mkkey(6, (uint64_t)n, SSD_KDA, 0);
    size_t len;
    assert_int_equal(ssd_get_buf(ssd, &failed, buf, LEN, &len, NULL), ST_ERR_NOT_FOUND);
    for (int i = 0; i < n; i++) {
        ssd_key_t k = mkkey(6, (uint64_t)i, SSD_KDA, 0);

        check_value(ssd, &k, LEN, (uint64_t)i);
    }
    /* A queued put reports the same through its callback. */
    done_ok = done_other = 0;
    fill(buf, LEN, 999);
    assert_int_equal(ssd_put(ssd, &failed, buf, LEN, 0, count_done, NULL), ST_OK);
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    assert_int_equal(done_other, 1);
    /* Deleting makes room again (LMDB reuses freed pages from the second
     * transaction after the one that freed them). */
    for (uint64_t i = 0; i < 2; i++) {
        ssd_key_t del = mkkey(6, i, SSD_KDA, 0);

        assert_int_equal(ssd_delete(ssd, &del, SSD_DURABLE, NULL, NULL), ST_OK);
    }
    put_durable(ssd, &failed, 4096, 1234);
    check_value(ssd, &failed, 4096, 1234);
    ssd_close(ssd);
    remove_dir(dir);

    /* Spilled data gives way to durable writes when the map is full. */
    dir = make_dir();
    ssd = open_env(dir, 2ull << 20, 1ull << 30);
    for (int i = 0; i < 100; i++) {
        ssd_key_t k = mkkey(7, (uint64_t)i, SSD_KV, 0);

        spill_copy(ssd, &k, LEN, (uint64_t)i);
        assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    }
    ssd_stats(ssd, &st);
    assert_true(st.evictions > 0);
    assert_int_equal(st.spill_failed, 0);
    ssd_key_t kda = mkkey(7, 1, SSD_KDA, 0);
    put_durable(ssd, &kda, 4 * LEN, 55);
    check_value(ssd, &kda, 4 * LEN, 55);
    ssd_key_t newest = mkkey(7, 99, SSD_KV, 0);
    check_value(ssd, &newest, LEN, 99);
    ssd_close(ssd);
    free(buf);
    remove_dir(dir);
}

void test_reopen(void **state)
{
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    ssd_stats_t st;
    ssd_meta_t m1, m2;
    uint8_t b[2048];
    size_t len;

    for (uint64_t i = 0; i < 50; i++) {
        ssd_key_t kd = mkkey(8, i, SSD_KDA, 1), kv = mkkey(8, i, SSD_KV, 1);

        put_durable(ssd, &kd, 1000 + i, i);
        spill_copy(ssd, &kv, 2000 + i, 500 + i);
    }
    ssd_key_t k0 = mkkey(8, 0, SSD_KDA, 1);
    assert_int_equal(ssd_get_buf(ssd, &k0, NULL, 0, &len, &m1), ST_ERR_EXHAUSTED);
    assert_int_equal(len, 1000);
    assert_int_equal(ssd_get_buf(ssd, &k0, b, sizeof(b), &len, &m1), ST_OK);
    ssd_close(ssd); /* commits the queued spills */

    ssd = open_env(dir, 64ull << 20, 0);
    for (uint64_t i = 0; i < 50; i++) {
        ssd_key_t kd = mkkey(8, i, SSD_KDA, 1), kv = mkkey(8, i, SSD_KV, 1);

        check_value(ssd, &kd, 1000 + i, i);
        check_value(ssd, &kv, 2000 + i, 500 + i);
    }
    ssd_stats(ssd, &st);
    assert_int_equal(st.objects[SSD_KDA], 50);
    assert_int_equal(st.objects[SSD_KV], 50);
    assert_int_equal(st.bytes[SSD_KDA], 50 * 1000 + 49 * 50 / 2);
    /* The write sequence continues across opens. */
    put_durable(ssd, &k0, 8, 1);
    assert_int_equal(ssd_get_buf(ssd, &k0, b, sizeof(b), &len, &m2), ST_OK);
    assert_true(m2.seq > m1.seq);
    assert_true(m2.flags & SSD_DURABLE);
    ssd_close(ssd);
    remove_dir(dir);
}

void test_async_batching(void **state)
{
    enum { N = 1000, LEN = 1024 };
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    ssd_stats_t before, after;
    uint8_t buf[LEN];
    ssd_params_t p = {0};

    ssd_stats(ssd, &before);
    ssd_pause(ssd, 1);
    for (uint64_t i = 0; i < N; i++) {
        ssd_key_t k = mkkey(9, i, i % 2 ? SSD_SESSION : SSD_KDA, 0);

        fill(buf, LEN, i);
        assert_int_equal(ssd_put(ssd, &k, buf, LEN, 0, NULL, NULL), ST_OK);
    }
    ssd_stats(ssd, &after);
    assert_int_equal(after.txns, before.txns); /* held: nothing committed yet */
    ssd_pause(ssd, 0);
    assert_int_equal(ssd_flush(ssd, 1), ST_OK);
    ssd_stats(ssd, &after);
    /* 1000 puts (1 MB) fit one batch; the flush barrier may need one more. */
    assert_true(after.txns - before.txns <= 2);
    assert_int_equal(after.puts, N);
    assert_int_equal(after.durable_puts, 0);
    for (uint64_t i = 0; i < N; i++) {
        ssd_key_t k = mkkey(9, i, i % 2 ? SSD_SESSION : SSD_KDA, 0);

        check_value(ssd, &k, LEN, i);
    }
    ssd_close(ssd);
    remove_dir(dir);

    /* A full queue: NOWAIT callers are told, not blocked. */
    dir = make_dir();
    p.dir = dir;
    p.map_size = 16ull << 20;
    p.queue_max = 8;
    assert_int_equal(ssd_open(&p, &ssd), ST_OK);
    ssd_pause(ssd, 1);
    for (uint64_t i = 0; i < 8; i++) {
        ssd_key_t k = mkkey(10, i, SSD_KV, 0);

        assert_int_equal(ssd_spill(ssd, &k, buf, 64, SSD_NOWAIT, NULL, NULL), ST_OK);
    }
    ssd_key_t k9 = mkkey(10, 9, SSD_KV, 0);
    assert_int_equal(ssd_spill(ssd, &k9, buf, 64, SSD_NOWAIT, NULL, NULL), ST_ERR_BUSY);
    ssd_stats(ssd, &after);
    assert_int_equal(after.spill_failed, 1);
    ssd_pause(ssd, 0);
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    ssd_stats(ssd, &after);
    assert_int_equal(after.objects[SSD_KV], 8);
    ssd_close(ssd);
    remove_dir(dir);
}

typedef struct iter_state {
    uint8_t prev[SSD_KEY_BYTES];
    uint64_t n;
    uint64_t per_kind[SSD_KIND_MAX_];
    int ordered;
    int checks_ok;
    uint64_t stop_after;
} iter_state_t;

static int iter_cb(void *arg, const ssd_key_t *key, const ssd_meta_t *meta)
{
    iter_state_t *s = arg;
    uint8_t kb[SSD_KEY_BYTES];
    uint8_t buf[4096];
    uint64_t i = 0;

    ssd_key_encode(key, kb);
    if (s->n > 0 && memcmp(s->prev, kb, sizeof(kb)) >= 0) {
        s->ordered = 0;
    }
    memcpy(s->prev, kb, sizeof(kb));
    for (int b = 7; b >= 0; b--) {
        i = (i << 8) | key->id.b[b];
    }
    /* Every object was written as 100 + i bytes from seed ns * 1000 + i. */
    fill(buf, 100 + i, key->ns * 1000 + i + key->kind);
    if (meta->length != 100 + i || meta->checksum != XXH3_64bits(buf, 100 + i)) {
        s->checks_ok = 0;
    }
    s->per_kind[key->kind]++;
    s->n++;
    return s->stop_after != 0 && s->n >= s->stop_after;
}

void test_iterate(void **state)
{
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    iter_state_t s;
    uint64_t count = 0;
    uint8_t buf[4096];

    /* Written out of order, namespaces interleaved. */
    for (uint64_t i = 30; i-- > 0;) {
        for (uint64_t ns = 3; ns >= 1; ns--) {
            for (unsigned kind = SSD_KV; kind <= SSD_SESSION; kind++) {
                ssd_key_t k = mkkey(ns, i, kind, (uint16_t)(i % 3));

                fill(buf, 100 + i, ns * 1000 + i + kind);
                if (kind == SSD_KV || kind == SSD_IDX) {
                    assert_int_equal(ssd_spill(ssd, &k, buf, 100 + i, 0, NULL, NULL), ST_OK);
                } else {
                    assert_int_equal(ssd_put(ssd, &k, buf, 100 + i, 0, NULL, NULL), ST_OK);
                }
            }
        }
    }
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    memset(&s, 0, sizeof(s));
    s.ordered = s.checks_ok = 1;
    assert_int_equal(ssd_iterate(ssd, iter_cb, &s, &count), ST_OK);
    assert_int_equal(count, 360);
    assert_int_equal(s.n, 360);
    assert_true(s.ordered);
    assert_true(s.checks_ok);
    for (unsigned kind = SSD_KV; kind <= SSD_SESSION; kind++) {
        assert_int_equal(s.per_kind[kind], 90);
    }
    memset(&s, 0, sizeof(s));
    s.ordered = s.checks_ok = 1;
    s.stop_after = 7;
    assert_int_equal(ssd_iterate(ssd, iter_cb, &s, &count), ST_OK);
    assert_int_equal(count, 7);
    ssd_close(ssd);
    remove_dir(dir);
}

void test_invalid(void **state)
{
    char *dir = make_dir();
    char path[512];
    ssd_params_t p = {0};
    ssd_t *ssd = NULL;
    ssd_key_t kv = mkkey(1, 1, SSD_KV, 0), kda = mkkey(1, 1, SSD_KDA, 0);
    ssd_key_t bad = mkkey(1, 1, 9, 0);
    uint8_t b[8] = {0};
    size_t len;
    int fd;

    assert_int_equal(ssd_open(NULL, &ssd), ST_ERR_INVALID);
    assert_int_equal(ssd_open(&p, &ssd), ST_ERR_INVALID);
    snprintf(path, sizeof(path), "%s/no/such/parent", dir);
    p.dir = path;
    assert_int_equal(ssd_open(&p, &ssd), ST_ERR_IO);
    snprintf(path, sizeof(path), "%s/plainfile", dir);
    fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(ssd_open(&p, &ssd), ST_ERR_IO);
    p.dir = dir;
    p.map_size = 4096;
    assert_int_equal(ssd_open(&p, &ssd), ST_ERR_INVALID);
    assert_null(ssd);

    ssd = open_env(dir, 16ull << 20, 0);
    assert_int_equal(ssd_put(ssd, &kv, b, sizeof(b), SSD_DURABLE, NULL, NULL), ST_ERR_INVALID);
    assert_int_equal(ssd_spill(ssd, &kda, b, sizeof(b), 0, NULL, NULL), ST_ERR_INVALID);
    assert_int_equal(ssd_put(ssd, &bad, b, sizeof(b), 0, NULL, NULL), ST_ERR_INVALID);
    assert_int_equal(ssd_put(ssd, &kda, NULL, 5, 0, NULL, NULL), ST_ERR_INVALID);
    assert_int_equal(ssd_get_buf(ssd, &bad, b, sizeof(b), &len, NULL), ST_ERR_INVALID);
    assert_int_equal(ssd_delete(ssd, &bad, 0, NULL, NULL), ST_ERR_INVALID);
    assert_int_equal(ssd_iterate(ssd, NULL, NULL, NULL), ST_ERR_INVALID);
    ssd_close(ssd);
    ssd_close(NULL);
    remove_dir(dir);
}

/* The disk refuses more bytes (a file size limit stands in for a full disk). */
void test_disk_full(void **state)
{
    enum { LEN = 65536 };
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 256ull << 20, 0);
    char path[512];
    struct stat sb;
    struct rlimit old, lim;
    st_status_t status = ST_OK;
    ssd_stats_t st;
    uint8_t *buf = malloc(LEN);
    int n;

    assert_non_null(buf);
    for (n = 0; n < 4; n++) {
        ssd_key_t k = mkkey(11, (uint64_t)n, SSD_KDA, 0);

        put_durable(ssd, &k, LEN, (uint64_t)n);
    }
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    assert_int_equal(stat(path, &sb), 0);
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)sb.st_size + 512 * 1024;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    for (; n < 64; n++) {
        ssd_key_t k = mkkey(11, (uint64_t)n, SSD_KDA, 0);

        fill(buf, LEN, (uint64_t)n);
        status = ssd_put(ssd, &k, buf, LEN, SSD_DURABLE, NULL, NULL);
        if (status != ST_OK) {
            break;
        }
    }
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_DFL);
    assert_int_equal(status, ST_ERR_EXHAUSTED);
    ssd_stats(ssd, &st);
    assert_true(st.write_errors >= 1);
    assert_int_equal(st.objects[SSD_KDA], (uint64_t)n);
    /* Reads keep working; the refused write left nothing. */
    for (int i = 0; i < n; i++) {
        ssd_key_t k = mkkey(11, (uint64_t)i, SSD_KDA, 0);

        check_value(ssd, &k, LEN, (uint64_t)i);
    }
    ssd_key_t failed = mkkey(11, (uint64_t)n, SSD_KDA, 0);
    size_t len;
    assert_int_equal(ssd_get_buf(ssd, &failed, buf, LEN, &len, NULL), ST_ERR_NOT_FOUND);
    /* With room again, writes succeed, and everything survives a reopen. */
    put_durable(ssd, &failed, LEN, 4321);
    ssd_close(ssd);
    ssd = open_env(dir, 256ull << 20, 0);
    check_value(ssd, &failed, LEN, 4321);
    ssd_key_t first = mkkey(11, 0, SSD_KDA, 0);
    check_value(ssd, &first, LEN, 0);
    ssd_close(ssd);
    free(buf);
    remove_dir(dir);
}

/*
 * A process that died inside a read transaction leaves a reader slot with
 * its pid, which a live environment must clear. The helper is this binary
 * run again (fork + exec, so it inherits no environment): it opens the
 * environment with raw LMDB, begins a read transaction and exits.
 */
int hold_reader_main(const char *dir)
{
    MDB_env *env;
    MDB_txn *txn;

    if (mdb_env_create(&env) != 0 || mdb_env_set_maxdbs(env, 8) != 0 ||
        mdb_env_open(env, dir, MDB_NOTLS, 0640) != 0 ||
        mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) != 0) {
        return 1;
    }
    _exit(0); /* dies holding the read transaction */
}

void test_stale_reader(void **state)
{
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 16ull << 20, 0);
    char *argv[] = {"/proc/self/exe", "--hold-reader", dir, NULL};
    int wstatus, cleared = -1;
    ssd_stats_t st;
    pid_t pid;

    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);
    assert_int_equal(ssd_reader_check(ssd, &cleared), ST_OK);
    assert_int_equal(cleared, 1);
    ssd_stats(ssd, &st);
    assert_int_equal(st.stale_readers, 1);
    assert_int_equal(ssd_reader_check(ssd, &cleared), ST_OK);
    assert_int_equal(cleared, 0);
    ssd_close(ssd);
    remove_dir(dir);
}

/* A child that inherited an open environment is refused, and touches nothing. */
void test_fork_guard(void **state)
{
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 16ull << 20, 0);
    ssd_key_t k = mkkey(12, 1, SSD_KDA, 0);
    int wstatus;
    pid_t pid;

    put_durable(ssd, &k, 100, 1);
    ssd_flush(ssd, 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        uint8_t b[128];
        size_t len;
        int log_fd = open("/dev/null", O_WRONLY);

        lg_set_fd(log_fd);
        _exit(ssd_get_buf(ssd, &k, b, sizeof(b), &len, NULL) == ST_ERR_INVALID &&
                      ssd_put(ssd, &k, b, 10, 0, NULL, NULL) == ST_ERR_INVALID
                  ? 0
                  : 1);
    }
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);
    check_value(ssd, &k, 100, 1);
    ssd_close(ssd);
    remove_dir(dir);
}

/* Several writers (durable puts, spills) and readers at once. */
enum { CW_THREADS = 4, CW_PUTS = 100, CW_LEN = 2048 };

typedef struct cw_arg {
    ssd_t *ssd;
    int id;
    _Atomic int *acked; /* per writer: durable puts acknowledged so far */
    _Atomic int *stop;
    int failures;
} cw_arg_t;

static void *cw_writer(void *p)
{
    cw_arg_t *a = p;
    uint8_t buf[CW_LEN];

    for (int i = 0; i < CW_PUTS; i++) {
        ssd_key_t k = mkkey(20, (uint64_t)(a->id * 1000 + i), SSD_KDA, 0);
        ssd_key_t kv = mkkey(20, (uint64_t)(a->id * 1000 + i), SSD_KV, 1);

        fill(buf, CW_LEN, (uint64_t)(a->id * 1000 + i));
        if (ssd_put(a->ssd, &k, buf, CW_LEN, SSD_DURABLE, NULL, NULL) != ST_OK ||
            ssd_spill(a->ssd, &kv, buf, CW_LEN, 0, NULL, NULL) != ST_OK) {
            a->failures++;
        }
        atomic_store(&a->acked[a->id], i + 1);
    }
    return NULL;
}

static void *cw_reader(void *p)
{
    cw_arg_t *a = p;
    uint8_t want[CW_LEN], got[CW_LEN];
    uint64_t x = 12345 + (uint64_t)a->id;

    while (!atomic_load(a->stop)) {
        int w, n, i;
        size_t len;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w = (int)(x % CW_THREADS);
        n = atomic_load(&a->acked[w]);
        if (n == 0) {
            continue;
        }
        i = (int)((x >> 8) % (uint64_t)n);
        ssd_key_t k = mkkey(20, (uint64_t)(w * 1000 + i), SSD_KDA, 0);
        fill(want, CW_LEN, (uint64_t)(w * 1000 + i));
        /* An acknowledged durable put is readable, with its bytes, at once. */
        if (ssd_get_buf(a->ssd, &k, got, sizeof(got), &len, NULL) != ST_OK || len != CW_LEN ||
            memcmp(want, got, CW_LEN) != 0) {
            a->failures++;
        }
    }
    return NULL;
}

void test_concurrent(void **state)
{
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    pthread_t wt[CW_THREADS], rt[2];
    cw_arg_t wa[CW_THREADS], ra[2];
    _Atomic int acked[CW_THREADS], stop = 0;
    ssd_stats_t st;

    for (int i = 0; i < CW_THREADS; i++) {
        atomic_init(&acked[i], 0);
    }
    for (int i = 0; i < 2; i++) {
        ra[i] = (cw_arg_t){ssd, i, acked, &stop, 0};
        assert_int_equal(pthread_create(&rt[i], NULL, cw_reader, &ra[i]), 0);
    }
    for (int i = 0; i < CW_THREADS; i++) {
        wa[i] = (cw_arg_t){ssd, i, acked, &stop, 0};
        assert_int_equal(pthread_create(&wt[i], NULL, cw_writer, &wa[i]), 0);
    }
    for (int i = 0; i < CW_THREADS; i++) {
        pthread_join(wt[i], NULL);
        assert_int_equal(wa[i].failures, 0);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) {
        pthread_join(rt[i], NULL);
        assert_int_equal(ra[i].failures, 0);
    }
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    ssd_stats(ssd, &st);
    assert_int_equal(st.durable_puts, CW_THREADS * CW_PUTS);
    assert_int_equal(st.spills, CW_THREADS * CW_PUTS);
    assert_int_equal(st.objects[SSD_KDA], CW_THREADS * CW_PUTS);
    assert_int_equal(st.objects[SSD_KV], CW_THREADS * CW_PUTS);
    assert_int_equal(st.corrupt, 0);
    for (int w = 0; w < CW_THREADS; w++) {
        for (int i = 0; i < CW_PUTS; i += 7) {
            ssd_key_t kv = mkkey(20, (uint64_t)(w * 1000 + i), SSD_KV, 1);

            check_value(ssd, &kv, CW_LEN, (uint64_t)(w * 1000 + i));
        }
    }
    ssd_close(ssd);
    remove_dir(dir);
}
