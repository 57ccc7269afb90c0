/*
 * radix.h - the per-namespace radix-tree prefix index (ARCHITECTURE §7).
 *
 * One block per block hash h[i], holding which objects of that block are
 * present (a 128-bit layer mask per kind), its last access, and its lease
 * and pin counts. Blocks form a tree by their parent hash h[i-1]. Chains are
 * path-compressed: a node holds a run of consecutive blocks, each the only
 * child of the one before; children hang off the last block of a run, and a
 * branch that appears in the middle of a run splits it there. A hash table
 * maps every block hash to its block, which knows its node and its offset in
 * the node's run, so a lookup of n hashes is n probes at worst and usually
 * one probe per node (the rest are compared along the run).
 *
 * Roots: a block whose parent is not on this node (the first block of a
 * segment, whose parent block lives on another daemon, or the first block of
 * a chain, whose parent is the namespace seed) starts a root node that
 * remembers its parent hash. If that parent block arrives later, the root is
 * adopted under it, so the tree stays exact whatever order writes arrive in.
 *
 * Eviction is leaf-first LRU. A block is evictable only when it is the last
 * block of a node with no children and it is neither leased nor pinned;
 * evicting it removes it from the tree, and when a node empties, its parent
 * may become a leaf. So a node never keeps a suffix whose prefix it dropped.
 * The nodes whose last block is evictable form an LRU list (coldest first);
 * eviction takes the last block of the coldest node: O(1) per block. A node
 * that becomes a leaf because its last child went is put at the cold end
 * (its last access is at least that of the child just evicted, so a cold
 * chain keeps evicting from its end).
 *
 * Memory: blocks, nodes, runs and the table are charged to the budget as
 * metadata. cd_radix_prepare() does every allocation an insert needs, so
 * that the caller can evict and retry before it touches anything, and
 * cd_radix_insert() after a successful prepare cannot fail.
 *
 * Thread safety: none; the namespace lock serialises every call (the
 * do_x() convention of store.h).
 */
#ifndef STRATA_CACHED_RADIX_H
#define STRATA_CACHED_RADIX_H

#include <stddef.h>
#include <stdint.h>

#include "htab.h"
#include "strata/hash.h"
#include "strata/status.h"

#define CD_LAYERS_MAX 128

/* Object kinds (ARCHITECTURE §5). */
typedef enum cd_kind {
    CD_KIND_KV = 0,
    CD_KIND_IDX = 1,
    CD_KIND_KDA = 2,
    CD_KIND_SESSION = 3, /* sessions live in their own table (store.h) */
    CD_KIND_VIS = 4,
    CD_KIND_COUNT = 5
} cd_kind_t;

struct cd_obj;
struct cd_rnode;
struct cd_budget;

typedef struct cd_block {
    st_hash_t bk_hash;
    struct cd_rnode *bk_node;
    uint32_t bk_off;                       /* index in bk_node's run */
    uint32_t bk_leases;                    /* active leases naming this block */
    uint32_t bk_pins;                      /* pins (no expiry) */
    uint32_t bk_wb;                        /* write-behind holds (store.h cd_store_clean_take):
                                              not evicted or removed, but no access: the
                                              node keeps its place in the LRU */
    uint32_t bk_nobjs;                     /* committed objects */
    uint64_t bk_present[CD_KIND_COUNT][2]; /* layer masks of committed objects */
    uint64_t bk_last_access;               /* ms, the store's clock */
    uint64_t bk_bytes;                     /* extent bytes of its objects */
    struct cd_obj *bk_objs;                /* its objects (store.c's list) */
} cd_block_t;

