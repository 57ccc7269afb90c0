# The cache daemon's storage core (cached/): unit tests per module, the
# randomized model test and the 1M-token chain.
foreach(t arena slab htab radix store session store_model)
  strata_add_test(test_${t} SOURCES unit/test_${t}.c
                  LIBS strata_cached PkgConfig::CMOCKA PkgConfig::XXHASH LABELS unit cached)
endforeach()
