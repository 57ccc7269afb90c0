# libstrata against real daemons (included from tests/CMakeLists.txt).
strata_add_test(test_client SOURCES integration/test_client.c
                LIBS strata_test_cluster strata_client PkgConfig::CMOCKA PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> LABELS integration client TIMEOUT 600)
add_dependencies(test_client stratad)

# The Python binding against two daemons (Debian's python3 with numpy).
add_test(NAME test_python_binding
         COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_binding.py
                 --stratad $<TARGET_FILE:stratad> --lib $<TARGET_FILE:strata>
                 --binding ${PROJECT_SOURCE_DIR}/client/python)
set_tests_properties(test_python_binding PROPERTIES LABELS "integration;python;client"
                     TIMEOUT 300)
if(STRATA_SANITIZE)
  # The sanitized libstrata in a plain python: load ASan's runtime first;
  # the interpreter's own allocations are not ours to leak-check.
  execute_process(COMMAND ${CMAKE_C_COMPILER} -print-file-name=libasan.so
                  OUTPUT_VARIABLE STRATA_LIBASAN OUTPUT_STRIP_TRAILING_WHITESPACE)
  set_tests_properties(test_python_binding PROPERTIES ENVIRONMENT
                       "LD_PRELOAD=${STRATA_LIBASAN};ASAN_OPTIONS=detect_leaks=0")
endif()

# The set-up the data-plane tests share: daemons checked to serve a one-sided
# transport, chains, object bytes, a raw UCX connection (tests/support/dp_harness.c).
add_library(strata_test_dp STATIC support/dp_harness.c)
target_link_libraries(strata_test_dp PUBLIC strata_test_cluster strata_client PkgConfig::CMOCKA
                      PkgConfig::XXHASH)

# The one-sided data plane through stratad and libstrata: one executable,
# registered once per transport path (a ';' in a provider is written '+').
strata_add_test(test_dataplane_ucx_shm SOURCES integration/test_dataplane.c
                LIBS strata_test_dp strata_client PkgConfig::CMOCKA PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> ucx ENV "UCX_TLS=sm,self"
                LABELS integration client dataplane TIMEOUT 300)
add_dependencies(test_dataplane_ucx_shm stratad)
foreach(dp_case "ucx_tcp|ucx|UCX_TLS=tcp,self" "fabric_tcp|libfabric:tcp+ofi_rxm|STRATA_DP=1"
        "fabric_shm|libfabric:shm|STRATA_DP=1")
  string(REPLACE "|" ";" dp_case "${dp_case}")
  list(GET dp_case 0 dp_name)
  list(GET dp_case 1 dp_spec)
  list(GET dp_case 2 dp_env)
  add_test(NAME test_dataplane_${dp_name}
           COMMAND test_dataplane_ucx_shm $<TARGET_FILE:stratad> ${dp_spec})
  set_tests_properties(test_dataplane_${dp_name} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "integration;client;dataplane" ENVIRONMENT "${dp_env}")
endforeach()

# How whole objects read over the data plane are vouched for (verify_reads:
# lease bound or checksum), and batches located in waves over two daemons.
strata_add_test(test_dataplane_verify SOURCES integration/test_dataplane_verify.c
                LIBS strata_test_dp strata_client PkgConfig::CMOCKA PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> ENV "UCX_TLS=sm,self"
                LABELS integration client dataplane TIMEOUT 300)
add_dependencies(test_dataplane_verify stratad)

# Row reads accept only rows that match the daemon's row sums: scribbled rows
# and a reused extent are refused, sums survive spill and promote, inline
# Gets of rows are checked (docs/transport.md "Row verification").
strata_add_test(test_dataplane_rows SOURCES integration/test_dataplane_rows.c
                LIBS strata_test_dp strata_client PkgConfig::CMOCKA PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> ENV "UCX_TLS=sm,self"
                LABELS integration client dataplane TIMEOUT 300)
add_dependencies(test_dataplane_rows stratad)
# Over TCP the rows are checked when they have landed (no copy at the post).
add_test(NAME test_dataplane_rows_tcp COMMAND test_dataplane_rows $<TARGET_FILE:stratad>)
set_tests_properties(test_dataplane_rows_tcp PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "integration;client;dataplane" ENVIRONMENT "UCX_TLS=tcp,self")

# The strata command: --help everywhere, exit codes, a round trip.
add_test(NAME test_cli
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_cli.sh $<TARGET_FILE:stratad>
                 $<TARGET_FILE:strata_cli>)
set_tests_properties(test_cli PROPERTIES LABELS "integration;client" TIMEOUT 300)

# A TLS handshake slower than 100 ms (a proxy holds it 400 ms) still connects.
add_test(NAME test_slow_handshake
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_slow_handshake.sh
                 $<TARGET_FILE:stratad> $<TARGET_FILE:strata_cli>)
set_tests_properties(test_slow_handshake PROPERTIES LABELS "integration;client;tls" TIMEOUT 120)

# Compact lookup segments against the full form: one daemon over raw Lookup
# calls, four through libstrata (docs/protocol.md "Compact segments").
strata_add_test(test_lookup_compact SOURCES integration/test_lookup_compact.c
                LIBS strata_test_cluster strata_client PkgConfig::CMOCKA PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> LABELS integration client cached TIMEOUT 600)
add_dependencies(test_lookup_compact stratad)

# Locate, Release and Lookup over the transport (docs/protocol.md, "Calls over
# the transport"): raw frames against a real stratad, libstrata with and
# without them on three daemons, one killed.
strata_add_test(test_transport_calls SOURCES integration/test_transport_calls.c
                LIBS strata_test_cluster strata_client strata_transport PkgConfig::CMOCKA
                PkgConfig::XXHASH PkgConfig::OPENSSL
                ARGS $<TARGET_FILE:stratad> LABELS integration client cached TIMEOUT 300)
add_dependencies(test_transport_calls stratad)
