# rpc: the control-plane framework over real gRPC on loopback.
strata_add_test(test_rpc SOURCES unit/test_rpc.c
                LIBS strata_rpc PkgConfig::CMOCKA LABELS unit rpc TIMEOUT 120)