typedef struct cd_rnode {
    struct cd_rnode *rn_parent;         /* NULL for a root */
    struct cd_rnode *rn_child;          /* first child; children hang off the run's end */
    struct cd_rnode *rn_next, *rn_prev; /* siblings */
    uint32_t rn_nchildren;
    uint32_t rn_len, rn_cap;
    cd_block_t **rn_run;
    struct cd_rnode *rn_lru_prev, *rn_lru_next;
    int rn_in_lru;
    int rn_has_remote; /* a root whose parent block is elsewhere */
    st_hash_t rn_remote_parent;
    struct cd_rnode *rn_orph_next, *rn_orph_prev; /* roots waiting for one parent */
    uint64_t rn_last_access;
    /* A summary of the run for compact lookups: rebuilt by the first lookup
     * that walks the node after any change to its run or to the objects of
     * its blocks (cd_radix_changed()), so a later one checks the node, not
     * every block. */
    int rn_sum_valid;
    uint32_t rn_sum_any;                   /* bit k: every block holds some layer of kind k;
                                              bit CD_KIND_COUNT: every block holds an object */
    uint64_t rn_sum_all[CD_KIND_COUNT][2]; /* per kind, the layers every block holds */
    uint32_t *rn_sum_kda;                  /* run offsets of the blocks with a KDA checkpoint */
    uint32_t rn_sum_nkda, rn_sum_kda_cap;
} cd_rnode_t;

typedef struct cd_radix {
    cd_htab_t rx_table; /* block hash -> block; remote parent -> waiting roots */
    cd_rnode_t *rx_lru_cold, *rx_lru_hot;
    struct cd_budget *rx_budget;
    cd_block_t *rx_spare_block;
    cd_rnode_t *rx_spare[2];
    uint64_t rx_blocks;
    uint64_t rx_nodes;
    uint64_t rx_bytes;      /* object bytes of all blocks */
    uint64_t rx_held_bytes; /* object bytes of leased or pinned blocks */
    uint64_t rx_splits;
    uint64_t rx_adoptions;
} cd_radix_t;

/* What a lookup requires of a block: for every kind in kinds (a mask of
 * 1 << cd_kind_t), every layer in layers. kinds == 0 asks only that the
 * block hold at least one object (an empty link of a chain does not count). */
typedef struct cd_require {
    uint32_t kinds;
    uint64_t layers[2];
} cd_require_t;

/* One segment of a lookup: n hashes starting at chain index first_block. */
typedef struct cd_segment {
    uint64_t first_block;
    uint32_t n;
    const st_hash_t *hashes;
} cd_segment_t;

/*
 * The compact form of a segment (docs/protocol.md "Compact segments"): the
 * segment covers n blocks, but its hashes are only those of the blocks at
 * offsets[0 .. n_offsets), strictly increasing, offsets[0] == 0 and the last
 * n - 1; the blocks between are proven along the tree's parent links.
 */
typedef struct cd_probes {
    const uint32_t *offsets; /* NULL: the full form */
    uint32_t n_offsets;
} cd_probes_t;

/* The answer for one segment. */
typedef struct cd_seg_answer {
    uint32_t matched;    /* leading blocks present with everything required */
    uint32_t kda_first;  /* index of its first checkpoint in the kda array */
    uint32_t kda_count;  /* checkpoints among the matched blocks */
    uint32_t unresolved; /* compact form: blocks after matched left undecided */
} cd_seg_answer_t;

void cd_radix_init(cd_radix_t *r, struct cd_budget *budget);

/* Frees every block and node (not the objects: the store frees those first). */
void cd_radix_destroy(cd_radix_t *r);

/* Returns the block of hash h, or NULL. */
static inline cd_block_t *cd_radix_find(const cd_radix_t *r, const st_hash_t *h)
{
    return (cd_block_t *)cd_htab_find(&r->rx_table, h, 0);
}

/*
 * Allocates what inserting one block under parent (may be NULL: a root with
 * no parent) needs. Returns ST_OK, ST_ERR_EXHAUSTED (budget) or
 * ST_ERR_NOMEM. What it set aside stays for later inserts.
 */
st_status_t cd_radix_prepare(cd_radix_t *r, const st_hash_t *parent);

