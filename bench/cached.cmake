# cached: the storage core's lookup, put and get against their floors (hash
# probes, memcpy + XXH3). Run by hand: build-*/bench/bench_cached.
add_executable(bench_cached bench_cached.c bench_util.c)
target_link_libraries(bench_cached PRIVATE strata_cached m)
