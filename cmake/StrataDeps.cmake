# Finds every dependency through pkg-config. A missing one stops the build
# with the name of the Debian package that provides it.
find_package(PkgConfig)
if(NOT PKG_CONFIG_FOUND)
  message(FATAL_ERROR "pkg-config not found: install the Debian package 'pkg-config' "
                      "(or run scripts/install-deps.sh)")
endif()

# strata_require(<prefix> <pkg-config module> <Debian package>)
# Defines the imported target PkgConfig::<prefix>.
function(strata_require prefix module debpkg)
  pkg_check_modules(${prefix} QUIET IMPORTED_TARGET GLOBAL ${module})
  if(NOT ${prefix}_FOUND)
    message(FATAL_ERROR "dependency '${module}' not found by pkg-config: install the "
                        "Debian package '${debpkg}' (or run scripts/install-deps.sh)")
  endif()
  message(STATUS "found ${module} ${${prefix}_VERSION}")
endfunction()

strata_require(UCX       ucx           libucx-dev)
strata_require(FABRIC    libfabric     libfabric-dev)
strata_require(XXHASH    libxxhash     libxxhash-dev)
strata_require(LMDB      lmdb          liblmdb-dev)
strata_require(PROTOBUFC libprotobuf-c libprotobuf-c-dev)
strata_require(GRPC      grpc          libgrpc-dev)
strata_require(MHD       libmicrohttpd libmicrohttpd-dev)
strata_require(INIH      inih          libinih-dev)
strata_require(CMOCKA    cmocka        libcmocka-dev)
strata_require(OPENSSL   openssl       libssl-dev)
strata_require(PNG       libpng        libpng-dev)

find_program(PROTOC_C protoc-c)
if(NOT PROTOC_C)
  message(FATAL_ERROR "protoc-c not found: install the Debian package "
                      "'protobuf-c-compiler' (or run scripts/install-deps.sh)")
endif()

find_package(Threads REQUIRED)
