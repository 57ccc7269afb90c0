/*
 * rmsnorm.c - RMSNorm fused with the residual add, in fp32 C.
 */
#include <math.h>

#include "kn_internal.h"

st_status_t st_cpu_rmsnorm_residual(const float *x, float *residual, const float *weight, int n,
                                    int d, float eps, float *out)
{
    if (!x || !residual || !weight || !out || n <= 0 || d <= 0 || !(eps >= 0.0f)) {
        return ST_ERR_INVALID;
    }
    for (int i = 0; i < n; i++) {
        const float *xi = x + (size_t)i * d;
        float *ri = residual + (size_t)i * d;
        float *oi = out + (size_t)i * d;
        kn_ops.axpy(1.0f, xi, ri, d);
        float ss = kn_ops.dot(ri, ri, d);
        float inv = 1.0f / sqrtf(ss / (float)d + eps);
        for (int c = 0; c < d; c++) {
            oi[c] = ri[c] * inv * weight[c];
        }
    }
    return ST_OK;
}
