/*
 * en_dev.h - what the CUDA path's files share (engine/model_cuda.c, the
 * token-by-token path; engine/prefill_cuda.c, a prefill span): the device
 * copies of a sequence and the helpers around the CUDA runtime.
 */
#ifndef STRATA_EN_DEV_H
#define STRATA_EN_DEV_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "en_internal.h"
#include "log.h"

#define EN_CH  4096u /* tokens per piece of an upload after a resume */
#define EN_KD  128   /* KDA head dim and indexer dim on this path */
#define EN_PAD 64    /* floats: sub-buffers start 256-byte aligned */

typedef struct en_dev_dsa {
    uint16_t *rows; /* bf16, slots x row (slot as en_kv_row) */
    uint8_t *keys8; /* cap x 128 */
    float *scale;   /* cap */
    float *summary; /* cap / block x 2 x 128 */
    float *w_q;     /* dq: d_model x heads*row */
    float *w_out;   /* dout: heads*latent x d_model */
} en_dev_dsa_t;

struct en_dev {
    cudaStream_t stream;
    en_dev_dsa_t *dsa; /* n_dsa */
    int n_dsa;
    size_t cap;    /* tokens the keys and summaries hold */
    size_t slots;  /* rows the row stores hold */
    size_t ring;   /* the pool the row stores are laid out for */
    size_t len;    /* leading tokens whose DSA state the device holds */
    size_t cur;    /* position being computed, (size_t)-1 for none */
    int kda_valid; /* the device KDA states are the sequence's */
    int kda_newer; /* ... and newer than seq->kda */
    float *kda;
    void *ws;
    size_t ws_bytes;
    float *scores; /* cap: every row's indexer score (ties resolved by row) */
    int *ties;     /* en_cu_ties_scratch(cap) */
    /* One token's device buffers. */
    float *up; /* xn | row | key | iq | w | rope cos, sin: as h_up */
    size_t o_row, o_key, o_iq, o_w, o_cs, n_up;
    float *qf, *oa, *ob, *lsea, *lseb, *part, *res, *kin, *ko, *bulk, *tau;
    uint16_t *qb, *stage;
    float *stagef;   /* the remote rows as read (fp32), converted into stage on the device */
    float *h_pinned; /* the sequence's row stage, registered with CUDA (NULL: not) */
    int32_t *sel, *sel_raw;
    const uint16_t **ptr;
    uint32_t *cnt;
    /* Pinned host buffers. */
    float *h_up, *h_res, *h_kin, *h_ko;
    uint32_t *h_cnt;
    int32_t *h_sel;
    const uint16_t **h_ptr;
    uint16_t *h_stage;
    /* A prefill span (engine/prefill_cuda.c): every weight of the model on
     * the device (as m->arena, uploaded at the first span) and the span's
     * buffers, grown to span_cap tokens (span_keys: keys the scores tile
     * covers). */
    float *w_dev;
    size_t span_cap, span_keys;
    float *sx, *sres, *sxn, *satt, *srow, *skey, *siq, *sw, *scs, *sqf, *soa, *slse;
    float *sk_q, *sk_k, *sk_v, *sk_g, *sk_b, *sk_o, *srl, *swt, *sh1, *sh3, *seo, *smm, *sscores;
    uint16_t *sqb;
    int32_t *ssel, *ssel_raw;
    int *sidx;
    const uint16_t **sptr;
    uint32_t *scnt;
    size_t smm_floats;
    float *h_sx, *h_scs, *h_last; /* pinned: the span's input rows, rope tables, last row */
};

static inline st_status_t en_cu_ok(cudaError_t e, const char *what)
{
    if (e != cudaSuccess) {
        lg_error("CUDA call failed call=%s error=\"%s\"", what, cudaGetErrorString(e));
        return ST_ERR_INTERNAL;
    }
    return ST_OK;
}

#define EN_CU(call)                                  \
    do {                                             \
        st_status_t en_r_ = en_cu_ok((call), #call); \
        if (en_r_ != ST_OK) {                        \
            return en_r_;                            \
        }                                            \
    } while (0)

#define EN_ST(call)                                                                          \
    do {                                                                                     \
        st_status_t en_r_ = (call);                                                          \
        if (en_r_ != ST_OK) {                                                                \
            lg_error("CUDA kernel refused call=%s status=%s", #call, st_status_name(en_r_)); \
            return en_r_;                                                                    \
        }                                                                                    \
    } while (0)

/* n rounded up to EN_PAD floats. */
size_t en_pad(size_t n);
/* Device memory / pinned host memory of bytes (at least 16) into *pp: ST_OK, or NULL and
 * ST_ERR_NOMEM (logged). */
st_status_t en_dmalloc(void *pp, size_t bytes);
st_status_t en_hmalloc(void *pp, size_t bytes);
void en_dfree(void *p);
/* cs[0..n/2) = cos, cs[n/2..n) = sin of the rope angles of position pos (the CPU's en_rope). */
void en_dv_rope_table(float *cs, int n, size_t pos);
/* Before the first layer of the token at pos: the device holds tokens [0, pos) (it uploads
 * what it lacks after a resume, and the KDA states), and its stores fit seq->cap. */
st_status_t en_dev_begin(st_seq_t *seq, size_t pos);
/* Frees a prefill span's buffers and the device weights (engine/prefill_cuda.c). */
void en_dev_span_release(struct en_dev *dev);

#endif
