# rpc: the control-plane framework over real gRPC on loopback.
strata_add_test(test_rpc SOURCES unit/test_rpc.c
                LIBS strata_rpc PkgConfig::CMOCKA LABELS unit rpc TIMEOUT 120)
# rpc over TLS: certificates made by tools/make_test_certs.sh (openssl CLI).
strata_add_test(test_rpc_tls SOURCES unit/test_rpc_tls.c
                LIBS strata_rpc PkgConfig::CMOCKA LABELS unit rpc TIMEOUT 120
                ARGS ${CMAKE_CURRENT_SOURCE_DIR}/tools/make_test_certs.sh)
