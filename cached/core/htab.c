/* htab.c - open addressing with linear probing and backward-shift deletion. */
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "htab.h"

#define HT_MIN_CAP 64

static uint64_t ht_hash(const st_hash_t *key, uint32_t tag)
{
    uint64_t lo = st_hash_lo64(key);
    uint64_t h = lo ^ ((uint64_t)tag * 0x9e3779b97f4a7c15ull);

    /* Block hashes are already uniform; ids are not, so mix (splitmix64). */
    h ^= h >> 30;
    h *= 0xbf58476d1ce4e5b9ull;
    h ^= h >> 27;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 31;
    return h;
}

static int ht_equal(const cd_htab_entry_t *e, const st_hash_t *key, uint32_t tag)
{
    return e->used && e->tag == tag && memcmp(e->key.b, key->b, ST_HASH_BYTES) == 0;
}

void cd_htab_init(cd_htab_t *t, struct cd_budget *budget)
{
    memset(t, 0, sizeof(*t));
    t->ht_budget = budget;
}

void cd_htab_destroy(cd_htab_t *t)
{
    if (t->ht_slots != NULL) {
        free(t->ht_slots);
        if (t->ht_budget != NULL) {
            cd_budget_release_meta(t->ht_budget, t->ht_cap * sizeof(cd_htab_entry_t));
        }
    }
    t->ht_slots = NULL;
    t->ht_cap = 0;
    t->ht_count = 0;
}

static void ht_place(cd_htab_entry_t *slots, size_t cap, const cd_htab_entry_t *e)
{
    size_t i = ht_hash(&e->key, e->tag) & (cap - 1);

    while (slots[i].used) {
        i = (i + 1) & (cap - 1);
    }
    slots[i] = *e;
}

st_status_t cd_htab_reserve(cd_htab_t *t, size_t n)
{
    size_t need = t->ht_count + n;
    size_t cap = t->ht_cap ? t->ht_cap : HT_MIN_CAP;
    cd_htab_entry_t *slots;
    st_status_t st;

    while (need * 4 > cap * 3) {
        cap *= 2;
    }
    if (cap == t->ht_cap) {
        return ST_OK;
    }
    if (t->ht_budget != NULL) {
        st = cd_budget_charge_meta(t->ht_budget, cap * sizeof(cd_htab_entry_t));
        if (st != ST_OK) {
            return st;
        }
    }
    slots = calloc(cap, sizeof(cd_htab_entry_t));
    if (slots == NULL) {
        if (t->ht_budget != NULL) {
            cd_budget_release_meta(t->ht_budget, cap * sizeof(cd_htab_entry_t));
        }
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < t->ht_cap; i++) {
        if (t->ht_slots[i].used) {
            ht_place(slots, cap, &t->ht_slots[i]);
        }
    }
    if (t->ht_slots != NULL) {
        free(t->ht_slots);
        if (t->ht_budget != NULL) {
            cd_budget_release_meta(t->ht_budget, t->ht_cap * sizeof(cd_htab_entry_t));
        }
    }
    t->ht_slots = slots;
    t->ht_cap = cap;
    return ST_OK;
}

void *cd_htab_find(const cd_htab_t *t, const st_hash_t *key, uint32_t tag)
{
    size_t i;

    if (t->ht_cap == 0) {
        return NULL;
    }
    i = ht_hash(key, tag) & (t->ht_cap - 1);
    while (t->ht_slots[i].used) {
        if (ht_equal(&t->ht_slots[i], key, tag)) {
            return t->ht_slots[i].value;
        }
        i = (i + 1) & (t->ht_cap - 1);
    }
    return NULL;
}

st_status_t cd_htab_insert(cd_htab_t *t, const st_hash_t *key, uint32_t tag, void *value)
{
    cd_htab_entry_t e;
    st_status_t st = cd_htab_reserve(t, 1);

    if (st != ST_OK) {
        return st;
    }
    e.key = *key;
    e.tag = tag;
    e.used = 1;
    e.value = value;
    ht_place(t->ht_slots, t->ht_cap, &e);
    t->ht_count++;
    return ST_OK;
}

void *cd_htab_remove(cd_htab_t *t, const st_hash_t *key, uint32_t tag)
{
    size_t mask, i, j;
    void *value;

    if (t->ht_cap == 0) {
        return NULL;
    }
    mask = t->ht_cap - 1;
    i = ht_hash(key, tag) & mask;
    while (t->ht_slots[i].used && !ht_equal(&t->ht_slots[i], key, tag)) {
        i = (i + 1) & mask;
    }
    if (!t->ht_slots[i].used) {
        return NULL;
    }
    value = t->ht_slots[i].value;
    /* Backward shift: move later entries of the cluster into the hole when
     * their home slot is not between the hole and their current slot. */
    j = i;
    for (;;) {
        size_t home;

        j = (j + 1) & mask;
        if (!t->ht_slots[j].used) {
            break;
        }
        home = ht_hash(&t->ht_slots[j].key, t->ht_slots[j].tag) & mask;
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->ht_slots[i] = t->ht_slots[j];
            i = j;
        }
    }
    t->ht_slots[i].used = 0;
    t->ht_count--;
    return value;
}

size_t cd_htab_bytes(const cd_htab_t *t)
{
    return t->ht_cap * sizeof(cd_htab_entry_t);
}
