# engine: time to first token computed in full against resumed from a stratad.
# Run by hand: bench_engine $(build)/cached/stratad [TOKENS] [REPS].
if(TARGET stratad)
  add_executable(bench_engine bench_engine.c bench_util.c
                 ${PROJECT_SOURCE_DIR}/tests/support/cluster.c)
  target_include_directories(bench_engine PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  target_link_libraries(bench_engine PRIVATE strata_engine m)
  add_dependencies(bench_engine stratad)
endif()

# engine at long context: TTFT with a cached history, overlap efficiency, decode
# with 10% of the blocks local. Run by hand:
# bench_engine_long $(build)/cached/stratad [HISTORY] [DECODE] [REPS] [TRANSPORT].
if(TARGET stratad)
  add_executable(bench_engine_long bench_engine_long.c bench_util.c
                 ${PROJECT_SOURCE_DIR}/tests/support/cluster.c)
  target_include_directories(bench_engine_long PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  target_link_libraries(bench_engine_long PRIVATE strata_engine m)
  add_dependencies(bench_engine_long stratad)
endif()

# the engine's CUDA path against its CPU path at long context (where CUDA is built).
# Run by hand on a GPU: bench_engine_gpu $(build)/cached/stratad [HISTORY] [DECODE] [REPS] [TOPK].
if(TARGET stratad AND TARGET strata_engine_cuda)
  add_executable(bench_engine_gpu bench_engine_gpu.c bench_util.c
                 ${PROJECT_SOURCE_DIR}/tests/support/cluster.c)
  target_include_directories(bench_engine_gpu PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  target_link_libraries(bench_engine_gpu PRIVATE strata_engine m)
  add_dependencies(bench_engine_gpu stratad)
endif()
