# engine: the reference model on its own, and the engine against real daemons
# (included from tests/CMakeLists.txt).
strata_add_test(test_engine_model SOURCES unit/test_engine_model.c
                LIBS strata_engine PkgConfig::CMOCKA LABELS unit engine TIMEOUT 120)
target_include_directories(test_engine_model PRIVATE ${PROJECT_SOURCE_DIR}/engine)
# Chunked prefill against the token-by-token path (engine/prefill.c).
strata_add_test(test_engine_prefill SOURCES unit/test_engine_prefill.c
                LIBS strata_engine PkgConfig::CMOCKA LABELS unit engine TIMEOUT 120)
target_include_directories(test_engine_prefill PRIVATE ${PROJECT_SOURCE_DIR}/engine)
# Batched decode against each engine alone, on the CPU (engine/engine.c, engine/model.c).
strata_add_test(test_engine_batch SOURCES unit/test_engine_batch.c
                LIBS strata_engine PkgConfig::CMOCKA LABELS unit engine TIMEOUT 120)
target_include_directories(test_engine_batch PRIVATE ${PROJECT_SOURCE_DIR}/engine)
# The keys window and the merge of near-data scoring, without a cluster.
strata_add_test(test_engine_select SOURCES unit/test_engine_select.c
                LIBS strata_engine PkgConfig::CMOCKA LABELS unit engine TIMEOUT 120)
target_include_directories(test_engine_select PRIVATE ${PROJECT_SOURCE_DIR}/engine)

# strata_engine_case(<name> <executable> <args...>): one more ctest entry of
# an engine test executable against stratad, with its own arguments.
function(strata_engine_case name exe)
  add_test(NAME ${name} COMMAND ${exe} $<TARGET_FILE:stratad> ${ARGN})
  set_tests_properties(${name} PROPERTIES TIMEOUT 300 SKIP_RETURN_CODE 77
                       LABELS "integration;engine")
endfunction()

# One executable against three daemons, registered as three tests (resume
# cases, cache edge cases, node failures; a cmocka filter in argv[2]) so that
# each stays short under the sanitizers.
# The set-up both share: the client, the reference model, the cached
# engine's parameters (tests/support/engine_fixture.c).
add_library(strata_test_engine STATIC support/engine_fixture.c)
target_link_libraries(strata_test_engine PUBLIC strata_test_client strata_test_cluster strata_engine
                      PkgConfig::CMOCKA)

strata_add_test(test_engine SOURCES integration/test_engine.c
                LIBS strata_test_engine strata_engine strata_test_cluster PkgConfig::CMOCKA
                ARGS $<TARGET_FILE:stratad> "test_resume_*" LABELS integration engine TIMEOUT 300)
add_dependencies(test_engine stratad)
foreach(group "cache|test_cache_*" "faults|test_node_*" "pool|test_pool_*")
  string(REPLACE "|" ";" group "${group}")
  list(GET group 0 group_name)
  list(GET group 1 group_filter)
  strata_engine_case(test_engine_${group_name} test_engine "${group_filter}")
endforeach()

# The pool group again with the rows read one-sided over UCX (libstrata's
# lease cache, read on the calling thread; docs/engine.md, "Overlap").
strata_engine_case(test_engine_pool_ucx test_engine "test_pool_*" ucx)

# Engine sessions: a multi-turn conversation, reopening, refusals, against
# three daemons.
strata_add_test(test_engine_session SOURCES integration/test_engine_session.c
                LIBS strata_test_engine strata_engine strata_test_cluster PkgConfig::CMOCKA
                ARGS $<TARGET_FILE:stratad> "test_session_turns"
                LABELS integration engine TIMEOUT 300)
add_dependencies(test_engine_session stratad)
foreach(case reopen refused durable)
  strata_engine_case(test_engine_session_${case} test_engine_session "test_session_${case}")
endforeach()

# Images: the vision path, VIS objects and image items in the chain, against
# three daemons (docs/engine.md, "Images"; a cmocka filter in argv[2]).
strata_add_test(test_engine_vis SOURCES integration/test_engine_vis.c
                LIBS strata_test_engine strata_engine strata_test_cluster strata_image
                     PkgConfig::CMOCKA
                ARGS $<TARGET_FILE:stratad> "test_vis_*" LABELS integration engine TIMEOUT 300)
add_dependencies(test_engine_vis stratad)

# The engine's reader of VIS objects (engine/vision.c) against a reference.
strata_add_test(test_fuzz_vis SOURCES fuzz/fuzz_vis.c
                LIBS strata_fuzz_util strata_engine PkgConfig::XXHASH LABELS fuzz unit engine
                TIMEOUT 120)
target_include_directories(test_fuzz_vis PRIVATE ${PROJECT_SOURCE_DIR}/engine)

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

# Near-data scoring (remote_scoring): the same selections and logits as
# local scoring, over 1 to 4 daemons (argv[3]), with a node killed.
strata_add_test(test_engine_score SOURCES integration/test_engine_score.c
                LIBS strata_test_engine strata_engine strata_test_cluster PkgConfig::CMOCKA
                ARGS $<TARGET_FILE:stratad> "test_score_*" 1 LABELS integration engine TIMEOUT 300)
add_dependencies(test_engine_score stratad)
foreach(nodes 2 3 4)
  strata_engine_case(test_engine_score_${nodes} test_engine_score "test_score_*" ${nodes})
endforeach()
