# Warning and sanitizer flags shared by every C target of the project.
add_compile_options(-Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
                    -Wno-unused-parameter)
if(STRATA_WERROR)
  add_compile_options(-Werror)
endif()
add_compile_definitions(_GNU_SOURCE)

if(STRATA_SANITIZE)
  set(STRATA_SAN_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=undefined
                       -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:C>:${STRATA_SAN_FLAGS}>")
  add_link_options(${STRATA_SAN_FLAGS})
endif()

# strata_generated_flags(<target>): relaxes warnings for generated sources.
function(strata_generated_flags target)
  target_compile_options(${target} PRIVATE -Wno-missing-prototypes -Wno-shadow
                         -Wno-strict-prototypes -Wno-error)
endfunction()
