/*
 * dp_verify.c - whether what a get landed is the committed object: whole
 * objects by their lease or by XXH3-64 against Locate's checksum, rows by
 * the row sums the daemon computed at commit (dp_internal.h).
 */
#include "dp_internal.h"

#include <pthread.h>

#include "rowsum.h"
#include "log.h"
/* Checksums of whole objects run at memory speed over every byte read:
 * libxxhash's runtime dispatch where it has one (xxh.h). */
#include "xxh.h"

/* Checksums of whole objects landed by one-sided gets, over [lo, hi). */
typedef struct sc_dp_verify {
    st_handle_t *h;
    sc_dp_op_t *ops;
    size_t lo, hi;
} sc_dp_verify_t;

static void *sc_dp_verify_range(void *arg)
{
    sc_dp_verify_t *v = arg;

    for (size_t i = v->lo; i < v->hi; i++) {
        const st_get_op_t *op = &v->h->gets[i];
        sc_dp_op_t *o = &v->ops[i];

        if (o->posted && !o->failed && op->n_rows == 0) {
            o->verified =
                !o->check || (o->prechecked ? o->prechecked == 2
                                            : XXH3_64bits(op->dst, op->length) == o->checksum);
        }
    }
    return NULL;
}

/*
 * Checks the whole objects that landed and must be checked (o->check; the
 * others are vouched for by their lease). Hashing costs about as much CPU
 * as the copy itself, so a large batch is split over two threads (the
 * machine this was tuned on has two cores; more would not pay on one
 * socket's memory bandwidth).
 */
void sc_dp_verify_all(st_handle_t *h, sc_dp_op_t *ops, size_t n)
{
    sc_dp_verify_t a = {h, ops, 0, n}, b;
    uint64_t bytes = 0, half = 0;
    size_t split = n;
    pthread_t th;

    for (size_t i = 0; i < n; i++) {
        if (ops[i].posted && ops[i].check && !ops[i].prechecked && h->gets[i].n_rows == 0) {
            bytes += h->gets[i].length;
        }
    }
    if (bytes >= (8u << 20) && n > 1) {
        for (size_t i = 0; i < n; i++) {
            if (ops[i].posted && ops[i].check && !ops[i].prechecked && h->gets[i].n_rows == 0) {
                half += h->gets[i].length;
            }
            if (half >= bytes / 2) {
                split = i + 1;
                break;
            }
        }
    }
    if (split < n) {
        b = (sc_dp_verify_t){h, ops, split, n};
        a.hi = split;
        if (pthread_create(&th, NULL, sc_dp_verify_range, &b) == 0) {
            sc_dp_verify_range(&a);
            pthread_join(th, NULL);
            return;
        }
        a.hi = n;
    }
    sc_dp_verify_range(&a);
}

/* Whether every row of op that landed in dst matches its row sum (o->rsum,
 * as the daemon computed it at commit), checked at the post (now_checked)
 * or here. A mismatch is counted and logged (rate-limited); the caller
 * makes the op a miss. */
int sc_dp_rows_ok(sc_dp_t *dp, const st_get_op_t *op, const sc_dp_op_t *o)
{
    const uint8_t *dst = op->dst;
    uint32_t bad = UINT32_MAX;

    if (dp->rows_unverified) {
        return 1; /* benches only: the rows as they landed, under the lease */
    }
    if (!o->has_rsum) {
        return 0;
    }
    if (o->now_checked) {
        bad = o->now_bad ? o->now_row : bad;
    }
    for (uint32_t x = 0; !o->now_checked && bad == UINT32_MAX && x < op->n_rows; x++) {
        if (pr_rowsum(dst + (size_t)x * op->row_bytes, op->row_bytes) != o->rsum[x]) {
            bad = op->rows[x];
        }
    }
    if (bad != UINT32_MAX) {
        atomic_fetch_add(&dp->rows_refused, 1);
        lg_warn_ratelimited("get: a row read does not match its row sum (changed after its "
                            "commit, or its extent reused): a miss row=%u row_bytes=%u",
                            bad, op->row_bytes);
        return 0;
    }
    return 1;
}
