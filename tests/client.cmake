# libstrata's option table, alone (client/options.c).
strata_add_test(test_client_options SOURCES unit/test_client_options.c
                LIBS strata_client PkgConfig::CMOCKA LABELS unit client)

# libstrata against real daemons (included from tests/CMakeLists.txt).
# The data plane's lease cache alone (client/lease.c).
strata_add_test(test_lease_cache SOURCES unit/test_lease_cache.c
                LIBS strata_client PkgConfig::CMOCKA LABELS unit client)
target_include_directories(test_lease_cache PRIVATE ${PROJECT_SOURCE_DIR}/client)

# The libstrata set-up the integration tests share: connect parameters,
# connecting, token streams and chains (tests/support/client_fixture.c).
add_library(strata_test_client STATIC support/client_fixture.c)
target_include_directories(strata_test_client PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/support)
target_link_libraries(strata_test_client PUBLIC strata_client PkgConfig::CMOCKA PkgConfig::XXHASH)

strata_add_test(test_client SOURCES integration/test_client.c
                LIBS strata_test_client strata_test_cluster strata_client PkgConfig::CMOCKA PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> LABELS integration client TIMEOUT 600)
add_dependencies(test_client stratad)

# libstrata with etcd in place of a node list: finds the cluster, follows a
# join and a leave (docs/membership.md), against a real etcd-server.
strata_add_test(test_membership_client SOURCES integration/test_membership_client.c
                LIBS strata_test_client strata_test_grpc strata_test_cluster strata_client
                     PkgConfig::CMOCKA PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> LABELS integration client membership TIMEOUT 300
                ENV STRATA_ETCD_SH=${PROJECT_SOURCE_DIR}/scripts/etcd.sh)
add_dependencies(test_membership_client stratad)
# The ring epoch is etcd's alone: daemons restarted after kill -9, etcd
# restarted, a join and a drain; every daemon, a client and etcdctl's read
# of the keys agree after each (issue #23).
strata_add_test(test_membership_epoch SOURCES integration/test_membership_epoch.c
                LIBS strata_test_client strata_test_ring strata_test_grpc strata_test_cluster strata_client
                     PkgConfig::CMOCKA PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> LABELS integration client cached membership TIMEOUT 300
                ENV STRATA_ETCD_SH=${PROJECT_SOURCE_DIR}/scripts/etcd.sh)
add_dependencies(test_membership_epoch stratad)
# The same as an operator and a Python program see it: /metrics, strata
# status --etcd, strata.Client(etcd=...), etcd stopped and back.
if(TARGET strata_cli)
  add_test(NAME test_membership_py
           COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_membership.py
                   --stratad $<TARGET_FILE:stratad> --strata $<TARGET_FILE:strata_cli>
                   --lib $<TARGET_FILE:strata> --binding ${PROJECT_SOURCE_DIR}/client/python
                   --root ${PROJECT_SOURCE_DIR})
  set_tests_properties(test_membership_py PROPERTIES LABELS "integration;python;client;membership"
                       TIMEOUT 300 SKIP_RETURN_CODE 77)
  if(STRATA_SANITIZE)
    set_tests_properties(test_membership_py PROPERTIES ENVIRONMENT
                         "LD_PRELOAD=${STRATA_LIBASAN};ASAN_OPTIONS=detect_leaks=0")
  endif()
endif()

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
  set_tests_properties(test_python_binding PROPERTIES ENVIRONMENT
                       "LD_PRELOAD=${STRATA_LIBASAN};ASAN_OPTIONS=detect_leaks=0")
endif()

# The Python package (client/python/strata/): each API family against two
# daemons; its st_client_params_t table against strata.h (no daemon); pip
# install from the checkout into a temporary target, offline.
add_test(NAME test_python_package
         COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_package.py
                 --stratad $<TARGET_FILE:stratad> --lib $<TARGET_FILE:strata>
                 --binding ${PROJECT_SOURCE_DIR}/client/python)
set_tests_properties(test_python_package PROPERTIES LABELS "integration;python;client"
                     TIMEOUT 300)
add_test(NAME test_python_params_header
         COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_params_header.py
                 --lib $<TARGET_FILE:strata> --binding ${PROJECT_SOURCE_DIR}/client/python
                 --header ${PROJECT_SOURCE_DIR}/include/strata/strata.h)
set_tests_properties(test_python_params_header PROPERTIES LABELS "unit;python;client"
                     TIMEOUT 60)
add_test(NAME test_python_install
         COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_install.py
                 --stratad $<TARGET_FILE:stratad> --lib $<TARGET_FILE:strata>
                 --package ${PROJECT_SOURCE_DIR}/client/python)
set_tests_properties(test_python_install PROPERTIES LABELS "integration;python;client"
                     TIMEOUT 300)
if(STRATA_SANITIZE)
  set_tests_properties(test_python_package test_python_params_header test_python_install
                       PROPERTIES ENVIRONMENT
                       "LD_PRELOAD=${STRATA_LIBASAN};ASAN_OPTIONS=detect_leaks=0")
endif()

# Hits and misses per object kind, VIS included, on /metrics, /stats, Stats and
# `strata metrics` (the binding, a stock gRPC client and the CLI).
if(TARGET strata_cli)
  add_test(NAME test_kind_metrics
           COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_kind_metrics.py
                   --stratad $<TARGET_FILE:stratad> --strata $<TARGET_FILE:strata_cli>
                   --lib $<TARGET_FILE:strata> --binding ${PROJECT_SOURCE_DIR}/client/python
                   --root ${PROJECT_SOURCE_DIR})
  set_tests_properties(test_kind_metrics PROPERTIES LABELS "integration;python;client;metrics"
                       TIMEOUT 120)
  if(STRATA_SANITIZE)
    set_tests_properties(test_kind_metrics PROPERTIES ENVIRONMENT
                         "LD_PRELOAD=${STRATA_LIBASAN};ASAN_OPTIONS=detect_leaks=0")
  endif()
