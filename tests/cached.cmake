# The cache daemon's storage core (cached/): unit tests per module, the
# randomized model test and the 1M-token chain.
foreach(t arena slab htab radix store session store_model tenant)
  strata_add_test(test_${t} SOURCES unit/test_${t}.c
                  LIBS strata_core PkgConfig::CMOCKA PkgConfig::XXHASH LABELS unit cached)
endforeach()

# The tenants file, token lookup, the peer credential, secrets (cached/tenants.c).
strata_add_test(test_tenants SOURCES unit/test_tenants.c support/tenants.c
                LIBS strata_daemon PkgConfig::CMOCKA PkgConfig::OPENSSL LABELS unit cached)

# The sd_notify datagrams (cached/notify.c): sockets, refused values, the
# watchdog's interval, random environment values.
strata_add_test(test_notify SOURCES unit/test_notify.c
                LIBS strata_daemon PkgConfig::CMOCKA LABELS unit cached deploy)

# stratad over gRPC: real daemons on loopback (tests/support/cluster.c), a
# throwaway etcd-server (tests/support/etcd_fixture.c over scripts/etcd.sh), and
# the pieces of a cross-tenant probe (tests/support/ns_probe.c), the stratad
# argument of every integration test's main (tests/support/stratad_arg.c),
# removing the SSD tiers' folders (tests/support/data_dirs.c).
add_library(strata_test_cluster STATIC support/cluster.c support/ns_probe.c support/mkhash.c
            support/stratad_arg.c support/data_dirs.c support/etcd_fixture.c)
target_include_directories(strata_test_cluster PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/support
                           PRIVATE ${PROJECT_SOURCE_DIR}/include)
# A raw gRPC connection to one daemon: Hello, calls, object bytes, Put
# requests of chained blocks (tests/support/grpc_conn.c).
add_library(strata_test_grpc STATIC support/grpc_conn.c)
target_include_directories(strata_test_grpc PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/support)
target_link_libraries(strata_test_grpc PUBLIC strata_rpc strata_proto strata_wire PkgConfig::CMOCKA
                      PkgConfig::XXHASH)
# The rings and epochs the membership tests compare after each change, and
# a cluster on a fresh etcd (tests/support/ring_check.c).
add_library(strata_test_ring STATIC support/ring_check.c)
target_link_libraries(strata_test_ring PUBLIC strata_test_grpc strata_test_cluster)
strata_add_test(test_stratad SOURCES integration/test_stratad.c
                LIBS strata_test_grpc strata_test_cluster strata_rpc strata_proto strata_wire PkgConfig::CMOCKA
                     PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> LABELS integration cached TIMEOUT 600)
add_dependencies(test_stratad stratad)

# Membership on etcd (docs/membership.md): a real etcd-server started by the
# test (tests/support/etcd_fixture.c), daemons that join, stop, are killed
# and outlive an etcd restart; every daemon's ring and epoch must agree.
strata_add_test(test_membership SOURCES integration/test_membership.c
                LIBS strata_test_ring strata_test_grpc strata_test_cluster strata_rpc strata_proto
                     strata_wire PkgConfig::CMOCKA PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> LABELS integration cached membership TIMEOUT 300
                ENV STRATA_ETCD_SH=${PROJECT_SOURCE_DIR}/scripts/etcd.sh)
add_dependencies(test_membership stratad)

# /metrics and /stats of a real stratad with three namespaces of two tenants:
# the process-wide DRAM limit shown once, each tenant's quota and use.
strata_add_test(test_stratad_tenants SOURCES integration/test_stratad_tenants.c support/tenants.c
                LIBS strata_test_grpc strata_test_cluster strata_rpc strata_proto strata_wire PkgConfig::CMOCKA
                     PkgConfig::XXHASH PkgConfig::OPENSSL
                ARGS $<TARGET_FILE:stratad> LABELS integration cached metrics TIMEOUT 120)
add_dependencies(test_stratad_tenants stratad)

# Tenants: the tenants file, authentication before parsing, cross-tenant
# calls, owned ids, quotas of namespaces, SIGHUP reload, peer credential,
# refusal to start insecurely (real daemons, raw gRPC frames).
strata_add_test(test_tenancy SOURCES integration/test_tenancy.c support/tenants.c
                LIBS strata_test_cluster strata_rpc strata_proto strata_wire PkgConfig::CMOCKA
                     PkgConfig::OPENSSL PkgConfig::XXHASH Threads::Threads
                ARGS $<TARGET_FILE:stratad> LABELS integration cached TIMEOUT 300)
