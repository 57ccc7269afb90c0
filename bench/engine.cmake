# engine: time to first token computed in full against resumed from a stratad.
# Run by hand: bench_engine $(build)/cached/stratad [TOKENS] [REPS].
if(TARGET stratad)
  add_executable(bench_engine bench_engine.c bench_util.c
                 ${PROJECT_SOURCE_DIR}/tests/support/cluster.c)
  target_include_directories(bench_engine PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
  target_link_libraries(bench_engine PRIVATE strata_engine m)
  add_dependencies(bench_engine stratad)
endif()
