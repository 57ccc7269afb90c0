/* session.c - session records: their own table per namespace (not arena
 * objects), a list for the reaper, TTL measured from the last update. */
#include <stdlib.h>
#include <string.h>

#include "dlist.h"
#include "store_internal.h"

static cd_sess_t *sess_find(cd_ns_t *ns, const st_hash_t *id)
{
    return cd_htab_find(&ns->ns_ids, id, ID_SESSION);
}

static void sess_drop(cd_ns_t *ns, cd_sess_t *se)
{
    cd_htab_remove(&ns->ns_ids, &se->se_rec.id, ID_SESSION);
    CD_LIST_REMOVE(ns->ns_sess, se, se_prev, se_next);
    ns->ns_st.sessions_active--;
    cd_tenant_release(ns->ns_tn, CD_RES_SESSIONS, 1);
    ns->ns_st.objects[CD_KIND_SESSION]--;
    ns->ns_st.bytes[CD_KIND_SESSION] -= sizeof(cd_sess_t);
    cd_budget_release_meta(&ns->ns_store->ss_budget, sizeof(cd_sess_t));
    free(se);
}

static st_status_t do_session_open(cd_ns_t *ns, const st_hash_t *id, uint64_t ttl_ms,
                                   cd_session_t *out, cd_err_t *err)
{
    const cd_limits_t *l = &ns->ns_store->ss_cfg.limits;
    uint64_t now = cd_store_now(ns->ns_store);
    cd_sess_t *se = id != NULL ? sess_find(ns, id) : NULL;
    void *rec;
    st_status_t st;

    if (se != NULL) {
        /* Reopen: the record stays, its TTL starts again. */
        se->se_rec.updated_ms = now;
        if (ttl_ms != 0) {
            se->se_rec.ttl_ms = ttl_ms;
        }
        *out = se->se_rec;
        return ST_OK;
    }

    if (ns->ns_st.sessions_active >= l->max_sessions) {
        return cd_errf(err, ST_ERR_EXHAUSTED, "limit max_sessions=%llu reached in namespace %u",
                       (unsigned long long)l->max_sessions, ns->ns_id);
    }
    st = cd_tenant_charge(ns->ns_tn, CD_RES_SESSIONS, 1, err);
    if (st != ST_OK) {
        return st;
    }
    st = do_record_alloc(ns, sizeof(*se), sizeof(*se), CD_RES_SESSIONS, "a session", &rec, err);
    if (st != ST_OK) {
        return st;
    }
    se = rec;
    if (id != NULL) {
        se->se_rec.id = *id;
    } else {
        do {
            se->se_rec.id = cd_htab_id_key(do_next_id(ns));
        } while (sess_find(ns, &se->se_rec.id) != NULL);
    }
    se->se_rec.ns_id = ns->ns_id;
    se->se_rec.created_ms = now;
    se->se_rec.updated_ms = now;
    se->se_rec.ttl_ms = ttl_ms != 0 ? ttl_ms : l->session_ttl_ms;
    (void)cd_htab_insert(&ns->ns_ids, &se->se_rec.id, ID_SESSION, se);
    CD_LIST_PUSH(ns->ns_sess, se, se_prev, se_next);
    ns->ns_st.sessions_active++;
    ns->ns_st.objects[CD_KIND_SESSION]++;
    ns->ns_st.bytes[CD_KIND_SESSION] += sizeof(cd_sess_t);
    *out = se->se_rec;
    return ST_OK;
}

st_status_t cd_store_session_open(cd_store_t *s, uint32_t ns_id, const st_hash_t *id,
                                  uint64_t ttl_ms, cd_session_t *out, cd_err_t *err)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    st_status_t st;

    if (ns == NULL) {
        return cd_errf(err, ST_ERR_NOT_FOUND, "no namespace %u", ns_id);
    }
    if (out == NULL) {
        return cd_errf(err, ST_ERR_INVALID, "no record to fill");
    }
    if (ttl_ms > s->ss_cfg.limits.session_ttl_max_ms) {
        return cd_errf(err, ST_ERR_INVALID,
                       "session ttl %llu ms is above the limit "
                       "session_ttl_max_ms=%llu",
                       (unsigned long long)ttl_ms,
                       (unsigned long long)s->ss_cfg.limits.session_ttl_max_ms);
    }
    pthread_mutex_lock(&ns->ns_lock);
    st = do_session_open(ns, id, ttl_ms, out, err);
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

