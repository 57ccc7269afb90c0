/* test_store_model.c - thousands of random operations on a small store under
 * memory pressure (puts in chain order, gets, lookups with and without
 * leases, releases, pins, reserve/commit with right and wrong checksums,
 * aborts, time passing), checked against a naive model:
 *   - a get returns exactly the bytes put, or a miss if the block was
 *     evicted; never other bytes;
 *   - every object of a leased or pinned block is still there;
 *   - a chain's present blocks are a prefix (never a suffix without its
 *     prefix), and lookup answers exactly that prefix;
 *   - memory used never passes the limit; the index invariants hold.
 * The seed is printed; STRATA_TEST_SEED=<n> replays a run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <cmocka.h>

#include "store_internal.h"
#include "test_store_util.h"
#include "support/unit_main.h"

#define CHAINS   12
#define LEN      48
#define LAYERS   2
#define MAXLEASE 64

static cd_store_t *S;
static uint32_t NS, NS2;
static uint32_t other_n;
static unsigned seed;
static int m_put[CHAINS][LEN][LAYERS]; /* object committed at some time */
static uint32_t m_len[CHAINS][LEN][LAYERS];
static int m_hold[CHAINS][LEN]; /* leases + pins in the model */
static int m_pins[CHAINS][LEN];
static int m_alive[CHAINS][LEN][LAYERS]; /* present when the hold began, or put since */
static struct {
    uint64_t id;
    int n;
    int c[LEN];
    int i[LEN];
} m_lease[MAXLEASE];

static uint32_t obj_len(int c, int i, int l)
{
    return 200 + (uint32_t)((c * 7919 + i * 104729 + l * 31) % 40000);
}

static int present(int c, int i, int l)
{
    cd_key_t k = t_key((uint32_t)c, (uint32_t)i, CD_KIND_KV, (uint32_t)l);
    static uint8_t out[65536], expect[65536];
    uint64_t len = 0;
    cd_err_t err;
    st_status_t st = cd_store_get(S, NS, &k, out, sizeof(out), &len, NULL, &err);

    if (st == ST_ERR_NOT_FOUND) {
        return 0;
    }
    if (st != ST_OK) {
        fail_msg("seed=%u: get (%d,%d,%d) failed: %s", seed, c, i, l, err.msg);
    }
    if (!m_put[c][i][l]) {
        fail_msg("seed=%u: get (%d,%d,%d) found an object never put", seed, c, i, l);
    }
    t_fill(expect, m_len[c][i][l], &k);
    if (len != m_len[c][i][l] || memcmp(out, expect, len) != 0) {
        fail_msg("seed=%u: get (%d,%d,%d) returned other bytes", seed, c, i, l);
    }
    return 1;
}

static int block_present(int c, int i)
{
    st_hash_t h = t_hash((uint32_t)c, (uint32_t)i);

    return cd_radix_find(&S->ss_ns[NS - 1]->ns_radix, &h) != NULL;
}

/* A hold begins: what is present now must stay while it lasts. */
static void hold_inc(int c, int i)
{
    if (m_hold[c][i]++ == 0) {
        for (int l = 0; l < LAYERS; l++) {
            m_alive[c][i][l] = present(c, i, l);
        }
    }
}

static uint32_t lookup(int c, int lease, uint64_t *lease_id)
{
    st_hash_t hs[LEN];
    cd_segment_t seg = {0, LEN, hs};
    cd_seg_answer_t ans;
    cd_require_t req = {1u << CD_KIND_KV, {1, 0}}; /* layer 0 */
    size_t kn;
    cd_err_t err;

    for (int i = 0; i < LEN; i++) {
        hs[i] = t_hash((uint32_t)c, (uint32_t)i);
    }
    if (cd_store_lookup(S, NS, &seg, 1, &req, lease ? CD_LEASE_DEFAULT : CD_LEASE_NONE, &ans, NULL,
                        0, &kn, lease_id, NULL, &err) != ST_OK) {
        fail_msg("seed=%u: lookup failed: %s", seed, err.msg);
    }
    return ans.matched;
}

static void check_all(int step)
{
    char msg[256];
    cd_stats_t s;

    if (cd_radix_check(&S->ss_ns[NS - 1]->ns_radix, msg) != ST_OK) {
        fail_msg("seed=%u step=%d: index invariant: %s", seed, step, msg);
    }
    assert_int_equal(cd_store_stats(S, 0, &s), ST_OK);
    if (s.memory_used > s.memory_limit) {
        fail_msg("seed=%u step=%d: used %llu > limit %llu", seed, step,
                 (unsigned long long)s.memory_used, (unsigned long long)s.memory_limit);
    }
    for (int c = 0; c < CHAINS; c++) {
        uint32_t prefix = 0;

        while (prefix < LEN && block_present(c, (int)prefix)) {
            prefix++;
        }
        for (int i = 0; i < LEN; i++) {
            int p = block_present(c, i);

            if (i >= (int)prefix && p) {
                fail_msg("seed=%u step=%d: chain %d keeps block %d without block %u", seed, step, c,
                         i, prefix);
            }
            if (m_hold[c][i] && !p) {
                fail_msg("seed=%u step=%d: held block (%d,%d) was evicted", seed, step, c, i);
            }
            for (int l = 0; l < LAYERS; l++) {
                int o = present(c, i, l);

                if (m_hold[c][i] && m_alive[c][i][l] && !o) {
                    fail_msg("seed=%u step=%d: object of held block (%d,%d) lost", seed, step, c,
                             i);
                }
            }
        }
    }
}