add_dependencies(test_tenancy stratad)
# Several tenants over a data plane that checks no remote key (UCX): refused at
# start and at reload unless allow_shared_dataplane; the gauge and /stats say it.
strata_add_test(test_dataplane_isolation SOURCES integration/test_dataplane_isolation.c
                LIBS strata_test_cluster strata_rpc strata_proto PkgConfig::CMOCKA
                     PkgConfig::OPENSSL
                ARGS $<TARGET_FILE:stratad> LABELS integration cached TIMEOUT 180)
add_dependencies(test_dataplane_isolation stratad)
# The same seen by a stock gRPC client (Debian's python3-grpcio, raw protobuf bytes).
add_test(NAME test_tenancy_grpc
         COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/python/test_tenancy_grpc.py
                 --stratad $<TARGET_FILE:stratad>)
set_tests_properties(test_tenancy_grpc PROPERTIES LABELS "integration;python;cached" TIMEOUT 120)

# stratad with its SSD tier: spill and promote, kill -9 under durable writes,
# corruption on disk, a full map (real LMDB files in temporary directories).
strata_add_test(test_tiers SOURCES integration/test_tiers.c
                LIBS strata_test_grpc strata_test_client strata_test_cluster strata_client strata_rpc strata_proto strata_wire PkgConfig::CMOCKA
                     PkgConfig::XXHASH Threads::Threads
                ARGS $<TARGET_FILE:stratad> LABELS integration cached ssd TIMEOUT 300)
add_dependencies(test_tiers stratad)

# Durable means W of R replicas: libstrata against two daemons with their own SSD
# tiers; a partial write with one replica down, kill -9 of either loses nothing
# acknowledged.
strata_add_test(test_durable SOURCES integration/test_durable.c
                LIBS strata_test_client strata_test_cluster strata_client PkgConfig::CMOCKA
                ARGS $<TARGET_FILE:stratad> LABELS integration client cached ssd TIMEOUT 300)
add_dependencies(test_durable stratad)

# Durable objects when members change (static mode, SIGHUP; and on a real
# etcd-server): a join, a drain, a kill -9 (and etcd restarted); after each, one
# ring everywhere and every KDA checkpoint and session on exactly its R replicas.
strata_add_test(test_rebalance SOURCES integration/test_rebalance.c support/tenants.c
                LIBS strata_test_grpc strata_test_client strata_test_cluster strata_client
                     strata_rpc strata_proto strata_wire PkgConfig::CMOCKA PkgConfig::XXHASH
                     PkgConfig::OPENSSL
                ARGS $<TARGET_FILE:stratad> LABELS integration client cached ssd membership
                TIMEOUT 600 ENV STRATA_ETCD_SH=${PROJECT_SOURCE_DIR}/scripts/etcd.sh)
add_dependencies(test_rebalance stratad)
if(STRATA_FAULT_INJECT) # test_read_during_pass plants rebalance-stall (cached/fault.h)
  target_compile_definitions(test_rebalance PRIVATE STRATA_FAULT_INJECT=1)
endif()
# The rebalancer's pipelined pushes when the target is killed with -9 mid-stream and
# restarted: nothing lost, the failed copies retried.
strata_add_test(test_rebalance_pipeline SOURCES integration/test_rebalance_pipeline.c
                LIBS strata_test_grpc strata_test_client strata_test_cluster strata_client strata_rpc strata_proto
                     strata_wire PkgConfig::CMOCKA
                ARGS $<TARGET_FILE:stratad> LABELS integration client cached ssd membership
                TIMEOUT 300)
add_dependencies(test_rebalance_pipeline stratad)
# The Replicate handler, fuzzed with the cluster credential against a reference of its checks.
strata_add_test(test_fuzz_replicate SOURCES fuzz/fuzz_replicate.c
                LIBS strata_fuzz_util strata_test_cluster strata_rpc strata_proto strata_wire
                     strata_common PkgConfig::XXHASH PkgConfig::OPENSSL
                ARGS $<TARGET_FILE:stratad> LABELS fuzz integration cached TIMEOUT 300)
add_dependencies(test_fuzz_replicate stratad)

# Three daemons scraped by a real Prometheus under `strata bench`; the
# dashboard in headless Chromium (tests/integration/test_cluster_metrics.py).
if(TARGET strata_cli)
  add_test(NAME test_cluster_metrics
           COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_cluster_metrics.py
                   --stratad $<TARGET_FILE:stratad> --strata $<TARGET_FILE:strata_cli>
                   --artifacts ${PROJECT_BINARY_DIR}/test-artifacts)
  set_tests_properties(test_cluster_metrics PROPERTIES LABELS "integration;metrics"
                       TIMEOUT 300 SKIP_RETURN_CODE 77)
