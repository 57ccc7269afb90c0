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
    float *vis_w1, *vis_w2;         /* the vision encoder's input and output projections */
    float *vis_up[4], *vis_down[4]; /* its residual MLP blocks (engine/vision.c) */
    en_layer_t layer[ST_MODEL_MAX_LAYERS];
    float *arena;     /* every weight */
    size_t n_weights; /* floats in arena */
    float **ptrs;     /* the per-expert pointer arrays */
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

/*
 * Where the indexer scores of the blocks outside the local pool come from
 * (the engine's near-data scoring, engine/score.c). start() issues the
 * scoring of blocks [0, n_blocks) of DSA layer l for one token's indexer
 * query (q: heads x dim, w: heads), k candidates, and returns at once;
 * finish() waits for it: ST_OK with *n_p candidates at *pos_p / *sc_p
 * (positions, score descending, ties by the lower position; valid until the
 * next start), else the call's error. localize() brings the keys of the
 * blocks outside the pool of every DSA layer into the sequence (after
 * en_seq_keys_full), for local scoring from then on: ST_OK, or
 * ST_ERR_UNAVAILABLE when they could not be fetched (logged).
 */
typedef struct en_scoresrc {
    void *arg;
    st_status_t (*start)(void *arg, int l, const float *q, const float *w, uint32_t k,
                         size_t n_blocks);
    st_status_t (*finish)(void *arg, const uint64_t **pos_p, const float **sc_p, size_t *n_p);
    st_status_t (*localize)(void *arg);
} en_scoresrc_t;

