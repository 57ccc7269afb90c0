# kernels: CPU tests always; GPU tests where CUDA is built (they skip, exit 77,
# on a machine without a usable device).
strata_add_test(test_kernels_indexer SOURCES unit/test_kernels_indexer.c
                LIBS strata_kernels PkgConfig::CMOCKA LABELS unit kernels)
strata_add_test(test_kernels_attn SOURCES unit/test_kernels_attn.c
                LIBS strata_kernels PkgConfig::CMOCKA LABELS unit kernels)
strata_add_test(test_kernels_kda SOURCES unit/test_kernels_kda.c
                LIBS strata_kernels PkgConfig::CMOCKA LABELS unit kernels)
if(TARGET strata_kernels_cuda)
  strata_add_test(test_kernels_gpu SOURCES gpu/test_kernels_gpu.c
                  LIBS strata_kernels strata_kernels_cuda LABELS gpu kernels)
endif()
