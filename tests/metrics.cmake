# Tests of the metrics module (included from tests/CMakeLists.txt).
strata_add_test(test_metrics SOURCES unit/test_metrics.c
                LIBS strata_metrics PkgConfig::CMOCKA LABELS unit metrics)
strata_add_test(test_metrics_http SOURCES unit/test_metrics_http.c
                LIBS strata_metrics PkgConfig::CMOCKA LABELS unit metrics TIMEOUT 60)