st_status_t cd_store_session_append(cd_store_t *s, uint32_t ns_id, const st_hash_t *id,
                                    const st_hash_t *head, uint64_t length,
                                    uint64_t expected_version, cd_session_t *out, cd_err_t *err)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    cd_sess_t *se;
    st_status_t st = ST_OK;

    if (ns == NULL) {
        return cd_errf(err, ST_ERR_NOT_FOUND, "no namespace %u", ns_id);
    }
    if (id == NULL || head == NULL) {
        return cd_errf(err, ST_ERR_INVALID, "no session id or head hash given");
    }
    pthread_mutex_lock(&ns->ns_lock);
    se = sess_find(ns, id);
    if (se == NULL) {
        st = cd_errf(err, ST_ERR_NOT_FOUND,
                     "no such session (never opened, closed or "
                     "expired)");
    } else if (length < se->se_rec.length) {
        st = cd_errf(err, ST_ERR_INVALID, "a session cannot shrink from %llu to %llu tokens",
                     (unsigned long long)se->se_rec.length, (unsigned long long)length);
    } else if (expected_version != 0 && expected_version != se->se_rec.version) {
        st = cd_errf(err, ST_ERR_BUSY, "session is at version %llu, not %llu",
                     (unsigned long long)se->se_rec.version, (unsigned long long)expected_version);
    } else {
        se->se_rec.head = *head;
        se->se_rec.length = length;
        se->se_rec.version++;
        se->se_rec.updated_ms = cd_store_now(s);
        if (out != NULL) {
            *out = se->se_rec;
        }
    }
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

/* Copies session id's record to out, or (out NULL) closes the session. */
static st_status_t sess_get_or_close(cd_store_t *s, uint32_t ns_id, const st_hash_t *id,
                                     cd_session_t *out)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    cd_sess_t *se;

    if (ns == NULL || id == NULL) {
        return ST_ERR_NOT_FOUND;
    }
    pthread_mutex_lock(&ns->ns_lock);
    se = sess_find(ns, id);
    if (se != NULL && out != NULL) {
        *out = se->se_rec;
    } else if (se != NULL) {
        sess_drop(ns, se);
    }
    pthread_mutex_unlock(&ns->ns_lock);
    return se != NULL ? ST_OK : ST_ERR_NOT_FOUND;
}

st_status_t cd_store_session_get(cd_store_t *s, uint32_t ns_id, const st_hash_t *id,
                                 cd_session_t *out)
{
    return sess_get_or_close(s, ns_id, id, out);
}

st_status_t cd_store_session_close(cd_store_t *s, uint32_t ns_id, const st_hash_t *id)
{
    return sess_get_or_close(s, ns_id, id, NULL);
}

st_status_t cd_store_session_restore(cd_store_t *s, uint32_t ns_id, const cd_session_t *rec,
                                     cd_err_t *err)
{
    cd_ns_t *ns = cd_ns_get(s, ns_id);
    cd_session_t out;
    cd_sess_t *se;
    st_status_t st;

    if (ns == NULL) {
        return cd_errf(err, ST_ERR_NOT_FOUND, "no namespace %u", ns_id);
    }
    if (rec == NULL || rec->ttl_ms == 0) {
        return cd_errf(err, ST_ERR_INVALID, "no session record, or one without a TTL");
    }
    pthread_mutex_lock(&ns->ns_lock);
    st = do_session_open(ns, &rec->id, rec->ttl_ms, &out, err);
    se = st == ST_OK ? sess_find(ns, &rec->id) : NULL;
    if (se != NULL) {
        se->se_rec.head = rec->head;
        se->se_rec.length = rec->length;
        se->se_rec.version = rec->version;
        se->se_rec.created_ms = rec->created_ms;
        se->se_rec.updated_ms = rec->updated_ms;
        se->se_rec.ttl_ms = rec->ttl_ms;
    }
    pthread_mutex_unlock(&ns->ns_lock);
    return st;
}

uint64_t do_reap_sessions(cd_ns_t *ns, uint64_t now)
{
    cd_sess_t *se = ns->ns_sess;
    uint64_t n = 0;

    /* A scan: sessions are few next to blocks, and each has its own TTL. */
    while (se != NULL) {
        cd_sess_t *next = se->se_next;

        if (se->se_rec.updated_ms + se->se_rec.ttl_ms <= now) {
            if (ns->ns_store->ss_cfg.session_expired != NULL) {
                ns->ns_store->ss_cfg.session_expired(ns->ns_store->ss_cfg.evicted_ctx, ns->ns_id,
                                                     &se->se_rec.id);
            }
            sess_drop(ns, se);
            ns->ns_st.sessions_expired++;
            n++;
        }
        se = next;
    }
    return n;
}

void do_sessions_destroy(cd_ns_t *ns)
{
    while (ns->ns_sess != NULL) {
        sess_drop(ns, ns->ns_sess);
    }
}
