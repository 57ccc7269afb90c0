# cached: the storage core's lookup, put and get against their floors (hash
# probes, memcpy + XXH3). Run by hand: build-*/bench/bench_cached.
add_executable(bench_cached bench_cached.c bench_util.c)
target_link_libraries(bench_cached PRIVATE strata_cached m)

# stratad's SSD tier in process: daemon start with 1M blocks on SSD, spill and
# promote against a plain file. Run by hand: build-*/bench/bench_tier.
add_executable(bench_tier bench_tier.c bench_util.c)
target_link_libraries(bench_tier PRIVATE strata_daemon PkgConfig::XXHASH m)