endif()

# Readiness under a service manager: READY=1 only once gRPC and metrics listen,
# WATCHDOG=1, RELOADING=1 on SIGHUP, STOPPING=1 on SIGTERM, seen by a socket the
# test listens on as systemd would (tests/integration/test_sd_notify.py).
add_test(NAME test_sd_notify
         COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_sd_notify.py
                 --stratad $<TARGET_FILE:stratad>)
set_tests_properties(test_sd_notify PROPERTIES LABELS "integration;python;cached;deploy"
                     TIMEOUT 120)

# deploy/: the systemd unit (systemd-analyze verify and security, sysusers) and
# the Kubernetes files (yamllint, kubectl kustomize, kubectl's offline parse,
# their agreement with each other and with the daemon), each sample config
# started in a real stratad (tests/integration/test_deploy.py; docs/operations.md).
foreach(part systemd kubernetes)
  add_test(NAME test_deploy_${part}
           COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_deploy.py
                   --part ${part} --root ${PROJECT_SOURCE_DIR} --stratad $<TARGET_FILE:stratad>)
  set_tests_properties(test_deploy_${part} PROPERTIES LABELS "integration;deploy;docs"
                       TIMEOUT 180 SKIP_RETURN_CODE 77)
endforeach()
# docs/operations.md's backup: mdb_copy of a running node's SSD tier, restored
# into another, brings its durable objects back (Debian's lmdb-utils).
if(TARGET strata_cli)
  add_test(NAME test_deploy_backup
           COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_deploy.py
                   --part backup --root ${PROJECT_SOURCE_DIR} --stratad $<TARGET_FILE:stratad>
                   --strata $<TARGET_FILE:strata_cli>)
  set_tests_properties(test_deploy_backup PROPERTIES LABELS "integration;deploy;ssd"
                       TIMEOUT 180 SKIP_RETURN_CODE 77)
endif()

# docs/configuration.md and --help are generated from stratad's config table.
add_test(NAME test_config_doc
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_config_doc.sh
                 $<TARGET_FILE:stratad> ${PROJECT_SOURCE_DIR}/docs/configuration.md)
set_tests_properties(test_config_doc PROPERTIES LABELS "unit;docs" TIMEOUT 60)

# Fuzz tests (tests/fuzz/, docs/protocol.md "Fuzzing"): every method of two real
# daemons fed mutated requests; mutated config files and flag lists. Each
# prints its seed; STRATA_TEST_SEED replays it, STRATA_FUZZ_ITERS runs longer.
add_library(strata_fuzz_util STATIC fuzz/fuzz_util.c)
target_link_libraries(strata_fuzz_util PUBLIC strata_proto)
strata_add_test(test_fuzz_handlers
                SOURCES fuzz/fuzz_handlers.c fuzz/fuzz_requests.c fuzz/fuzz_oracle.c fuzz/fuzz_score.c
                LIBS strata_fuzz_util strata_test_cluster strata_rpc strata_proto strata_wire
                     PkgConfig::XXHASH PkgConfig::OPENSSL
                ARGS $<TARGET_FILE:stratad> LABELS fuzz integration cached TIMEOUT 300)
add_dependencies(test_fuzz_handlers stratad)
strata_add_test(test_fuzz_config SOURCES fuzz/fuzz_config.c fuzz/fuzz_config_files.c
                LIBS strata_fuzz_util strata_daemon strata_client LABELS fuzz unit TIMEOUT 300)

# stratad's gRPC over TLS: a stock python3-grpcio client and the CLI, mutual
# TLS, TLS peer channels, SIGHUP with a replaced certificate
# (tests/integration/test_tls.py; certificates from tools/make_test_certs.sh).
if(TARGET strata_cli)
  add_test(NAME test_tls
           COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_tls.py
                   --stratad $<TARGET_FILE:stratad> --strata $<TARGET_FILE:strata_cli>
                   --certs-script ${CMAKE_CURRENT_SOURCE_DIR}/tools/make_test_certs.sh
                   --lib $<TARGET_FILE:strata> --binding ${PROJECT_SOURCE_DIR}/client/python
                   $<$<TARGET_EXISTS:strata_engine_cli>:--engine=$<TARGET_FILE:strata_engine_cli>>)
  set_tests_properties(test_tls PROPERTIES LABELS "integration;cached;tls"
                       TIMEOUT 180 SKIP_RETURN_CODE 77)
  if(STRATA_SANITIZE)
    # The binding loads the sanitized libstrata into this python: ASan's
    # runtime first; the test takes the preload off the programs it starts.
    set_tests_properties(test_tls PROPERTIES ENVIRONMENT
                         "LD_PRELOAD=${STRATA_LIBASAN};ASAN_OPTIONS=detect_leaks=0;STRATA_TEST_PRELOAD=1")
  endif()
