/*
 * en_internal.h - what the engine's files share: the model's weights, the
 * state of one sequence, and the object layouts (docs/engine.md).
 */
#ifndef STRATA_EN_INTERNAL_H
#define STRATA_EN_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "strata/engine.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the object layouts are little-endian fp32; this host is not"
#endif

#define EN_KDA_MAGIC   0x41444b53u /* "SKDA" */
#define EN_KDA_VERSION 1u
#define EN_KDA_HEADER  32u
#define EN_G_LO        (-5.0f)
#define EN_EPS         1e-6f

/* Weights of one layer. Matrices are stored [in][out] (y = sum_i x_i W[i]). */
typedef struct en_layer {
    int kind; /* 'K' or 'D' */
    int sub;  /* index among the layers of its kind */
    float *ln_attn, *ln_ffn;
    /* KDA */
    float *kq, *kk, *kv, *kg, *kb, *ko;
    /* DSA */
    float *dkv, *dq, *dik, *diq, *diw, *dout;
    /* FFN: router (MoE only), then per expert w1, w3 (d -> F) and w2 (F -> d) */
    float *router;
    float **w1, **w3, **w2;
} en_layer_t;

struct st_model {
    st_model_config_t cfg;
    int n_layers, n_kda, n_dsa;
    int row;   /* DSA row width: latent + rope */
    int n_exp; /* experts (1 when dense) */
    uint64_t fingerprint;
    float *emb, *ln_final, *w_out;
    en_layer_t layer[ST_MODEL_MAX_LAYERS];
    float *arena; /* every weight */
    float **ptrs; /* the per-expert pointer arrays */
};

/* One DSA layer's stores: rows and indexer keys of every token, summaries. */
typedef struct en_dsa_store {
    float *kv;      /* cap x row */
    float *keys;    /* cap x idx_dim */
    float *summary; /* cap_blocks x 2 x idx_dim */
} en_dsa_store_t;

struct st_seq {
    const st_model_t *m;
    size_t len, cap;
    uint32_t *tokens;
    en_dsa_store_t *dsa; /* n_dsa */
    float *kda;          /* n_kda x heads x hd x hd */
    /* scratch for one token */
    float *x, *res, *xn, *att, *tmp, *q, *k, *v, *g, *beta, *o, *w, *h1, *h3, *router;
    int32_t *sel;
    const float **rows_a, **rows_b;
    float *out_b, *lse_a, *lse_b;
};

/* Counter-based generator: a uniform float in [-1, 1) from (seed, tensor, index). */
float en_rand(uint64_t seed, uint64_t tensor, uint64_t index);

/*
 * MoE routing: the k largest of n router logits (ties: lower index first)
 * into idx, and their softmax weights (summing to 1) into weight.
 */
void en_moe_route(const float *logits, int n, int k, int *idx, float *weight);

/* Grows the sequence's stores to hold at least n tokens. ST_OK or ST_ERR_NOMEM. */
st_status_t en_seq_reserve(st_seq_t *seq, size_t n);

/* Object sizes in bytes for the model. */
size_t en_kv_bytes(const st_model_t *m);
size_t en_idx_bytes(const st_model_t *m);
size_t en_kda_bytes(const st_model_t *m);

/* Serialises block b of DSA layer l (0..n_dsa) of seq; the block must be full. */
void en_export_kv(const st_seq_t *seq, int l, size_t b, void *dst);
void en_export_idx(const st_seq_t *seq, int l, size_t b, void *dst);
/* Serialises the KDA states now, tagged with the sequence's length. */
void en_export_kda(const st_seq_t *seq, void *dst);

/*
 * Loads objects into seq (stores reserved for the block first). The KDA
 * import checks the header against the model and the expected length:
 * ST_ERR_CORRUPT when it does not match. ST_ERR_INVALID for a wrong length.
 */
st_status_t en_import_kv(st_seq_t *seq, int l, size_t b, const void *src, size_t len);
st_status_t en_import_idx(st_seq_t *seq, int l, size_t b, const void *src, size_t len);
st_status_t en_import_kda(st_seq_t *seq, size_t tokens, const void *src, size_t len);

/* Sets the sequence to the first n tokens (after its stores were imported). */
void en_seq_set_prefix(st_seq_t *seq, const uint32_t *tokens, size_t n);

#endif
