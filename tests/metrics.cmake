# Tests of the metrics module (included from tests/CMakeLists.txt).
strata_add_test(test_metrics SOURCES unit/test_metrics.c
                LIBS strata_metrics PkgConfig::CMOCKA LABELS unit metrics)
strata_add_test(test_metrics_http SOURCES unit/test_metrics_http.c
                LIBS strata_metrics PkgConfig::CMOCKA LABELS unit metrics TIMEOUT 60)

# Integration: a stand-in daemon (metrics_testd) scraped by promtool, a real
# Prometheus server and headless Chromium. Each skips (77) when the tool is
# missing: apt-get install prometheus chromium.
add_executable(metrics_testd integration/metrics_testd.c)
target_link_libraries(metrics_testd PRIVATE strata_metrics strata_wire)

set(STRATA_OBS_DIR ${CMAKE_CURRENT_SOURCE_DIR}/integration)
set(STRATA_ARTIFACTS ${PROJECT_BINARY_DIR}/test-artifacts)

# promtool check metrics on what the HTTP server serves; /stats schema 1.
add_test(NAME test_metrics_promtool
         COMMAND ${STRATA_PYTHON} ${STRATA_OBS_DIR}/test_metrics_promtool.py
                 --testd $<TARGET_FILE:metrics_testd>)
set_tests_properties(test_metrics_promtool PROPERTIES LABELS "integration;metrics"
                     TIMEOUT 120 SKIP_RETURN_CODE 77)

# deploy/prometheus passes promtool check config; deploy/ and the stand-in use
# only the metric names of docs/observability.md.
add_test(NAME test_metrics_deploy
         COMMAND ${STRATA_PYTHON} ${STRATA_OBS_DIR}/test_metrics_deploy.py
                 --root ${PROJECT_SOURCE_DIR} --testd $<TARGET_FILE:metrics_testd>)
set_tests_properties(test_metrics_deploy PROPERTIES LABELS "integration;metrics"
                     TIMEOUT 120 SKIP_RETURN_CODE 77)

# A real Prometheus scrapes metrics_testd; its rate() ratios must equal the
# hit rates metrics_testd computed from its own tallies.
set(hit "sum(rate(strata_lookups_with_hit_total[5m])) / sum(rate(strata_lookups_total[5m]))")
set(tok "sum(rate(strata_lookup_matched_tokens_total[5m])) / sum(rate(strata_lookup_tokens_total[5m]))")
set(res "sum(rate(strata_lookup_resumable_tokens_total[5m])) / sum(rate(strata_lookup_tokens_total[5m]))")
add_test(NAME test_metrics_prometheus
         COMMAND ${STRATA_PYTHON} ${STRATA_OBS_DIR}/test_metrics_prometheus.py
                 --start "$<TARGET_FILE:metrics_testd> --mode random --batches 20000 --exit-after 200"
                 --wait-stats "all(s['test']['done'] for s in stats)"
                 --settle "strata_test_done == 1"
                 --check "${tok}" "stats[0]['test']['token_hit_rate']"
                 --check "${hit}" "stats[0]['test']['request_hit_rate']"
                 --check "${res}" "stats[0]['test']['resumable_hit_rate']"
                 --check "sum by (namespace) (rate(strata_lookup_matched_tokens_total[5m])) / sum by (namespace) (rate(strata_lookup_tokens_total[5m]))"
                         "stats[0]['test']['token_hit_rate_by_namespace']"
                 --check "sum(strata_lookups_total)" "stats[0]['counters']['lookups_total']"
                 --check "sum(strata_lookup_matched_tokens_total) / sum(strata_lookup_tokens_total)"
                         "stats[0]['counters']['lookup_matched_tokens_total'] / stats[0]['counters']['lookup_tokens_total']"
                 --grafana ${PROJECT_SOURCE_DIR}/deploy/grafana/strata-dashboard.json
                 --artifacts ${STRATA_ARTIFACTS}/prometheus)
set_tests_properties(test_metrics_prometheus PROPERTIES LABELS "integration;metrics"
                     TIMEOUT 240 SKIP_RETURN_CODE 77)

# Headless Chromium renders /dashboard of one stand-in node and its peer;
# the screenshot is kept as test-artifacts/dashboard.png.
add_test(NAME test_dashboard_chromium
         COMMAND ${STRATA_PYTHON} ${STRATA_OBS_DIR}/test_dashboard_chromium.py
                 --testd $<TARGET_FILE:metrics_testd> --artifacts ${STRATA_ARTIFACTS})
set_tests_properties(test_dashboard_chromium PROPERTIES LABELS "integration;metrics"
                     TIMEOUT 240 SKIP_RETURN_CODE 77)

# stratad's metrics server: no wildcard CORS, no non-loopback address in the
# clear, HTTPS with a bearer token scraped by promtool and a real Prometheus
# (certificates from tools/make_test_certs.sh).
if(TARGET stratad)
  add_test(NAME test_metrics_tls
           COMMAND ${STRATA_PYTHON} ${STRATA_OBS_DIR}/test_metrics_tls.py
                   --stratad $<TARGET_FILE:stratad>
                   --certs-script ${CMAKE_CURRENT_SOURCE_DIR}/tools/make_test_certs.sh
                   $<$<TARGET_EXISTS:strata_cli>:--strata=$<TARGET_FILE:strata_cli>>
                   $<$<TARGET_EXISTS:strata_engine_cli>:--engine=$<TARGET_FILE:strata_engine_cli>>)
  set_tests_properties(test_metrics_tls PROPERTIES LABELS "integration;metrics;tls"
                       TIMEOUT 180 SKIP_RETURN_CODE 77)
endif()
