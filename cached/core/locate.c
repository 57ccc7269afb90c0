/* locate.c - where committed objects are (Locate, with a lease) and the
 * chain lookup over the prefix tree (Lookup, plain or compact). */
#include <string.h>

#include "store_internal.h"

static st_status_t check_lease(const cd_store_t *s, uint64_t lease_ms, cd_err_t *err)
{
    uint64_t max = s->ss_cfg.limits.max_lease_ms;

    if (lease_ms != CD_LEASE_DEFAULT && lease_ms > max) {
        return cd_errf(err, ST_ERR_INVALID,
                       "lease of %llu ms refused: the limit max_lease_ms is %llu",
                       (unsigned long long)lease_ms, (unsigned long long)max);
    }
    return ST_OK;
}

/* Ends a locate's or a lookup's lease l (NULL: none asked): granted from
 * now when it holds blocks, else freed. Writes its id (0: none) and its
 * end to whichever of lease_id_p and expires_p is not NULL. */
static void do_lease_settle(cd_ns_t *ns, cd_lease_t *l, uint64_t now, uint64_t lease_ms,
                            uint64_t *lease_id_p, uint64_t *expires_p)
{
    if (lease_id_p != NULL) {
        *lease_id_p = 0;
    }
    if (l != NULL && l->ls_n == 0) {
        do_lease_free(ns, l);
    } else if (l != NULL) {
        do_lease_grant(ns, l, now, lease_ms);
        if (lease_id_p != NULL) {
            *lease_id_p = l->ls_id;
        }
        if (expires_p != NULL) {
            *expires_p = l->ls_expires;
        }
    }
}

static st_status_t do_locate(cd_ns_t *ns, const cd_key_t *keys, size_t n, uint64_t lease_ms,
                             cd_located_t *out, uint64_t *lease_id_p, uint64_t *expires_p,
                             cd_err_t *err)
{
    uint64_t now = cd_store_now(ns->ns_store);
    cd_lease_t *l = NULL;
    st_status_t st;

    if (lease_ms != CD_LEASE_NONE) {
        st = do_lease_alloc(ns, n, &l, err);
        if (st != ST_OK) {
            return st;
        }
    }
    ns->ns_st.locates++;
    ns->ns_st.locate_keys += n;
    for (size_t i = 0; i < n; i++) {
        cd_obj_t *o = cd_htab_find(&ns->ns_objs, &keys[i].hash, cd_obj_tag(&keys[i]));

        memset(&out[i], 0, sizeof(out[i]));
        if (o == NULL) {
            out[i].status = ST_ERR_NOT_FOUND;
            continue;
        }
        out[i].status = ST_OK;
        cd_obj_location(ns, o, &out[i].where);
        cd_radix_touch(&ns->ns_radix, o->ob_block, now);
        ns->ns_st.locate_hits++;
        if (l != NULL) {
            l->ls_blocks[l->ls_n++] = o->ob_block;
        }
    }
    do_lease_settle(ns, l, now, lease_ms, lease_id_p, expires_p);
    return ST_OK;
}

