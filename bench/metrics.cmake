# Benchmarks of the metrics module (included from bench/CMakeLists.txt).
add_executable(bench_metrics bench_metrics.c bench_util.c)
target_link_libraries(bench_metrics PRIVATE strata_metrics Threads::Threads)
