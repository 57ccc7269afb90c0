/*
 * strata/engine.h - libstrata-engine: a reference hybrid model and the engine
 * that runs it beside a strata cluster.
 *
 * The model interleaves KDA layers (linear attention with a recurrent state)
 * and DSA layers (sparse attention over latent KV rows chosen by an
 * indexer), each followed by a dense or mixture-of-experts feed-forward. Its
 * weights are synthetic and deterministic: a function of the seed and the
 * shape, generated at creation, no files. It exists so that the cache path
 * (block objects, KDA checkpoints, resume, fallback) can be exercised and
 * checked for numerical consistency end to end. docs/engine.md describes the
 * model, the object layouts and what resumes how.
 *
 * Memory: the caller owns what it passes in; st_model_t, st_seq_t and
 * st_engine_t are owned by the library until freed. Nothing keeps a pointer to
 * a caller's buffer after the call returns, except the objects named as
 * borrowed (the model of a sequence or engine, the client of an engine),
 * which must outlive their user.
 *
 * Threads: a model is read-only after creation and may be shared by any
 * number of threads. A sequence or an engine must be used by one thread at a
 * time.
 */
#ifndef STRATA_ENGINE_H
#define STRATA_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"
#include "strata/strata.h"

#ifdef __cplusplus
extern "C" {
#endif

#define ST_MODEL_MAX_LAYERS 64

/*
 * The shape of a model. Fill it with st_model_config_default() and change
 * the fields you need; st_model_create() checks every field.
 */
typedef struct st_model_config {
    char pattern[ST_MODEL_MAX_LAYERS + 1]; /* one letter per layer: 'K' = KDA, 'D' = DSA */
    uint32_t d_model;                      /* width of the residual stream */
    uint32_t vocab;                        /* token ids are 0..vocab-1 */
    uint32_t block_tokens;                 /* tokens per cached block, a multiple of 16 */
    /* KDA layers */
    uint32_t kda_heads;
    uint32_t kda_head_dim; /* dk = dv */
    /* DSA layers: MLA-style shared latent rows (latent + rope) per token */
    uint32_t dsa_heads;
    uint32_t dsa_latent; /* d_v: the value part of a row */
    uint32_t dsa_rope;   /* rotary part of a row (even); d_qk = latent + rope */
    uint32_t idx_heads;  /* indexer heads */
    uint32_t idx_dim;    /* indexer key width */
    uint32_t topk;       /* rows each query attends to */
    /* feed-forward, after every layer */
    uint32_t ffn_hidden;  /* dense: hidden width; MoE: width of each expert */
    uint32_t moe_experts; /* 0: dense; otherwise the number of experts */
    uint32_t moe_topk;    /* experts per token (1..moe_experts) */
    uint64_t seed;        /* weights are a pure function of (seed, shape) */
} st_model_config_t;

typedef struct st_model st_model_t;
typedef struct st_seq st_seq_t;

/*
 * The default shape, small enough to run on two CPU cores: pattern "KDKD",
 * d_model 128, vocab 512, block 64, KDA 2 heads of 32, DSA 4 heads over rows
 * of 64 + 16, indexer 4 heads of 32, top-k 128, MoE of 4 experts of 128 with
 * top-2 routing, seed 1. Never fails.
 */
ST_API void st_model_config_default(st_model_config_t *cfg);

/*
 * The "gpu" shape: the shapes the CUDA kernels take (docs/engine.md, "The
 * CUDA path"), otherwise the default's: pattern "KDKD", d_model 128, vocab
 * 512, block 64, KDA 2 heads of 128, DSA 64 heads over rows of 512 + 64,
 * indexer 4 heads of 128, top-k 128, MoE of 4 experts of 128 with top-2
 * routing, seed 1. Runs on the CPU as well. Never fails.
 */
ST_API void st_model_config_gpu(st_model_config_t *cfg);

/*
 * Checks cfg and builds the model with its synthetic weights.
 * Returns ST_OK with *model_p set; ST_ERR_INVALID (a field out of range: the
 * error log line names the field and the limit); ST_ERR_NOMEM.
 */
ST_API st_status_t st_model_create(const st_model_config_t *cfg, st_model_t **model_p);

/* Frees a model (NULL is fine). No sequence or engine may still use it. */
ST_API void st_model_free(st_model_t *model);

/* The shape the model was built with. */
ST_API const st_model_config_t *st_model_config(const st_model_t *model);

/* A 64-bit fingerprint of (shape, seed); stored in KDA checkpoints. */
ST_API uint64_t st_model_fingerprint(const st_model_t *model);

/*
 * Creates an empty sequence of the model (borrowed). Returns ST_OK,
 * ST_ERR_INVALID (NULL), ST_ERR_NOMEM.
 */
ST_API st_status_t st_seq_create(const st_model_t *model, st_seq_t **seq_p);
ST_API void st_seq_free(st_seq_t *seq);

/* Empties the sequence (keeps its memory). */
ST_API void st_seq_reset(st_seq_t *seq);

/* Tokens in the sequence so far. */
ST_API size_t st_seq_length(const st_seq_t *seq);

/*
 * Appends one token and runs it through every layer. When logits is not NULL
 * it receives vocab floats: the model's prediction for the next token.
 * Returns ST_OK; ST_ERR_INVALID (token >= vocab; the sequence is unchanged);
 * ST_ERR_NOMEM (the stores could not grow: the sequence is unchanged; or a
 * kernel's scratch could not be allocated: the sequence is then undefined
 * and must be reset).
 */
ST_API st_status_t st_seq_forward(st_seq_t *seq, uint32_t token, float *logits);

/*
 * Appends n tokens by chunked prefill (docs/engine.md, "Chunked prefill"):
 * layer by layer over spans of up to 1024 tokens, the projections and the
 * feed-forward as matrix products over the span, KDA layers in their chunked
 * form, each DSA token selecting over the keys up to its own position. The
 * result equals n calls of st_seq_forward within the bounds of
 * docs/engine.md (only the KDA layers' rounding differs). A sequence with a
 * bounded pool or a keys window runs token by token. logits (may be NULL)
 * gets the last token's. Returns ST_OK; ST_ERR_INVALID (NULL, n 0, a token
 * >= vocab: the sequence is unchanged); ST_ERR_NOMEM (the stores could not
 * grow: unchanged; a span's scratch: the sequence is undefined and must be
 * reset); a kernel's error (likewise).
 */
ST_API st_status_t st_seq_prefill(st_seq_t *seq, const uint32_t *tokens, size_t n, float *logits);

/* ---- the engine ---------------------------------------------------------- */

enum st_engine_field {
    ST_ENGINE_FIELD_CLIENT = 1u << 0,
    ST_ENGINE_FIELD_KDA_INTERVAL = 1u << 1,
    ST_ENGINE_FIELD_ON_LOOKUP = 1u << 2,
    ST_ENGINE_FIELD_ON_PROGRESS = 1u << 3,
    ST_ENGINE_FIELD_LOCAL_BLOCKS = 1u << 4,
    ST_ENGINE_FIELD_SERIAL_ROWS = 1u << 5,
    ST_ENGINE_FIELD_DEVICE = 1u << 6,
    ST_ENGINE_FIELD_DURABLE = 1u << 7,
    ST_ENGINE_FIELD_REMOTE_SCORING = 1u << 8,
    ST_ENGINE_FIELD_ON_SELECT = 1u << 9,
    ST_ENGINE_FIELD_VIS_CACHE = 1u << 10,
    ST_ENGINE_FIELD_PREFILL_CHUNK = 1u << 11,
};

/* Where the engine runs the model's attention (docs/engine.md, "The CUDA path"). */
typedef enum st_engine_device {
    ST_ENGINE_DEVICE_CPU = 0,  /* the C kernels (st_cpu_*): any shape */
    ST_ENGINE_DEVICE_CUDA = 1, /* the CUDA kernels: needs a device, a CUDA build and a shape
                                  they take (st_model_config_gpu) */
    ST_ENGINE_DEVICE_AUTO = 2  /* CUDA when all three hold, else the CPU */
} st_engine_device_t;

typedef struct st_engine_params {
    uint64_t field_mask;
    st_client_t *client;   /* borrowed; NULL or absent: no cache, always recompute */
    uint32_t kda_interval; /* blocks between KDA checkpoints, default 16 */
    /* Called after each lookup, before the objects are fetched (tests use it
     * to kill a node in the middle of a resume). */
    void (*on_lookup)(void *arg, const st_lookup_result_t *result);
    void *on_lookup_arg;
    /* Called during a run after each computed prompt block and after the
     * last prompt token: done of total prompt tokens are in the sequence
     * (resumed ones included). For progress bars; must not call the engine. */
    void (*on_progress)(void *arg, size_t done, size_t total);
    void *on_progress_arg;
    /* The bounded local pool: closed blocks whose KV rows stay in memory per
     * DSA layer, the most recent ones (docs/engine.md, "Overlap"); rows of
     * older blocks that the indexer selects are read from the cluster while
     * the local rows compute. 0 (the default): every block stays local.
     * Needs a client. */
    uint32_t local_blocks;
    /* 1: wait for the remote rows before computing the local partials (no
     * overlap). For measuring the overlap (bench_engine_long); default 0. */
    uint32_t serial_rows;
    /* st_engine_device_t; default ST_ENGINE_DEVICE_CPU. */
    uint32_t device;
    /* 1: KDA checkpoints are put with ST_PUT_DURABLE and the engine session's
     * record is written with ST_SESSION_DURABLE, so each is acknowledged only
     * when the client's write_quorum of its replicas committed it to disk (the
     * daemons need data_dir). A write that reached fewer is stored but logged
     * and counted in partial_writes; the turn goes on. Default 0. */
    uint32_t durable;
    /* 1: near-data scoring (docs/engine.md, "Near-data scoring"): the
     * sequence holds indexer keys and block summaries only of the local pool
     * and the open block; each DSA step scores the older blocks on the nodes
     * that hold their IDX objects (st_client_score) and merges their
     * candidates with the local ones into the exact top-k. A resume fetches no
     * IDX object outside the pool. When a Score call fails the engine fetches
     * the history's IDX objects and scores locally for the rest of the run
     * (counted in score_fallbacks). Needs local_blocks > 0, the CPU device (auto
     * picks it) and topk <= ST_SCORE_K_MAX. Default 0. */
    uint32_t remote_scoring;
    /* Called after each DSA selection with the n selected positions of DSA
     * layer `layer` (numbered among DSA layers) for the token at pos, in the
     * indexer's order (score descending, ties by the lower position). For
     * tests that compare selections; must not call the engine. */
    void (*on_select)(void *arg, uint32_t layer, uint64_t pos, const int32_t *rows, uint32_t n);
    void *on_select_arg;
    /* 1 (the default): an image's projected embeddings are looked up in and
     * written to the cluster as a VIS object keyed by st_hash_image(), and a
     * hit skips the vision encoder; 0: every image is encoded (the chain's
     * keys are the same either way). */
    uint32_t vis_cache;
    /* Chunked prefill (docs/engine.md, "Chunked prefill"): the prompt's text
     * is computed in spans of up to this many tokens, layer by layer, cut at
     * every KDA checkpoint and at the prompt's last full block; 1: token by
     * token (the path before chunked prefill, kept for comparison). A multiple
     * of the model's block_tokens up to ST_ENGINE_PREFILL_MAX, or 1; 0 or
     * absent: ST_ENGINE_PREFILL_DEFAULT rounded down to a multiple of
     * block_tokens. With a bounded pool (local_blocks) or near-data scoring
     * the prompt runs token by token. Decode is token by token either way. */
    uint32_t prefill_chunk;
} st_engine_params_t;

#define ST_ENGINE_PREFILL_DEFAULT 1024u
#define ST_ENGINE_PREFILL_MAX     4096u

/* What one st_engine_run did. */
typedef struct st_engine_stats {
    uint64_t lookup_resumable; /* resumable blocks the first lookup reported */
    uint64_t resumed_blocks;   /* blocks restored from the cache */
    uint64_t computed_tokens;  /* prompt tokens run through the model */
    uint64_t lookups;          /* lookups made (more than 1 after a failed fetch) */
    uint64_t fetch_misses;     /* fetched objects that missed or failed */
    uint64_t objects_written;  /* KV, IDX and KDA objects stored */
    uint64_t kda_written;      /* KDA checkpoints among them */
    uint64_t write_failures;   /* objects the cluster did not store */
    uint64_t bytes_fetched;    /* bytes read from the cluster: objects and rows */
    uint64_t bytes_written;    /* bytes of the objects stored */
    uint64_t ttft_us;          /* from the call to the logits of the last prompt token */
    uint64_t decode_us;        /* the n_decode steps together */
    /* The pipeline (docs/engine.md, "Overlap"): time with a fetch in flight,
     * time computing, and time the computation waited for a fetch. Overlap
     * efficiency of the run = (compute_us + stall_us) / max(fetch_us,
     * compute_us); 1.0 is perfect, see st_engine_overlap(). */
    uint64_t fetch_us;
    uint64_t compute_us;
    uint64_t stall_us;
    uint64_t rows_local;     /* selected DSA rows found in the local pool */
    uint64_t rows_remote;    /* selected DSA rows read from the cluster */
    uint64_t pool_fallbacks; /* remote rows lost (a dead node, an eviction): the
                                sequence was recomputed with every block local */
    uint64_t rows_us;        /* fetch_us's share of the DSA layers' remote row reads,
                                from issuing each read to having its rows */
    uint64_t partial_writes; /* durable writes (KDA checkpoints, the session record) that
                                fewer replicas than write_quorum committed to disk
                                (ST_ERR_PARTIAL): stored, with a weaker guarantee */
    /* Near-data scoring (remote_scoring): */
    uint64_t score_calls;     /* st_client_score calls (one per DSA layer and token) */
    uint64_t score_fallbacks; /* Score calls that failed: the history's IDX objects were
                                 fetched and scored locally for the rest of the run */
    uint64_t score_us;        /* from issuing each Score call to having its candidates */
    uint64_t score_bytes;     /* bytes the Score calls sent and received */
    uint64_t keys_bytes;      /* indexer keys and block summaries the sequence held at the
                                 end of the run, every DSA layer (either mode) */
    /* Images (st_engine_run_images; docs/engine.md, "Images"). An image whose
     * tokens were all resumed from KV is neither a VIS hit nor a miss. */
    uint64_t images;      /* images in the prompt */
    uint64_t vis_hits;    /* embeddings read from a VIS object: encoder skipped */
    uint64_t vis_misses;  /* images encoded: no VIS object, or one refused (its header
                             names another model, image or token count, or it is cut) */
    uint64_t vis_written; /* VIS objects stored */
    uint64_t encoder_us;  /* time in the vision encoder (pre-processing and projection) */
} st_engine_stats_t;

/* Overlap efficiency of a run (see st_engine_stats_t); 0 when nothing was fetched. */
ST_API double st_engine_overlap(const st_engine_stats_t *stats);

typedef struct st_engine st_engine_t;

/*
 * Creates an engine for the model (borrowed). Returns ST_OK;
 * ST_ERR_INVALID (NULL model, kda_interval 0, a client whose block size
 * differs from the model's, local_blocks > 0 without a client,
 * remote_scoring without local_blocks or with topk > ST_SCORE_K_MAX, an unknown
 * device, device CUDA with a shape the CUDA kernels do not take: the error
 * line names the field and the constraint); ST_ERR_UNSUPPORTED (device CUDA
 * in a build without CUDA); ST_ERR_UNAVAILABLE (device CUDA and no usable
 * device; remote_scoring with device CUDA: ST_ERR_UNSUPPORTED);
 * ST_ERR_NOMEM (host or device memory).
 */
ST_API st_status_t st_engine_create(const st_model_t *model, const st_engine_params_t *params,
                                    st_engine_t **engine_p);

/* The device the engine runs on: ST_ENGINE_DEVICE_CPU or _CUDA (never _AUTO). */
ST_API st_engine_device_t st_engine_device_used(const st_engine_t *engine);

/* Frees the engine (waits for its writes). NULL is fine. */
ST_API void st_engine_free(st_engine_t *engine);

/*
 * Runs one request: the prompt tokens[0..n_tokens), then n_decode greedy
 * (argmax) decode steps, each generated token fed back (the sequence ends
 * with n_tokens + n_decode tokens: the turn). With a client: resumes from the
 * longest resumable cached prefix of the prompt (recomputing what fails to
 * load), writes the KV and IDX objects of each full block it computes,
 * prompt or reply, while it goes on, a KDA checkpoint every kda_interval
 * blocks, at the prompt's last full block and at the turn's last full block,
 * and waits for its writes before returning.
 * @param[out] logits     vocab floats: the logits after the last prompt token
 *                        (may be NULL)
 * @param[out] out_ids    n_decode generated ids (may be NULL when n_decode is 0)
 * @param[out] stats      what happened (may be NULL)
 * The prompt's last token is always computed (its logits are the answer),
 * so a prompt of whole blocks resumes at most at its next-to-last block.
 * Returns ST_OK (cache failures are not errors: a miss, a dead node or a
 * refused write falls back to recomputing or skipping the write, is logged
 * and counted in stats); ST_ERR_INVALID (NULL engine or tokens, n_tokens 0,
 * a token out of range, out_ids NULL with n_decode > 0); ST_ERR_NOMEM.
 */
ST_API st_status_t st_engine_run(st_engine_t *engine, const uint32_t *tokens, size_t n_tokens,
                                 uint32_t n_decode, float *logits, uint32_t *out_ids,
                                 st_engine_stats_t *stats);

/* The most engines one st_engine_run_batch() takes. */
#define ST_ENGINE_BATCH_MAX 64

/*
 * Batched decode (docs/engine.md, "Batched decode"): st_engine_run() for each
 * of engines[0, n) (distinct engines of one model), the prompts tokens[i] of
 * n_tokens[i] run one after another, then n_decode tokens of every engine in
 * lockstep: each step is one token of every sequence, through the model layer
 * by layer together (on the CUDA path every sequence's work of a layer is
 * queued on its stream before any is waited for, so they run side by side on
 * the device). Where an engine's next token needs what only its own step does
 * (a bounded pool: local_blocks, near-data scoring, a fallback), the step runs
 * every engine's token one by one instead. Each engine's results (logits[i] of
 * its last prompt token when logits and logits[i] are not NULL, out_ids[i],
 * stats[i] when stats is not NULL) equal what st_engine_run() would give it,
 * bit for bit; stats[i].decode_us is the lockstep decode's time (the same for
 * every engine) and compute_us counts every step whole.
 *
 * Returns ST_OK, or the first failure of any engine (every engine's run is
 * ended either way: its writes waited for); ST_ERR_INVALID (n 0 or above
 * ST_ENGINE_BATCH_MAX, NULL arrays, an engine NULL, twice or of another
 * model, or what st_engine_run refuses).
 */
ST_API st_status_t st_engine_run_batch(st_engine_t *const *engines, size_t n,
                                       const uint32_t *const *tokens, const size_t *n_tokens,
                                       uint32_t n_decode, float *const *logits,
                                       uint32_t *const *out_ids, st_engine_stats_t *stats);

/* ---- images (engine/vision.c, engine/vis.c; docs/engine.md "Images") ----- */

/* Pixels per side of one image patch: one patch is one image token. */
#define ST_ENGINE_IMAGE_PATCH      16
/* The most tokens one image may take (a 2048 x 2048 image). */
#define ST_ENGINE_IMAGE_TOKENS_MAX 16384

/*
 * An image in a prompt: 8-bit samples, channels interleaved, rows top to
 * bottom (as st_hash_image takes them). It occupies the token positions
 * [position, position + st_engine_image_tokens(width, height)) of the
 * prompt, whose ids there must all be st_model_image_token().
 */
typedef struct st_engine_image {
    uint64_t position;     /* first token position of the image */
    uint32_t width;        /* 1..ST_IMAGE_SIDE_MAX */
    uint32_t height;       /* 1..ST_IMAGE_SIDE_MAX */
    uint32_t channels;     /* 1 (grey) or 3 (RGB) */
    const uint8_t *pixels; /* width * height * channels bytes, borrowed for the call */
} st_engine_image_t;

/*
 * The tokens an image of width x height takes: ceil(width / 16) *
 * ceil(height / 16) (the last row and column of patches are padded). 0 for
 * a zero side.
 */
ST_API uint64_t st_engine_image_tokens(uint32_t width, uint32_t height);

/* The placeholder id at an image's positions: vocab - 1. */
ST_API uint32_t st_model_image_token(const st_model_t *model);

/*
 * st_engine_run with images in the prompt. Each image is named by
 * st_hash_image() and passed to the chain as an item (so the blocks it
 * overlaps are keyed by the image and its offset: docs/hashing.md); its
 * embeddings come from a VIS object when the cluster holds one made by this
 * model (vis_cache), else from the vision encoder (then written as a VIS
 * object). The image's tokens attend to each other both ways in the DSA
 * layers and are scanned in raster order by the KDA layers
 * (docs/engine.md, "Images"). n_images 0 is st_engine_run.
 * Returns what st_engine_run returns; also ST_ERR_INVALID (images NULL with
 * n_images > 0, images not sorted by position or overlapping, an image past
 * the prompt's end, a bad size or channel count, more than
 * ST_ENGINE_IMAGE_TOKENS_MAX tokens, a position under an image without the
 * placeholder id: the error line names the image and what is wrong);
 * ST_ERR_UNSUPPORTED (images on the CUDA device, or an image over more blocks
 * than local_blocks).
 */
ST_API st_status_t st_engine_run_images(st_engine_t *engine, const uint32_t *tokens,
                                        size_t n_tokens, const st_engine_image_t *images,
                                        size_t n_images, uint32_t n_decode, float *logits,
                                        uint32_t *out_ids, st_engine_stats_t *stats);

/* ---- sessions: multi-turn conversations (engine/session.c) ---------------- */

/*
 * A session is a conversation that grows turn by turn: the application
 * appends a user turn, the engine generates a reply, and the next turn is
 * run over the whole conversation so far, so that everything before it is
 * resumed from the cache instead of recomputed (docs/engine.md, "Sessions").
 *
 * Who holds what: the conversation's tokens are held by the session object,
 * in this process; the cluster holds the KV, IDX and KDA objects of its
 * blocks (written by st_engine_run) and the session record (strata.h,
 * st_session_*): the hash of the conversation's last full block (head) and
 * the tokens that block ends at (length, a multiple of the block size). The
 * tokens themselves are never sent to the cluster, so an application that
 * reopens a session in another process gives the history back with
 * st_engine_session_restore(), which checks it against the record.
 *
 * Memory and threads: the session borrows the engine (and through it the
 * engine's model and client), which must outlive it; while a session
 * generates, its engine must not be used by anyone else. One session is used
 * by one thread at a time.
 */
typedef struct st_engine_session st_engine_session_t;

/*
 * Opens (creates, or reopens) the session record id in the cluster with
 * st_session_open() and returns an empty local conversation.
 * @param[in] engine  the engine that runs the turns (borrowed); it must have
 *                    a client (ST_ENGINE_FIELD_CLIENT), which holds the record
 * @param[in] id      the session id, 1..63 bytes (copied)
 * @param[in] ttl_ms  time to live of the record after its last use; 0: the
 *                    cluster's session_ttl (a reopen restarts the TTL)
 * @param[out] sess_p the session, written only on ST_OK
 * On reopen, st_engine_session_info() gives the record found (its length
 * and head); the local conversation still starts empty.
 * Returns ST_OK; ST_ERR_INVALID (a NULL argument, an engine without a
 * client, an id that is empty or longer than 63 bytes); ST_ERR_UNAVAILABLE (no replica of the record answered);
 * ST_ERR_EXHAUSTED (the namespace has max_sessions open); ST_ERR_NOMEM.
 * Every error is logged with the session id and the reason.
 */
ST_API st_status_t st_engine_session_open(st_engine_t *engine, const char *id, uint64_t ttl_ms,
                                          st_engine_session_t **sess_p);

/*
 * Appends a user turn: n tokens (copied) at the end of the conversation.
 * Nothing runs until st_engine_session_generate(); several appends in a row
 * make one longer turn.
 * Returns ST_OK; ST_ERR_INVALID (NULL session or tokens, n 0, a token out
 * of the model's vocabulary: the log line names its index and value; the
 * conversation is unchanged); ST_ERR_NOMEM (unchanged as well).
 */
ST_API st_status_t st_engine_session_append(st_engine_session_t *sess, const uint32_t *tokens,
                                            size_t n);

/*
 * Runs the conversation so far, the appended turn included, through
 * st_engine_run() (which resumes whatever the cluster holds of it and
 * writes the blocks it computes), then n_decode greedy decode steps. The
 * reply's tokens are appended to the conversation, and the record is set to
 * the head and length of the conversation's last full block
 * (st_session_append; skipped while the conversation is shorter than a
 * block).
 * @param[in]  n_decode  tokens to generate (0: prefill the turn only)
 * @param[out] out_ids   the n_decode generated ids, or NULL (the reply is in
 *                       the conversation either way)
 * @param[out] logits    vocab floats after the turn's last token, or NULL
 * @param[out] stats     what st_engine_run did, or NULL
 * Returns ST_OK; ST_ERR_INVALID (NULL session, an empty conversation);
 * ST_ERR_NOMEM, or any other error of st_engine_run (the conversation is
 * then unchanged and the turn still pending); the error of st_session_append
 * (ST_ERR_UNAVAILABLE, ST_ERR_NOT_FOUND when the record expired): the turn
 * and the reply are then in the conversation, out_ids, logits and stats are
 * filled, only the record lags (the next successful generate catches it up).
 */
ST_API st_status_t st_engine_session_generate(st_engine_session_t *sess, uint32_t n_decode,
                                              uint32_t *out_ids, float *logits,
                                              st_engine_stats_t *stats);

/*
 * Appends an image to the user turn, at the conversation's end: its pixels
 * are copied (position is ignored) and st_engine_image_tokens() placeholder
 * ids are appended. Later turns run over it as well (resumed, or a VIS hit).
 * Returns ST_OK; ST_ERR_INVALID (NULL, a bad size or channel count, more
 * than ST_ENGINE_IMAGE_TOKENS_MAX tokens; the conversation is unchanged);
 * ST_ERR_NOMEM.
 */
ST_API st_status_t st_engine_session_append_image(st_engine_session_t *sess,
                                                  const st_engine_image_t *image);

/* Tokens in the conversation, the turn not yet generated included; 0 for NULL. */
ST_API size_t st_engine_session_length(const st_engine_session_t *sess);

/*
 * The conversation's tokens (st_engine_session_length() of them), owned by
 * the session: valid until the next append, generate, restore or free.
 * NULL for NULL or an empty conversation.
 */
ST_API const uint32_t *st_engine_session_tokens(const st_engine_session_t *sess);

/*
 * The session record as last seen: returned by the open, then updated after
 * each successful st_session_append (head, length, updated_ms). NULL for NULL.
 */
ST_API const st_session_info_t *st_engine_session_info(const st_engine_session_t *sess);

/*
 * Gives a reopened session its history: n tokens (copied) that must start
 * with the tokens the record covers (n >= the record's length, and the hash
 * of their block record.length / block_size - 1 equals the record's head).
 * The conversation must be empty. Then append and generate as usual. The
 * history is text: a conversation that held images cannot be restored (its
 * head covers the images' items, ST_ERR_CORRUPT).
 * Returns ST_OK; ST_ERR_INVALID (NULL, n 0, a token out of range, n shorter
 * than the record, a conversation that is not empty); ST_ERR_CORRUPT (the
 * tokens do not hash to the record's head: another conversation); ST_ERR_NOMEM.
 */
ST_API st_status_t st_engine_session_restore(st_engine_session_t *sess, const uint32_t *tokens,
                                             size_t n);

/*
 * Closes the record in the cluster (st_session_close: it is deleted) and
 * frees the session. The objects of the conversation's blocks stay cached
 * for other requests. Returns ST_OK or the error of st_session_close
 * (ST_ERR_NOT_FOUND when it had expired; ST_ERR_UNAVAILABLE); the session is
 * freed in every case. NULL is ST_OK.
 */
ST_API st_status_t st_engine_session_close(st_engine_session_t *sess);

/* Frees the session object only; the record lives on until its TTL. NULL is fine. */
ST_API void st_engine_session_free(st_engine_session_t *sess);

#ifdef __cplusplus
}
#endif
#endif /* STRATA_ENGINE_H */
