# Tests of the client library (included from tests/CMakeLists.txt).
strata_add_test(test_ring SOURCES unit/test_ring.c
                LIBS strata_client PkgConfig::CMOCKA LABELS unit)
strata_add_test(test_compose SOURCES unit/test_compose.c
                LIBS strata_client PkgConfig::CMOCKA LABELS unit)