struct st_seq {
    const st_model_t *m;
    size_t len, cap;
    size_t ring;         /* local pool in blocks (0: unbounded) */
    en_rowsrc_t rowsrc;  /* set by the engine when ring > 0 */
    en_scoresrc_t score; /* set by the engine for near-data scoring */
    /* Keys window (near-data scoring with a bounded pool): the indexer keys
     * and summaries of blocks [kbase, kbase + ring) only, block b at slot
     * b - kbase; 0: keys of every token, block b at b. */
    int kwin;
    size_t kbase;
    int32_t *lsel; /* topk: the local candidates of a split selection */
    float *lsc;
    void (*on_select)(void *arg, uint32_t layer, uint64_t pos, const int32_t *rows, uint32_t n);
    void *on_select_arg;
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
    /* The rows and keys stores are pinned host memory (set by en_dev_attach on
     * a sequence that has none yet). on_store_free, when set, hears of each
     * store before it is freed or moved (the engine's transport registrations). */
    int pinned;
    void (*on_store_free)(void *arg, void *p);
    void *on_store_arg;
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
/* Host memory for a store: pinned (page-locked, through CUDA) or malloc's; en_host_free frees
 * it the same way. Without CUDA in the build pinned is ignored. */
void *en_host_alloc(size_t bytes, int pinned);
void en_host_free(void *p, int pinned);
/*
 * A resume's upload to the device, in pieces (engine/resume.c): load_start lays the device
 * stores out for seq->cap (after en_seq_reserve); load_piece queues the upload of tokens
 * [a, b) of DSA layer l of a resume of n tokens (n sets the pool's blocks) from the host
 * stores, asynchronous, so the caller goes on reading the next pieces; load_end queues the block summaries of [0, n) and waits for every upload.
 * loaded (after the imports and en_seq_set_prefix) tells the device it holds tokens [0, n).
 */
st_status_t en_dev_load_start(st_seq_t *seq);
st_status_t en_dev_load_piece(st_seq_t *seq, int l, size_t a, size_t b, size_t n);
st_status_t en_dev_load_end(st_seq_t *seq, size_t n);
void en_dev_loaded(st_seq_t *seq, size_t n);
/* The host stores changed under the device copies (reset, imports). */
void en_dev_invalidate(st_seq_t *seq);
/* Copies the device's KDA states into seq->kda (before an export). */
void en_dev_kda_pull(const st_seq_t *seq);
/* The attention of layer L at position pos on the device (KDA or DSA). */
st_status_t en_dev_layer(st_seq_t *seq, const en_layer_t *L, size_t pos);
/* en_dev_layer in two halves: _issue queues the layer's device work for the token at pos on the
 * sequence's stream (on failure nothing is left in flight); _finish waits for it and leaves the
 * layer's output in seq->att. Several sequences' layers queued before any is waited for run
 * side by side on the device (st_seq_forward_batch). */
st_status_t en_dev_layer_issue(st_seq_t *seq, const en_layer_t *L, size_t pos);
st_status_t en_dev_layer_finish(st_seq_t *seq, const en_layer_t *L);
/* One token for each of seqs[0, n) (distinct sequences of one model), layer by layer in
 * lockstep: st_seq_forward's result for each, bit for bit. On failure no sequence has advanced
 * and nothing is in flight. */
st_status_t st_seq_forward_batch(st_seq_t *const *seqs, size_t n, const uint32_t *tokens,
                                 float *const *logits);
/*
 * The n text tokens at [len, len + n) through every layer on the device
 * (engine/prefill_cuda.c): the residual stream, norms, projections, the
 * feed-forward and the attention all run there over the span; each DSA
 * layer writes the span's rows, keys and summaries (the host stores, for the
 * objects, and the device copies) before each token selects over [0, pos].
 * logits (may be NULL) gets the last token's (computed on the host). The
 * stores must hold len + n tokens (en_seq_reserve); needs an unbounded pool
 * (en_seq_chunkable). Does not set seq->len or the tokens. ST_OK,
 * ST_ERR_NOMEM, ST_ERR_INTERNAL (logged; the sequence must be reset).
 */
st_status_t en_dev_forward_span(st_seq_t *seq, const uint32_t *tokens, size_t n, float *logits);

/* Counter-based generator: a uniform float in [-1, 1) from (seed, tensor, index). */
float en_rand(uint64_t seed, uint64_t tensor, uint64_t index);

/*
 * MoE routing: the k largest of n router logits (ties: lower index first)
 * into idx, and their softmax weights (summing to 1) into weight.
 */
void en_moe_route(const float *logits, int n, int k, int *idx, float *weight);
/* y[0..out) = sum_i x[i] * W[i][0..out) (W stored [in][out]); the host path of both devices. */
void en_matvec(const float *W, const float *x, int in, int out, float *y);
/* Y[r] = en_matvec(W, X[r]) for the n rows of X (n x in) into Y (n x out), bit for bit the
 * same sums, W read once per tile of rows (engine/prefill.c). */
void en_matmul(const float *W, const float *X, size_t n, int in, int out, float *Y);
/* Rotates the pairs of v[0..n) by angles pos * 10000^(-2i/n). */
void en_rope(float *v, int n, size_t pos);
/*
 * The selection and attention of DSA layer L for the token at pos over the
 * keys [0, n_keys), from the indexer query in seq->tmp and head weights in
 * seq->w; the attention query in seq->q when q_ready, else computed from
 * seq->xn. The heads' latent outputs land in seq->o. ST_OK, a kernel's
 * error, lost rows' ST_ERR_UNAVAILABLE (engine/model.c).
 */
st_status_t en_dsa_attend_sel(st_seq_t *seq, const en_layer_t *L, size_t pos, size_t n_keys,
                              int q_ready);
/* Whether the sequence takes chunked spans (an unbounded pool, no keys window); else
 * st_seq_prefill runs token by token. */
int en_seq_chunkable(const st_seq_t *seq);
/* Adds indexer key[0..di) to its block's summary sum (per-channel minima, then maxima: 2 di
 * values); first: the block's first token, whose key starts the summary. Both devices. */
void en_summary_add(float *sum, const float *key, int di, int first);
/* Starts the reads of the nr rows in seq->remote (ascending positions) of DSA layer `layer`
 * through seq->rowsrc into seq->stage; with serial rows it waits for them at once and leaves
 * their status in *rf_p. ST_ERR_INTERNAL (logged) when rows are missing and nothing reads them;
 * else rowsrc.start's status. Both devices. */
st_status_t en_rows_remote_start(st_seq_t *seq, int layer, size_t nr, st_status_t *rf_p);
float en_softplus(float x);

/* Grows the sequence's stores to hold at least n tokens. ST_OK or ST_ERR_NOMEM. */
st_status_t en_seq_reserve(st_seq_t *seq, size_t n);

/*
 * Sets the local pool to ring blocks (0: unbounded; else at least 2) and
 * resets the sequence. ST_OK, ST_ERR_INVALID (ring 1) or ST_ERR_NOMEM.
 */
st_status_t en_seq_set_ring(st_seq_t *seq, size_t ring);

/* Indexer key of token t of DSA layer l, and block b's summary (both local). */
float *en_key_row(const st_seq_t *seq, int l, size_t t);
float *en_summary_of(const st_seq_t *seq, int l, size_t b);

/* The keys window starts at block open + 1 - ring (at 0 before that): for a
 * sequence set to open blocks (a resume) with the keys window on. */
void en_seq_window(st_seq_t *seq, size_t open);

/* Slides the keys window so that block open is in it (the blocks before
 * open + 1 - ring leave it: their keys are in the cluster). */
void en_seq_slide(st_seq_t *seq, size_t open);

/*
 * Turns the keys window into keys of every token (the window's blocks
 * copied to their place; the blocks before it are the caller's to import).
 * Sets *kbase_p to the first block that was local. ST_OK or ST_ERR_NOMEM
 * (the window is kept).
 */
st_status_t en_seq_keys_full(st_seq_t *seq, size_t *kbase_p);

/* Bytes of indexer keys and summaries the sequence holds, every DSA layer. */
size_t en_seq_keys_bytes(const st_seq_t *seq);

/*
 * The selection of DSA layer L at pos (engine/select.c), for the indexer
 * query in seq->tmp and weights in seq->w: the top-k of the scores of rows
 * [0, n_keys) into seq->sel (score descending, ties by the lower position);
 * n_keys is pos + 1 for text, the image's end for an image token.
 * start() scores locally, or, with the keys window past block 0, issues the
 * cluster's scoring of the blocks before the window (seq->score) and scores
 * the window's keys meanwhile; *k_p is k, *pending_p whether a Score call is
 * in flight (the caller may compute meanwhile). finish() (always, with
 * start's status) waits for it and merges; when the call failed or answered
 * wrongly the keys of the history are brought here (seq->score.localize) and
 * the whole selection is scored locally. Calls seq->on_select. ST_OK, a
 * kernel's error, or localize's ST_ERR_UNAVAILABLE.
 */
st_status_t en_dsa_select_start(st_seq_t *seq, const en_layer_t *L, size_t n_keys, int *k_p,
                                int *pending_p);
st_status_t en_dsa_select_finish(st_seq_t *seq, const en_layer_t *L, size_t pos, size_t n_keys,
                                 int k, int pending, st_status_t started);

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

/* ---- images (engine/vision.c; docs/engine.md "Images") ------------------ */

#define EN_VIS_PATCH     ST_ENGINE_IMAGE_PATCH
#define EN_VIS_IN        (EN_VIS_PATCH * EN_VIS_PATCH * 3) /* a patch's samples, RGB */
#define EN_VIS_HIDDEN(m) (2 * (size_t)(m)->cfg.d_model)    /* the encoder's hidden width */
#define EN_VIS_DEPTH     2                                 /* residual MLP blocks of the encoder */
#define EN_VIS_WIDE      2                                 /* their inner width, in hidden widths */
#define EN_VIS_MAGIC     0x53495653u                       /* "SVIS" */
#define EN_VIS_VERSION   1u
#define EN_VIS_HEADER    48u

/*
 * Encodes an image into st_engine_image_tokens(w, h) rows of d_model floats
 * (out): the fused pre-processing pass (patch tiling, normalisation,
 * positional encoding) then the two-layer projection. ST_OK, ST_ERR_NOMEM.
 */
st_status_t en_vis_encode(const st_model_t *m, const uint8_t *px, uint32_t w, uint32_t h,
                          uint32_t c, float *out);

/* The bytes of a VIS object of n tokens. */
size_t en_vis_bytes(const st_model_t *m, size_t n);
/* Writes a VIS object (header, then emb: n x d_model floats) into dst. */
void en_vis_pack(const st_model_t *m, const st_hash_t *image, const float *emb, size_t n,
                 void *dst);
/*
 * Checks a VIS object read from the cluster against the model, the image and
 * the token count, and copies its embeddings into emb. ST_OK, or
 * ST_ERR_CORRUPT naming what did not match in *why (a miss, never used).
 */
st_status_t en_vis_unpack(const st_model_t *m, const st_hash_t *image, size_t n, const void *src,
                          size_t len, float *emb, const char **why);

/*
 * Runs the n tokens at positions [len, len + n) of an image (ids: the
 * placeholder) whose input embeddings are emb (n x d_model), layer by
 * layer: in each DSA layer every one of them first writes its row, key and
 * summary, then attends over the keys [0, key_end) (key_end: the image's
 * end, so both ways within the image); each KDA layer scans them in order.
 * logits (may be NULL) gets the last one's. ST_OK, ST_ERR_NOMEM, or a
 * kernel's error (the sequence must then be reset).
 */
st_status_t en_seq_forward_span(st_seq_t *seq, const float *emb, size_t n, size_t key_end,
                                float *logits);

/* The engine's model and client (NULL: none), for the sessions. */
const st_model_t *en_engine_model(const st_engine_t *e);
st_client_t *en_engine_client(const st_engine_t *e);
/* Whether the engine writes durably (st_engine_params_t.durable). */
int en_engine_durable(const st_engine_t *e);

/* Sets the sequence to the first n tokens (after its stores were imported). */
void en_seq_set_prefix(st_seq_t *seq, const uint32_t *tokens, size_t n);

#endif
