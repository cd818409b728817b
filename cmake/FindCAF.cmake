# FindCAF.cmake: locate the C++ Actor Framework (Debian's libcaf-dev 0.17).
#
# Debian ships CAF without a CMake package config or a pkg-config file, so we
# look for the headers and libraries ourselves and create imported targets:
#   CAF::core  (libcaf_core)
#   CAF::io    (libcaf_io, links CAF::core)
#   CAF::openssl (libcaf_openssl, links CAF::io and OpenSSL)
# Variables: CAF_FOUND, CAF_INCLUDE_DIR, CAF_VERSION (e.g. 0.17.6).

find_path(CAF_INCLUDE_DIR NAMES caf/all.hpp caf/config.hpp)
find_library(CAF_CORE_LIBRARY NAMES caf_core)
find_library(CAF_IO_LIBRARY NAMES caf_io)
find_library(CAF_OPENSSL_LIBRARY NAMES caf_openssl)

if(CAF_INCLUDE_DIR AND EXISTS "${CAF_INCLUDE_DIR}/caf/config.hpp")
  file(STRINGS "${CAF_INCLUDE_DIR}/caf/config.hpp" _caf_version_line
       REGEX "^#define CAF_VERSION [0-9]+")
  string(REGEX REPLACE "^#define CAF_VERSION ([0-9]+).*" "\\1" _caf_v
         "${_caf_version_line}")
  math(EXPR _caf_major "${_caf_v} / 10000")
  math(EXPR _caf_minor "(${_caf_v} / 100) % 100")
  math(EXPR _caf_patch "${_caf_v} % 100")
  set(CAF_VERSION "${_caf_major}.${_caf_minor}.${_caf_patch}")
endif()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(CAF
  REQUIRED_VARS CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY
                CAF_OPENSSL_LIBRARY
  VERSION_VAR CAF_VERSION)

if(CAF_FOUND)
  if(NOT TARGET CAF::core)
    add_library(CAF::core UNKNOWN IMPORTED)
    set_target_properties(CAF::core PROPERTIES
      IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}")
  endif()
  if(NOT TARGET CAF::io)
    add_library(CAF::io UNKNOWN IMPORTED)
    set_target_properties(CAF::io PROPERTIES
      IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES CAF::core)
  endif()
  if(NOT TARGET CAF::openssl)
    add_library(CAF::openssl UNKNOWN IMPORTED)
    set_target_properties(CAF::openssl PROPERTIES
      IMPORTED_LOCATION "${CAF_OPENSSL_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES CAF::io)
  endif()
endif()
mark_as_advanced(CAF_INCLUDE_DIR CAF_CORE_LIBRARY CAF_IO_LIBRARY
                 CAF_OPENSSL_LIBRARY)
