# The SSD tier: restart time with a million blocks indexed, and spill/promote
# throughput against a plain sequential file write and read in the same run.
add_executable(bench_ssd bench_ssd.c bench_util.c)
target_link_libraries(bench_ssd PRIVATE strata_ssd PkgConfig::XXHASH Threads::Threads m)
