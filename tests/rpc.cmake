# rpc: the control-plane framework over real gRPC on loopback.
strata_add_test(test_rpc SOURCES unit/test_rpc.c
                LIBS strata_rpc PkgConfig::CMOCKA LABELS unit rpc TIMEOUT 120)
# rpc over TLS: certificates made by tools/make_test_certs.sh (openssl CLI).
strata_add_test(test_rpc_tls SOURCES unit/test_rpc_tls.c
                LIBS strata_rpc PkgConfig::CMOCKA LABELS unit rpc TIMEOUT 120
                ARGS ${CMAKE_CURRENT_SOURCE_DIR}/tools/make_test_certs.sh)
# rpc fair queueing and admission control (rpc/server_sched.c), real gRPC on loopback.
strata_add_test(test_rpc_sched SOURCES unit/test_rpc_sched.c
                LIBS strata_rpc PkgConfig::CMOCKA LABELS unit rpc TIMEOUT 120)
# The retry hint's parser (strata-retry-after-ms) against a reference reading.
strata_add_test(test_fuzz_retry_hint SOURCES fuzz/fuzz_retry_hint.c
                LIBS strata_fuzz_util strata_rpc LABELS fuzz unit rpc TIMEOUT 120)
