# kernels: the C kernels against a plain scalar loop, and (with CUDA) the GPU
# kernels against the device's measured limits. Run by hand; see docs/performance.md.
add_executable(bench_kernels bench_kernels.c bench_util.c)
target_link_libraries(bench_kernels PRIVATE strata_kernels m)
target_include_directories(bench_kernels PRIVATE ${PROJECT_SOURCE_DIR}/include)
if(TARGET strata_kernels_cuda)
  add_executable(bench_kernels_gpu bench_kernels_gpu.c bench_util.c)
  target_link_libraries(bench_kernels_gpu PRIVATE strata_kernels_cuda strata_kernels
                        CUDA::cublas m)
  target_include_directories(bench_kernels_gpu PRIVATE ${PROJECT_SOURCE_DIR}/include)
endif()
