# strata_engine_bench(<name>): <name>.c over libstrata-engine, starting its
# own daemons (tests/support/cluster.c).
function(strata_engine_bench name)
  add_executable(${name} ${name}.c bench_util.c ${PROJECT_SOURCE_DIR}/tests/support/cluster.c)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  target_link_libraries(${name} PRIVATE strata_engine m)
  add_dependencies(${name} stratad)
endfunction()

# engine: time to first token computed in full against resumed from a stratad.
# Run by hand: bench_engine $(build)/cached/stratad [TOKENS] [REPS].
if(TARGET stratad)
  strata_engine_bench(bench_engine)
endif()

# chunked prefill against the token path on the CPU, no cluster (docs/engine.md).
# Run by hand: bench_prefill [TOKENS] [CHUNK] [ROUNDS] [default|gpu].
add_executable(bench_prefill bench_prefill.c bench_util.c)
target_link_libraries(bench_prefill PRIVATE strata_engine m)

# engine at long context: TTFT with a cached history, overlap efficiency, decode
# with 10% of the blocks local. Run by hand:
# bench_engine_long $(build)/cached/stratad [HISTORY] [DECODE] [REPS] [TRANSPORT].
if(TARGET stratad)
  strata_engine_bench(bench_engine_long)
endif()

# the engine's CUDA path against its CPU path at long context (where CUDA is built).
# Run by hand on a GPU: bench_engine_gpu $(build)/cached/stratad [HISTORY] [DECODE] [REPS] [TOPK]
# [TRANSPORT] [COPY_THREADS].
if(TARGET stratad AND TARGET strata_engine_cuda AND TARGET bench_transport_loop)
  strata_engine_bench(bench_engine_gpu)
  target_link_libraries(bench_engine_gpu PRIVATE bench_transport_loop)
endif()

# the engine's near-data scoring (issue #20) at long context over four stratad:
# local scoring against remote_scoring, bytes, decode time, memory, break-even.
# Run by hand: bench_engine_score $(build)/cached/stratad [HISTORY] [DECODE] [REPS] [POOL] [TRANSPORT].
if(TARGET stratad)
  strata_engine_bench(bench_engine_score)
endif()

# engine images: a multi-turn, multi-session workload whose images recur, with
# and without the VIS cache in the same run (docs/performance.md, "Images").
# Run by hand: bench_engine_vis $(build)/cached/stratad [--sessions N] [--turns N] ...
if(TARGET stratad)
  strata_engine_bench(bench_engine_vis)
  target_link_libraries(bench_engine_vis PRIVATE strata_image)
endif()
