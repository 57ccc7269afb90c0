/*
 * device.c - which device a sequence runs on: the "gpu" shape, the check of
 * a shape against what the CUDA kernels take, the choice behind
 * ST_ENGINE_DEVICE_AUTO, and the stand-ins of the CUDA path in a build
 * without CUDA (docs/engine.md, "The CUDA path").
 */
#include <stdlib.h>
#include <string.h>

#include "en_internal.h"
#include "log.h"
#include "strata/kernels.h"

void st_model_config_gpu(st_model_config_t *cfg)
{
    st_model_config_default(cfg);
    cfg->kda_head_dim = 128;
    cfg->dsa_heads = 64;
    cfg->dsa_latent = 512;
    cfg->dsa_rope = 64;
    cfg->idx_dim = 128;
}

int en_dev_built(void)
{
#ifdef STRATA_ENGINE_CUDA
    return 1;
#else
    return 0;
#endif
}

static int en_dev_refuse(int quiet, const char *field, uint32_t value, const char *constraint)
{
    if (!quiet) {
        lg_error("CUDA path refused field=%s value=%u constraint=\"%s\"", field, value, constraint);
    }
    return 1;
}

st_status_t en_dev_check_shape(const st_model_t *m, int quiet)
{
    const st_model_config_t *c = &m->cfg;

    /* The first misfit only: one line that says what to change. */
    if (m->n_dsa > 0) {
        if (c->dsa_latent != 512 &&
            en_dev_refuse(quiet, "dsa_latent", c->dsa_latent,
                          "512 (d_v of st_cuda_sparse_attn_bf16; see st_model_config_gpu)")) {
            return ST_ERR_INVALID;
        }
        if (c->dsa_rope != 64 &&
            en_dev_refuse(quiet, "dsa_rope", c->dsa_rope,
                          "64 (d_qk = latent + rope = 576 in st_cuda_sparse_attn_bf16)")) {
            return ST_ERR_INVALID;
        }
        if (c->dsa_heads % 64 != 0 &&
            en_dev_refuse(quiet, "dsa_heads", c->dsa_heads,
                          "a multiple of 64 (st_cuda_sparse_attn_bf16)")) {
            return ST_ERR_INVALID;
        }
        if (c->idx_dim != 128 &&
            en_dev_refuse(quiet, "idx_dim", c->idx_dim, "128 (st_cuda_indexer_topk_fp8)")) {
            return ST_ERR_INVALID;
        }
        /* idx_heads <= 64, as st_cuda_indexer_topk_fp8 needs, is the model's own bound. */
    }
    if (m->n_kda > 0 && c->kda_head_dim != 128 &&
        en_dev_refuse(quiet, "kda_head_dim", c->kda_head_dim,
                      "128 (st_cuda_kda_decode: dk = dv = 128)")) {
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

st_status_t en_dev_resolve(const st_model_t *m, uint32_t want, int *cuda)
{
    st_status_t r;

    *cuda = 0;
    switch (want) {
    case ST_ENGINE_DEVICE_CPU: return ST_OK;
    case ST_ENGINE_DEVICE_CUDA:
        if (!en_dev_built()) {
            lg_error("engine refused field=device value=cuda reason=\"this build has no CUDA "
                     "(nvcc not found at configure time, or STRATA_CUDA=OFF)\"");
            return ST_ERR_UNSUPPORTED;
        }
        r = en_dev_check_shape(m, 0);
        if (r != ST_OK) {
            return r;
        }
#ifdef STRATA_ENGINE_CUDA
        if (st_cuda_available() != ST_OK) {
            lg_error("engine refused field=device value=cuda reason=\"no usable CUDA device\"");
            return ST_ERR_UNAVAILABLE;
        }
#endif
        *cuda = 1;
        return ST_OK;
    case ST_ENGINE_DEVICE_AUTO:
#ifdef STRATA_ENGINE_CUDA
        *cuda = en_dev_check_shape(m, 1) == ST_OK && st_cuda_available() == ST_OK;
#endif
        lg_info("engine device auto chose=%s built=%d shape_fits=%d", *cuda ? "cuda" : "cpu",
                en_dev_built(), en_dev_check_shape(m, 1) == ST_OK);
        return ST_OK;
    default:
        lg_error("engine refused field=device value=%u reason=\"cpu (0), cuda (1) or auto (2)\"",
                 want);
        return ST_ERR_INVALID;
    }
}

#ifndef STRATA_ENGINE_CUDA
/* A build without CUDA: no sequence is ever attached, so these are not reached. */
st_status_t en_dev_attach(st_seq_t *seq)
{
    return ST_ERR_UNSUPPORTED;
}

void en_dev_free(struct en_dev *dev)
{
}

void en_dev_invalidate(st_seq_t *seq)
{
}

void *en_host_alloc(size_t bytes, int pinned)
{
    return malloc(bytes ? bytes : 1);
}

void en_host_free(void *p, int pinned)
{
    free(p);
}

st_status_t en_dev_load_start(st_seq_t *seq)
{
    return ST_ERR_INTERNAL;
}

st_status_t en_dev_load_piece(st_seq_t *seq, int l, size_t a, size_t b, size_t n)
{
    return ST_ERR_INTERNAL;
}

st_status_t en_dev_load_end(st_seq_t *seq, size_t n)
{
    return ST_ERR_INTERNAL;
}

void en_dev_loaded(st_seq_t *seq, size_t n)
{
}

void en_dev_kda_pull(const st_seq_t *seq)
{
}

st_status_t en_dev_layer(st_seq_t *seq, const en_layer_t *L, size_t pos)
{
    lg_error("the CUDA path is not in this build");
    return ST_ERR_INTERNAL;
}

st_status_t en_dev_layer_issue(st_seq_t *seq, const en_layer_t *L, size_t pos)
{
    return en_dev_layer(seq, L, pos);
}

st_status_t en_dev_layer_finish(st_seq_t *seq, const en_layer_t *L)
{
    return ST_ERR_INTERNAL;
}

st_status_t en_dev_forward_span(st_seq_t *seq, const uint32_t *tokens, size_t n, float *logits)
{
    lg_error("the CUDA path is not in this build");
    return ST_ERR_INTERNAL;
}
#endif
