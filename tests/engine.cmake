# engine: the reference model on its own, and the engine against real daemons
# (included from tests/CMakeLists.txt).
strata_add_test(test_engine_model SOURCES unit/test_engine_model.c
                LIBS strata_engine PkgConfig::CMOCKA LABELS unit engine TIMEOUT 120)
target_include_directories(test_engine_model PRIVATE ${PROJECT_SOURCE_DIR}/engine)

# One executable against three daemons, registered as three tests (resume
# cases, cache edge cases, node failures; a cmocka filter in argv[2]) so that
# each stays short under the sanitizers.
strata_add_test(test_engine SOURCES integration/test_engine.c
                LIBS strata_engine strata_test_cluster PkgConfig::CMOCKA
                ARGS $<TARGET_FILE:stratad> "test_resume_*" LABELS integration engine TIMEOUT 300)
add_dependencies(test_engine stratad)
foreach(group "cache|test_cache_*" "faults|test_node_*" "pool|test_pool_*")
  string(REPLACE "|" ";" group "${group}")
  list(GET group 0 group_name)
  list(GET group 1 group_filter)
  add_test(NAME test_engine_${group_name}
           COMMAND test_engine $<TARGET_FILE:stratad> "${group_filter}")
  set_tests_properties(test_engine_${group_name} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "integration;engine")
endforeach()

# The pool group again with the rows read one-sided over UCX (libstrata's
# lease cache, read on the calling thread; docs/engine.md, "Overlap").
add_test(NAME test_engine_pool_ucx
         COMMAND test_engine $<TARGET_FILE:stratad> "test_pool_*" ucx)
set_tests_properties(test_engine_pool_ucx PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                     LABELS "integration;engine")

# Engine sessions: a multi-turn conversation, reopening, refusals, against
# three daemons.
strata_add_test(test_engine_session SOURCES integration/test_engine_session.c
                LIBS strata_engine strata_test_cluster PkgConfig::CMOCKA
                ARGS $<TARGET_FILE:stratad> "test_session_turns"
                LABELS integration engine TIMEOUT 300)
add_dependencies(test_engine_session stratad)
foreach(case reopen refused durable)
  add_test(NAME test_engine_session_${case}
           COMMAND test_engine_session $<TARGET_FILE:stratad> "test_session_${case}")
  set_tests_properties(test_engine_session_${case} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "integration;engine")
endforeach()

# strata-engine against three daemons: --help, exit codes, per-turn lines,
# its /metrics through promtool (tests/integration/test_engine_runner.py).
add_test(NAME test_engine_runner
         COMMAND ${STRATA_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/integration/test_engine_runner.py
                 --stratad $<TARGET_FILE:stratad> --engine $<TARGET_FILE:strata_engine_cli>)
set_tests_properties(test_engine_runner PROPERTIES LABELS "integration;engine" TIMEOUT 300
                     SKIP_RETURN_CODE 77)

# docs/configuration.md and --help are generated from strata-engine's table.
add_test(NAME test_config_doc_engine
         COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/check_config_doc.sh
                 $<TARGET_FILE:strata_engine_cli> ${PROJECT_SOURCE_DIR}/docs/configuration.md
                 strata-engine STRATA_ENGINE_MARKDOWN)
set_tests_properties(test_config_doc_engine PROPERTIES LABELS "unit;docs" TIMEOUT 60)

# The engine's CUDA path against its CPU path and itself, three stratad (where CUDA is
# built; exits 77, skip, without a usable device after the refusals that need none).
if(TARGET strata_engine_cuda)
  strata_add_test(test_engine_gpu SOURCES integration/test_engine_gpu.c
                  LIBS strata_engine strata_test_cluster ARGS $<TARGET_FILE:stratad>
                  LABELS gpu integration engine TIMEOUT 600)
  add_dependencies(test_engine_gpu stratad)
endif()

# The README's main job on a short workload: tenants, TLS, isolation (scripts/run-demo.sh).
add_test(NAME test_demo COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tools/test_demo.sh
                                ${PROJECT_BINARY_DIR})
set_tests_properties(test_demo PROPERTIES LABELS "integration;engine;demo" TIMEOUT 300)