endif()
# Frames of calls over the transport (docs/protocol.md "Fuzzing"): a real
# stratad over UCX fed frames with missing, wrong and right keys, mutated
# headers and bodies, between valid calls. tests/support/tcall_raw.c sends
# raw frames with a chosen key, method and body (also for the attack suite);
# tests/support/tenants.c gives daemons several tenants with a token each.
add_library(strata_test_tcall STATIC support/tcall_raw.c support/tenants.c)
target_include_directories(strata_test_tcall PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/support)
target_link_libraries(strata_test_tcall PUBLIC strata_transport strata_rpc strata_proto strata_wire
                      PkgConfig::OPENSSL)
strata_add_test(test_fuzz_tcall SOURCES fuzz/fuzz_tcall.c fuzz/fuzz_tcall_daemon.c
                LIBS strata_test_tcall strata_fuzz_util strata_test_cluster strata_client
                     PkgConfig::XXHASH PkgConfig::UCX
                ARGS $<TARGET_FILE:stratad> LABELS fuzz integration cached TIMEOUT 300)
add_dependencies(test_fuzz_tcall stratad)
# The same over UCX's TCP on one host (no shared memory): the vanishing
# client's endpoints must ask for peer failure detection (docs/transport.md).
add_test(NAME test_fuzz_tcall_tcp COMMAND test_fuzz_tcall $<TARGET_FILE:stratad>)
set_tests_properties(test_fuzz_tcall_tcp PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "fuzz;integration;cached" ENVIRONMENT "UCX_TLS=tcp,self")
# The codec of those frames alone (proto/tcall.c) against a reference parser.
strata_add_test(test_fuzz_tcall_codec SOURCES fuzz/fuzz_tcall_codec.c
                LIBS strata_fuzz_util strata_wire LABELS fuzz unit TIMEOUT 120)
# The member record that daemons and clients read from etcd (proto/member.c)
# against a reference reader of docs/membership.md's format.
strata_add_test(test_fuzz_member SOURCES fuzz/fuzz_member.c
                LIBS strata_fuzz_util strata_wire LABELS fuzz unit membership TIMEOUT 300)
# The ring epoch's fold over etcd's keys (rpc/etcd_members.c) against a
# reference reader, and over random histories: a read anywhere plus the
# events after it gives the final read's epoch (docs/membership.md).
strata_add_test(test_fuzz_epoch SOURCES fuzz/fuzz_epoch.c
                LIBS strata_fuzz_util strata_rpc LABELS fuzz unit membership TIMEOUT 300)
# The transport's address and remote-key blobs (transport/transport.c), as
# they come from the control plane, against a reference reader.
# The image readers of the tools (common/image.c): PGM/PPM against a
# reference, PNG through libpng.
strata_add_test(test_fuzz_image SOURCES fuzz/fuzz_image.c
                LIBS strata_fuzz_util strata_image strata_wire LABELS fuzz unit TIMEOUT 300)
strata_add_test(test_fuzz_envelope SOURCES fuzz/fuzz_envelope.c
                LIBS strata_fuzz_util strata_transport strata_common PkgConfig::XXHASH
                LABELS fuzz unit transport TIMEOUT 120)

# The attack suite of issue 16 (tests/attack/attack.c): two tenants against a
# real stratad; each case one attack through raw gRPC calls, raw transport
# frames or one-sided operations; the cases not fixed yet are listed as
# expected failures, and one that starts passing fails the run until it is
# taken off the list.
strata_add_test(test_attack SOURCES attack/attack.c attack/attack_rma.c attack/attack_quota.c
                LIBS strata_test_grpc strata_test_tcall strata_test_cluster strata_client PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> LABELS attack integration cached TIMEOUT 300)
add_dependencies(test_attack stratad)
# The same over libfabric tcp;ofi_rxm, which enforces keys: two tenants start
# without allow_shared_dataplane, and one tenant's key reads nothing of the
# other's (cross_tenant_get); the calls over the transport are UCX's (skipped).
add_test(NAME test_attack_libfabric COMMAND test_attack $<TARGET_FILE:stratad>
                                            libfabric:tcp+ofi_rxm)
set_tests_properties(test_attack_libfabric PROPERTIES TIMEOUT 300
                     LABELS "attack;integration;cached")
