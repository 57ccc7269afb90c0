# cached: the storage core's lookup, put and get against their floors (hash
# probes, memcpy + XXH3). Run by hand: build-*/bench/bench_cached.
add_executable(bench_cached bench_cached.c bench_util.c ${PROJECT_SOURCE_DIR}/tests/support/mkhash.c)
target_include_directories(bench_cached PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
target_link_libraries(bench_cached PRIVATE strata_core m)

# stratad's SSD tier in process: daemon start with 1M blocks on SSD, spill and
# promote against a plain file. Run by hand: build-*/bench/bench_tier.
add_executable(bench_tier bench_tier.c bench_util.c ${PROJECT_SOURCE_DIR}/tests/support/mkhash.c)
target_include_directories(bench_tier PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
target_link_libraries(bench_tier PRIVATE strata_daemon PkgConfig::XXHASH m)
