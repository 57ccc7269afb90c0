# The transport limit: streaming one-sided gets against memcpy of the same
# shape (see docs/performance.md, "Transport"). bench_transport_loop is the
# reusable part, for the daemon-side read benchmark.
add_library(bench_transport_loop STATIC bench_transport_loop.c bench_util.c
            ${PROJECT_SOURCE_DIR}/tests/support/fd_io.c)
target_include_directories(bench_transport_loop PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}
                           PRIVATE ${PROJECT_SOURCE_DIR}/tests/support)
target_link_libraries(bench_transport_loop PUBLIC strata_transport m)

add_executable(bench_transport bench_transport.c)
target_link_libraries(bench_transport PRIVATE bench_transport_loop)