st_status_t cd_store_locate(cd_store_t *s, uint32_t ns_id, const cd_key_t *keys, size_t n,
                            uint64_t lease_ms, cd_located_t *out, uint64_t *lease_id_p,
                            uint64_t *lease_expires_p, cd_err_t *err)
{
    cd_ns_t *ns;
    st_status_t st =
        cd_ns_find_batch(s, ns_id, keys != NULL && out != NULL, n, "keys in one locate", &ns, err);

    if (st != ST_OK) {
        return st;
    }
    for (size_t i = 0; i < n; i++) {
        st = cd_obj_check_key(ns, &keys[i], err);
        if (st != ST_OK) {
            return st;
        }
    }
    st = check_lease(s, lease_ms, err);
    if (st != ST_OK) {
        return st;
    }
    pthread_mutex_lock(&ns->ns_lock);
    st = do_locate(ns, keys, n, lease_ms, out, lease_id_p, lease_expires_p, err);
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

static st_status_t do_lookup(cd_ns_t *ns, const cd_segment_t *segs, const cd_probes_t *probes,
                             size_t nseg, const cd_require_t *req, uint64_t lease_ms, size_t total,
                             cd_seg_answer_t *answers, uint64_t *kda, size_t kda_cap, size_t *kda_n,
                             uint64_t *lease_id_p, uint64_t *expires_p, cd_err_t *err)
{
    uint64_t now = cd_store_now(ns->ns_store);
    cd_lease_t *l = NULL;
    uint64_t matched = 0;
    st_status_t st;

    if (lease_ms != CD_LEASE_NONE) {
        st = do_lease_alloc(ns, total, &l, err);
        if (st != ST_OK) {
            return st;
        }
    }
    *kda_n = 0;
    for (size_t i = 0; i < nseg; i++) {
        if (probes != NULL && probes[i].offsets != NULL) {
            cd_radix_lookup_compact(&ns->ns_radix, &segs[i], &probes[i], req, now, &answers[i], kda,
                                    kda_cap, kda_n);
        } else {
            cd_radix_lookup(&ns->ns_radix, &segs[i], req, now, &answers[i], kda, kda_cap, kda_n,
                            l != NULL ? l->ls_blocks : NULL, l != NULL ? &l->ls_n : NULL);
        }
        matched += answers[i].matched;
        total -= answers[i].unresolved; /* asked again with their hashes, counted then */
    }
    ns->ns_st.lookups++;
    ns->ns_st.lookup_hits += matched > 0;
    ns->ns_st.lookup_tokens += (uint64_t)total * ns->ns_block_tokens;
    ns->ns_st.hit_tokens += matched * ns->ns_block_tokens;
    do_lease_settle(ns, l, now, lease_ms, lease_id_p, expires_p);
    return ST_OK;
}

st_status_t cd_store_lookup(cd_store_t *s, uint32_t ns_id, const cd_segment_t *segs, size_t nseg,
                            const cd_require_t *req, uint64_t lease_ms, cd_seg_answer_t *answers,
                            uint64_t *kda, size_t kda_cap, size_t *kda_n, uint64_t *lease_id_p,
                            uint64_t *lease_expires_p, cd_err_t *err)
{
    return cd_store_lookup_probes(s, ns_id, segs, NULL, nseg, req, lease_ms, answers, kda, kda_cap,
                                  kda_n, lease_id_p, lease_expires_p, err);
}

st_status_t cd_store_lookup_probes(cd_store_t *s, uint32_t ns_id, const cd_segment_t *segs,
                                   const cd_probes_t *probes, size_t nseg, const cd_require_t *req,
                                   uint64_t lease_ms, cd_seg_answer_t *answers, uint64_t *kda,
                                   size_t kda_cap, size_t *kda_n, uint64_t *lease_id_p,
                                   uint64_t *lease_expires_p, cd_err_t *err)
{
    const cd_limits_t *lim = &s->ss_cfg.limits;
    static const cd_require_t none = {0, {0, 0}};
    cd_ns_t *ns;
    size_t total = 0;
    st_status_t st = cd_ns_find_batch(
        s, ns_id, segs != NULL && answers != NULL && kda_n != NULL && (kda != NULL || kda_cap == 0),
        nseg, "segments in one lookup", &ns, err);

    if (st != ST_OK) {
        return st;
    }
    for (size_t i = 0; i < nseg; i++) {
        const cd_segment_t *sg = &segs[i];

        if (sg->hashes == NULL && sg->n > 0) {
            return cd_errf(err, ST_ERR_INVALID, "segment %zu has no hashes", i);
        }
        if (probes != NULL && probes[i].offsets != NULL) {
            /* Compact: offsets strictly increasing from 0 to n - 1, no lease. */
            const cd_probes_t *pr = &probes[i];
            int ok = sg->n > 0 && pr->n_offsets > 0 && pr->offsets[0] == 0 &&
                     pr->offsets[pr->n_offsets - 1] == sg->n - 1 && lease_ms == CD_LEASE_NONE;

            for (uint32_t j = 1; ok && j < pr->n_offsets; j++) {
                ok = pr->offsets[j] > pr->offsets[j - 1];
            }
            if (!ok) {
                return cd_errf(err, ST_ERR_INVALID,
                               "compact segment %zu: probes must rise from 0 to its last block, "
                               "and it takes no lease",
                               i);
            }
        }
        total += sg->n;
    }
    if (total > lim->max_hashes) {
        return cd_errf(err, ST_ERR_INVALID, "%zu hashes in one lookup: the limit max_hashes is %u",
                       total, lim->max_hashes);
    }
    if (req == NULL) {
        req = &none;
    }
    st = check_lease(s, lease_ms, err);
    if (st != ST_OK) {
        return st;
    }
    if (req->kinds >= (1u << CD_KIND_COUNT) || (req->kinds & (1u << CD_KIND_SESSION))) {
        return cd_errf(err, ST_ERR_INVALID, "required kinds mask 0x%x names unknown kinds",
                       req->kinds);
    }
    pthread_mutex_lock(&ns->ns_lock);
    st = do_lookup(ns, segs, probes, nseg, req, lease_ms, total, answers, kda, kda_cap, kda_n,
                   lease_id_p, lease_expires_p, err);
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}
