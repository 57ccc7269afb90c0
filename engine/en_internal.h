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

/*
 * One DSA layer's stores: latent rows, indexer keys of every token, block
 * summaries. Unbounded (ring 0), kv holds every token's row (cap x row).
 * With a bounded local pool of ring blocks, kv holds ring blocks, block b in
 * slot b % ring: the open block and the ring - 1 blocks before it; older
 * rows are read from the cluster (en_rowsrc_t) or from an orphan copy.
 */
typedef struct en_dsa_store {
    float *kv;      /* cap x row, or ring x block_tokens x row */
    float *keys;    /* cap x idx_dim */
    float *summary; /* cap_blocks x 2 x idx_dim */
} en_dsa_store_t;

/*
 * Where the rows of blocks outside the local pool come from (the engine).
 * start() issues the reads of n rows (token positions, ascending) of DSA
 * layer l into dst (n x row floats, in that order) and returns at once;
 * finish() waits for them: ST_OK when every row landed with the right
 * bytes, else an error (the rows are lost to this sequence). local() may
 * return a pointer to block b's rows of layer l kept outside the pool (a
 * block whose write failed), or NULL.
 */
typedef struct en_rowsrc {
    void *arg;
    st_status_t (*start)(void *arg, int l, const int32_t *tok, size_t n, float *dst);
    st_status_t (*finish)(void *arg);
    const float *(*local)(void *arg, int l, size_t b);
    int serial; /* wait for the rows before the local partials (measurement) */
} en_rowsrc_t;

struct st_seq {
    const st_model_t *m;
    size_t len, cap;
    size_t ring;          /* local pool in blocks (0: unbounded) */
    en_rowsrc_t rowsrc;   /* set by the engine when ring > 0 */
    uint64_t rows_local;  /* selected rows of closed blocks found locally */
    uint64_t rows_remote; /* selected rows read through rowsrc */
    uint32_t *tokens;
    en_dsa_store_t *dsa; /* n_dsa */
    float *kda;          /* n_kda x heads x hd x hd */
    /* scratch for one token */
    float *x, *res, *xn, *att, *tmp, *q, *k, *v, *g, *beta, *o, *w, *h1, *h3, *router;
    int32_t *sel, *remote;
    const float **rows_a, **rows_b;
    float *stage; /* topk x row: remote rows land here */
    float *out_b, *lse_a, *lse_b;
    struct en_dev *dev; /* the CUDA path (engine/model_cuda.c), or NULL: the CPU path */
};

/* ---- the CUDA path (engine/device.c, engine/model_cuda.c; docs/engine.md) */

/* Whether this build has the CUDA path (1) or not (0). */
int en_dev_built(void);

/*
 * Checks that the model's shape is one the CUDA kernels take. Returns ST_OK,
 * or ST_ERR_INVALID after logging the first field that does not fit and
 * its constraint (quiet: only say whether it fits).
 */
st_status_t en_dev_check_shape(const st_model_t *m, int quiet);

/*
 * Resolves an st_engine_device_t for the model: *cuda = 1 for the CUDA
 * path. ST_OK; for ST_ENGINE_DEVICE_CUDA also ST_ERR_UNSUPPORTED (no CUDA
 * in the build), ST_ERR_INVALID (shape), ST_ERR_UNAVAILABLE (no device);
 * ST_ERR_INVALID for an unknown value. Each error is logged.
 */
st_status_t en_dev_resolve(const st_model_t *m, uint32_t want, int *cuda);

/*
 * Moves seq onto the device: its DSA rows (bf16), indexer keys (fp8 and a
 * scale per row), block summaries and KDA states get device copies, the
 * DSA and KDA layers run on the CUDA kernels. The host stores stay the
 * reference for the objects (fp32, as on the CPU path). Returns ST_OK;
 * ST_ERR_UNSUPPORTED (no CUDA in this build); ST_ERR_UNAVAILABLE (no
 * device); ST_ERR_INVALID (shape); ST_ERR_NOMEM.
 */
st_status_t en_dev_attach(st_seq_t *seq);
void en_dev_free(struct en_dev *dev);
/* The host stores changed under the device copies (reset, imports). */
void en_dev_invalidate(st_seq_t *seq);
/* Copies the device's KDA states into seq->kda (before an export). */
void en_dev_kda_pull(const st_seq_t *seq);
/* The attention of layer L at position pos on the device (KDA or DSA). */
st_status_t en_dev_layer(st_seq_t *seq, const en_layer_t *L, size_t pos);

/* Counter-based generator: a uniform float in [-1, 1) from (seed, tensor, index). */
float en_rand(uint64_t seed, uint64_t tensor, uint64_t index);

/*
 * MoE routing: the k largest of n router logits (ties: lower index first)
 * into idx, and their softmax weights (summing to 1) into weight.
 */
void en_moe_route(const float *logits, int n, int k, int *idx, float *weight);
/* y[0..out) = sum_i x[i] * W[i][0..out) (W stored [in][out]); the host path of both devices. */
void en_matvec(const float *W, const float *x, int in, int out, float *y);
float en_softplus(float x);

/* Grows the sequence's stores to hold at least n tokens. ST_OK or ST_ERR_NOMEM. */
st_status_t en_seq_reserve(st_seq_t *seq, size_t n);

/*
 * Sets the local pool to ring blocks (0: unbounded; else at least 2) and
 * resets the sequence. ST_OK, ST_ERR_INVALID (ring 1) or ST_ERR_NOMEM.
 */
st_status_t en_seq_set_ring(st_seq_t *seq, size_t ring);

/* Row of token t of DSA layer l in the local stores (t must be local). */
float *en_kv_row(const st_seq_t *seq, int l, size_t t);

/* Whether block b is in the local pool while block open is the open one. */
static inline int en_block_local(const st_seq_t *seq, size_t b, size_t open)
{
    return seq->ring == 0 || b + seq->ring > open;
}

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

/* The engine's model and client (NULL: none), for the sessions. */
const st_model_t *en_engine_model(const st_engine_t *e);
st_client_t *en_engine_client(const st_engine_t *e);
/* Whether the engine writes durably (st_engine_params_t.durable). */
int en_engine_durable(const st_engine_t *e);

/* Sets the sequence to the first n tokens (after its stores were imported). */
void en_seq_set_prefix(st_seq_t *seq, const uint32_t *tokens, size_t n);

#endif