/*
 * Returns the block of hash h, creating it if absent: under the block
 * `parent` when that block is here, else as a root remembering parent
 * (parent NULL: a root with none). A new block adopts the roots that were
 * waiting for it. *created_p (may be NULL) tells which. Call
 * cd_radix_prepare() with the same parent first; then this cannot fail.
 * Returns ST_OK or, without a prepare, ST_ERR_EXHAUSTED / ST_ERR_NOMEM.
 */
st_status_t cd_radix_insert(cd_radix_t *r, const st_hash_t *h, const st_hash_t *parent,
                            uint64_t now, cd_block_t **block_p, int *created_p);

/* The block eviction should take next (the last block of the coldest leaf),
 * or NULL when nothing is evictable. */
cd_block_t *cd_radix_victim(const cd_radix_t *r);

/* The block eviction would take after victim b, when b cannot go now (the
 * last block of the next node in the LRU), or NULL. */
cd_block_t *cd_radix_victim_after(const cd_radix_t *r, const cd_block_t *b);

/* Whether b may be removed now: last of its run, no children, no holds
 * (leases, pins, write-behind). */
int cd_radix_removable(const cd_block_t *b);

/* Removes b from the tree and frees it. b must be removable and carry no
 * objects. */
void cd_radix_remove(cd_radix_t *r, cd_block_t *b);

/* Adds delta bytes of objects to b (negative when objects go). */
void cd_radix_add_bytes(cd_radix_t *r, cd_block_t *b, int64_t delta);

/* Leases (pin == 0) or pins (pin == 1) b, or drops one such hold. */
void cd_radix_hold(cd_radix_t *r, cd_block_t *b, int pin);
void cd_radix_unhold(cd_radix_t *r, cd_block_t *b, int pin);

/* Says that the objects of b changed (its node's summary is stale). */
static inline void cd_radix_changed(cd_block_t *b)
{
    b->bk_node->rn_sum_valid = 0;
}

/* Records an access to b at now (moves its node to the hot end). */
void cd_radix_touch(cd_radix_t *r, cd_block_t *b, uint64_t now);

/* Whether b has everything req asks for. */
int cd_radix_satisfies(const cd_block_t *b, const cd_require_t *req);

/*
 * Answers one segment: how many leading hashes are present with everything
 * req asks for, and which of those carry a KDA checkpoint (their chain
 * indices, first_block + i, appended to kda[*kda_n...], up to kda_cap).
 * Matched blocks are touched at now; if blocks is not NULL they are appended
 * to blocks[*n_blocks...] (room for seg->n is the caller's duty).
 */
void cd_radix_lookup(cd_radix_t *r, const cd_segment_t *seg, const cd_require_t *req, uint64_t now,
                     cd_seg_answer_t *ans, uint64_t *kda, size_t kda_cap, size_t *kda_n,
                     cd_block_t **blocks, size_t *n_blocks);

/*
 * Answers one compact segment: seg->n blocks, seg->hashes[j] the hash of the
 * block at offset pr->offsets[j]. The answer is that of the full form
 * whenever the index can prove it, and ans->unresolved > 0 otherwise: the
 * blocks [matched, matched + unresolved) are undecided, every block before
 * them matched, and the block at matched + unresolved (if inside the
 * segment) does not match. The proof is the chain property (docs/hashing.md,
 * docs/daemon.md "Compact lookups"): when the block of a probe's hash
 * reaches the segment's first block by exactly the probe's offset in parent
 * links, the blocks between are the segment's blocks. Checkpoints and
 * touches as cd_radix_lookup(); compact segments take no lease.
 */
void cd_radix_lookup_compact(cd_radix_t *r, const cd_segment_t *seg, const cd_probes_t *pr,
                             const cd_require_t *req, uint64_t now, cd_seg_answer_t *ans,
                             uint64_t *kda, size_t kda_cap, size_t *kda_n);

/* Checks every structural invariant (for tests). Returns ST_OK or
 * ST_ERR_INTERNAL with a description in msg (256 bytes). */
st_status_t cd_radix_check(const cd_radix_t *r, char *msg);

#endif /* STRATA_CACHED_RADIX_H */