/*
 * One step of the model, one kind of operation each. A step returns 1 where
 * the step ends there (the store was full, nothing to do), 0 where the
 * model's leases and invariants are checked after it.
 */

/* Puts the next block of chain c (in chain order), layer l. */
static int step_put(int step, int c, int l)
{
    int i = (int)lookup(c, 0, NULL);
    cd_key_t k;
    static uint8_t buf[65536];
    st_hash_t p;
    cd_err_t err;

    if (i > 0 && rand() % 3 == 0) {
        i--; /* or another layer of the last present block */
    }
    if (i >= LEN) {
        return 1;
    }
    k = t_key((uint32_t)c, (uint32_t)i, CD_KIND_KV, (uint32_t)l);
    p = t_hash((uint32_t)c, (uint32_t)(i - 1));
    m_len[c][i][l] = obj_len(c, i, l);
    t_fill(buf, m_len[c][i][l], &k);
    st_status_t st = cd_store_put(S, NS, &k, i > 0 ? &p : NULL, buf, m_len[c][i][l], &err);
    if (st == ST_ERR_EXHAUSTED) {
        return 1; /* everything held: allowed */
    }
    if (st != ST_OK) {
        fail_msg("seed=%u step=%d: put failed: %s", seed, step, err.msg);
    }
    m_put[c][i][l] = 1;
    m_alive[c][i][l] = 1;
    return 0;
}

/* Looks chain c up, with a lease when a lease slot is free. */
static int step_lookup(int step, int c)
{
    int slot = rand() % MAXLEASE;
    uint64_t id = 0;

    if (m_lease[slot].id != 0) {
        (void)lookup(c, 0, NULL);
        return 1;
    }
    uint32_t m = lookup(c, 1, &id);
    if ((m == 0) != (id == 0)) {
        fail_msg("seed=%u step=%d: lease id %llu for %u blocks", seed, step, (unsigned long long)id,
                 m);
    }
    if (id != 0) {
        m_lease[slot].id = id;
        m_lease[slot].n = (int)m;
        for (int j = 0; j < (int)m; j++) {
            m_lease[slot].c[j] = c;
            m_lease[slot].i[j] = j;
            hold_inc(c, j);
        }
    }
    return 0;
}

/* Releases the lease of a random slot. */
static int step_release(void)
{
    int slot = rand() % MAXLEASE;

    if (m_lease[slot].id == 0) {
        return 1;
    }
    assert_int_equal(cd_store_release(S, NS, m_lease[slot].id), ST_OK);
    for (int j = 0; j < m_lease[slot].n; j++) {
        m_hold[m_lease[slot].c[j]][m_lease[slot].i[j]]--;
    }
    m_lease[slot].id = 0;
    return 0;
}

/* Pins or unpins a random block of chain c. */
static void step_pin(int c)
{
    int i = rand() % LEN;
    st_hash_t h = t_hash((uint32_t)c, (uint32_t)i);

    if (m_pins[c][i] > 0 && rand() % 2) {
        assert_int_equal(cd_store_unpin(S, NS, &h), ST_OK);
        m_pins[c][i]--;
        m_hold[c][i]--;
    } else if (m_pins[c][i] < 2 && cd_store_pin(S, NS, &h) == ST_OK) {
        m_pins[c][i]++;
        hold_inc(c, i);
    }
}

/* Reserves the next block of chain c, writes it, commits (sometimes
 * wrongly) or aborts. */
static int step_reserve(int step, int c, int l)
{
    int i = (int)lookup(c, 0, NULL);
    cd_resv_req_t rq = {0};
    cd_resv_t rs;
    static uint8_t buf[65536];
    st_hash_t p = t_hash((uint32_t)c, (uint32_t)(i - 1));
    cd_err_t err;

    if (i >= LEN) {
        return 1;
    }
    rq.key = t_key((uint32_t)c, (uint32_t)i, CD_KIND_KV, (uint32_t)l);
    rq.parent = i > 0 ? &p : NULL;
    rq.length = obj_len(c, i, l);
    st_status_t st = cd_store_reserve(S, NS, &rq, 1, &rs, &err);
    if (st == ST_ERR_EXHAUSTED) {
        return 1;
    }
    assert_int_equal(st, ST_OK);
    if (rs.status == ST_ERR_EXISTS) {
        return 1;
    }
    t_fill(buf, rq.length, &rq.key);
    memcpy((uint8_t *)t_region_base[NS][rs.where.region] + rs.where.offset, buf, rq.length);
    int how = rand() % 4;
    if (how == 0) {
        assert_int_equal(cd_store_abort(S, NS, rs.id), ST_OK);
    } else if (how == 1) {
        /* a wrong checksum, then left to expire */
        assert_int_equal(cd_store_commit(S, NS, rs.id, cd_checksum(buf, 1), &err), ST_ERR_CORRUPT);
    } else {
        st = cd_store_commit(S, NS, rs.id, cd_checksum(buf, rq.length), &err);
        if (st != ST_OK && st != ST_ERR_EXHAUSTED) {
            fail_msg("seed=%u step=%d: commit: %s", seed, step, err.msg);
        }
        if (st == ST_OK) {
            m_put[c][i][l] = 1;
            m_alive[c][i][l] = 1;
            m_len[c][i][l] = (uint32_t)rq.length;
        }
    }
    return 0;
}

