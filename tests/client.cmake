# libstrata against real daemons (included from tests/CMakeLists.txt).
strata_add_test(test_client SOURCES integration/test_client.c
                LIBS strata_test_cluster strata_client PkgConfig::CMOCKA PkgConfig::XXHASH
                ARGS $<TARGET_FILE:stratad> LABELS integration client TIMEOUT 600)
add_dependencies(test_client stratad)
