# engine: the reference model on its own, and the engine against real daemons
# (included from tests/CMakeLists.txt).
strata_add_test(test_engine_model SOURCES unit/test_engine_model.c
                LIBS strata_engine PkgConfig::CMOCKA LABELS unit engine TIMEOUT 120)
target_include_directories(test_engine_model PRIVATE ${PROJECT_SOURCE_DIR}/engine)

strata_add_test(test_engine SOURCES integration/test_engine.c
                LIBS strata_engine strata_test_cluster PkgConfig::CMOCKA
                ARGS $<TARGET_FILE:stratad> LABELS integration engine TIMEOUT 300)
add_dependencies(test_engine stratad)