/* The other namespace writes a chain of its own. */
static void step_other(int step)
{
    static uint8_t buf[50000];
    cd_key_t k = t_key(1000 + other_n / 32, other_n % 32, CD_KIND_IDX, 0);
    st_hash_t p = t_hash(1000 + other_n / 32, other_n % 32 - 1);
    cd_err_t err;

    memset(buf, (int)other_n, sizeof(buf));
    st_status_t st = cd_store_put(S, NS2, &k, other_n % 32 ? &p : NULL, buf, sizeof(buf), &err);
    if (st != ST_OK && st != ST_ERR_EXHAUSTED) {
        fail_msg("seed=%u step=%d: put in the other namespace: %s", seed, step, err.msg);
    }
    other_n++;
}

/* Expires the model's leases that the store expired. */
static void expire_leases(void)
{
    for (int s = 0; s < MAXLEASE; s++) {
        st_hash_t key = cd_htab_id_key(m_lease[s].id);

        if (m_lease[s].id != 0 && cd_htab_find(&S->ss_ns[NS - 1]->ns_ids, &key, ID_LEASE) == NULL) {
            for (int j = 0; j < m_lease[s].n; j++) {
                m_hold[m_lease[s].c[j]][m_lease[s].i[j]]--;
            }
            m_lease[s].id = 0;
        }
    }
}

/* One random operation; returns 1 where the step ends there. */
static int step_once(int step)
{
    int op = rand() % 100, c = rand() % CHAINS, l = rand() % LAYERS;

    if (op < 40) {
        return step_put(step, c, l);
    } else if (op < 55) { /* get */
        (void)present(c, rand() % LEN, l);
    } else if (op < 65) {
        return step_lookup(step, c);
    } else if (op < 75) {
        return step_release();
    } else if (op < 80) {
        step_pin(c);
    } else if (op < 92) {
        return step_reserve(step, c, l);
    } else if (op < 96) {
        step_other(step);
    } else { /* time passes; leases and reservations expire */
        t_now += (uint64_t)(rand() % 3000);
        cd_store_reap(S, t_now, NULL);
        /* The model's leases expire the same way (granted at t, 5 s). */
    }
    return 0;
}

static void test_random_operations(void **state)
{
    cd_store_config_t cfg;
    cd_err_t err;
    const char *env = getenv("STRATA_TEST_SEED");
    int steps = 6000;

    seed = env != NULL ? (unsigned)strtoul(env, NULL, 10) : (unsigned)time(NULL);
    print_message("test_random_operations seed=%u (STRATA_TEST_SEED=%u to replay)\n", seed, seed);
    srand(seed);
    t_now = 1000;
    t_config(&cfg, 8 * MiB);
    cfg.chunk_bytes = 1 * MiB;
    cfg.page_bytes = 64 * KiB;
    cfg.limits.max_object_bytes = 1 * MiB;
    assert_int_equal(cd_store_create(&cfg, &S, &err), ST_OK);
    assert_int_equal(cd_store_ns_create(S, "t", "m", 64, &NS, &err), ST_OK);
    /* A second namespace competes for the same budget, so memory is also
     * reclaimed across namespaces while the model runs. */
    assert_int_equal(cd_store_ns_create(S, "t", "other", 64, &NS2, &err), ST_OK);

    for (int step = 0; step < steps; step++) {
        if (step_once(step)) {
            continue;
        }
        expire_leases();
        if (step % 50 == 0) {
            check_all(step);
        }
    }
    check_all(steps);
    cd_stats_t s;
    assert_int_equal(cd_store_stats(S, NS, &s), ST_OK);
    cd_stats_t s2;
    assert_int_equal(cd_store_stats(S, NS2, &s2), ST_OK);
    print_message("evicted blocks=%llu exhausted=%llu reclaims=%llu/%llu leases granted=%llu "
                  "expired=%llu reservations expired=%llu\n",
                  (unsigned long long)s.evicted_blocks, (unsigned long long)s.exhausted,
                  (unsigned long long)s.reclaims, (unsigned long long)s2.reclaims,
                  (unsigned long long)s.leases_granted, (unsigned long long)s.leases_expired,
                  (unsigned long long)s.reservations_expired);
    assert_true(s.evicted_blocks > 0); /* the run did put the store under pressure */
    cd_store_destroy(S);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_random_operations));
}