endif()

# The item parsers of `strata hash/put/get` (client/cli/cli_items.c).
strata_add_test(test_fuzz_cli_items
                SOURCES fuzz/fuzz_cli_items.c ${PROJECT_SOURCE_DIR}/client/cli/cli_items.c
                LIBS strata_fuzz_util strata_image strata_client LABELS fuzz unit client
                TIMEOUT 120)
target_include_directories(test_fuzz_cli_items PRIVATE ${PROJECT_SOURCE_DIR}/client/cli)

# The set-up the data-plane tests share: daemons checked to serve a one-sided
# transport, chains, object bytes, a raw UCX connection (tests/support/dp_harness.c).
add_library(strata_test_dp STATIC support/dp_harness.c)
target_link_libraries(strata_test_dp PUBLIC strata_test_grpc strata_test_client strata_test_cluster strata_client PkgConfig::CMOCKA
                      PkgConfig::XXHASH)

# The one-sided data plane through stratad and libstrata: one executable,
# registered once per transport path (a ';' in a provider is written '+').
strata_add_test(test_dataplane_ucx_shm SOURCES integration/test_dataplane.c
                integration/test_dataplane_raw.c integration/test_dataplane_deadline.c
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
                LIBS strata_test_client strata_test_cluster strata_client PkgConfig::CMOCKA PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> LABELS integration client cached TIMEOUT 600)
add_dependencies(test_lookup_compact stratad)

# Locate, Release and Lookup over the transport (docs/protocol.md, "Calls over
# the transport"): raw frames against a real stratad, libstrata with and
# without them on three daemons, one killed.
strata_add_test(test_transport_calls SOURCES integration/test_transport_calls.c
                LIBS strata_test_grpc strata_test_client strata_test_cluster strata_client strata_transport PkgConfig::CMOCKA
                PkgConfig::XXHASH PkgConfig::OPENSSL
                ARGS $<TARGET_FILE:stratad> LABELS integration client cached TIMEOUT 300)
add_dependencies(test_transport_calls stratad)

# Near-data scoring (st_client_score, the daemons' Score) over 1-4 daemons
# against local st_cpu_indexer_topk; bad input, a node killed, tenants, the
# transport, /metrics.
strata_add_test(test_score SOURCES integration/test_score.c
                LIBS strata_test_grpc strata_test_tcall strata_test_client strata_test_cluster strata_client strata_kernels
                     PkgConfig::CMOCKA PkgConfig::OPENSSL
                ARGS $<TARGET_FILE:stratad> LABELS integration client TIMEOUT 600)
add_dependencies(test_score stratad)

# Admission control (max_serving_calls, max_queued_calls) of a real daemon under a flood
# of 8 MiB gets from eight clients: ST_ERR_OVERLOADED with a hint, or the right bytes.
strata_add_test(test_admission SOURCES integration/test_admission.c
                LIBS strata_test_client strata_test_cluster strata_client PkgConfig::CMOCKA
                ARGS $<TARGET_FILE:stratad> LABELS integration client TIMEOUT 600)
add_dependencies(test_admission stratad)
# `strata load` (client/cli/cli_load*.c): the histogram, the draws and the
# mix parser alone; then the command against three real daemons (an SSD tier
# each, 128 MiB of memory) and a real redis-server (tests/integration/test_load.py).
strata_add_test(test_load_hist
                SOURCES unit/test_load_hist.c ${PROJECT_SOURCE_DIR}/client/cli/cli_load_hist.c
                LIBS strata_client PkgConfig::CMOCKA m LABELS unit client)
target_include_directories(test_load_hist PRIVATE ${PROJECT_SOURCE_DIR}/client/cli
                           ${PROJECT_SOURCE_DIR}/tests/support)
if(TARGET strata_cli)
  add_test(NAME test_load
           COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_load.py
                   --stratad $<TARGET_FILE:stratad> --strata $<TARGET_FILE:strata_cli>)
  set_tests_properties(test_load PROPERTIES LABELS "integration;python;client" TIMEOUT 180)
endif()
# strata.hf (client/python/strata/hf) with real transformers models on a GPU against two
# daemons: exits 77, skipped, where the interpreter has no torch, transformers or GPU (CI).
# -DSTRATA_HF_PYTHON=python3 runs it with an interpreter that has them.
set(STRATA_HF_PYTHON ${STRATA_PYTHON} CACHE STRING "python3 with torch and transformers")
add_test(NAME test_hf_device
         COMMAND ${STRATA_HF_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_hf.py
                 --stratad $<TARGET_FILE:stratad> --lib $<TARGET_FILE:strata>
                 --binding ${PROJECT_SOURCE_DIR}/client/python)
set_tests_properties(test_hf_device PROPERTIES LABELS "gpu;python;client" SKIP_RETURN_CODE 77
                     TIMEOUT 600)
if(STRATA_SANITIZE)
  # The sanitized libstrata in a plain python needs ASan's runtime preloaded (as above).
  set_tests_properties(test_hf_device PROPERTIES ENVIRONMENT
                       "LD_PRELOAD=${STRATA_LIBASAN};ASAN_OPTIONS=detect_leaks=0")
endif()
