# rpc: control-plane call latency against a bare TCP ping-pong, throughput,
# large messages and fan-out (docs/performance.md).
add_executable(bench_rpc bench_rpc.c bench_util.c)
target_link_libraries(bench_rpc PRIVATE strata_rpc)
