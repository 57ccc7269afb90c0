/*
 * common.cu - device discovery for the CUDA kernels.
 */
#include "kn_cuda.h"

extern "C" st_status_t st_cuda_available(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        cudaGetLastError(); /* clear the sticky error of a machine without a device */
        return ST_ERR_UNAVAILABLE;
    }
    return ST_OK;
}
