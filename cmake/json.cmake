# json.cmake — finds cJSON (Debian: libcjson-dev), the JSON parser behind the safetensors
# reader (headers, model.safetensors.index.json) and config.json. Tries pkg-config's
# libcjson first, then a plain search for cJSON.h and libcjson. Adds the include directory
# to attn_objects (sources include <cJSON.h>) and appends the library to
# ATTN_EXTRA_LIBRARIES so libattn (shared and static) links it. (json.c serialises cJSON
# parses with a pthread mutex; pthreads come with libc and the OpenMP runtime.)
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(ATTN_PC_CJSON QUIET libcjson)
endif()
find_path(ATTN_CJSON_INCLUDE_DIR cJSON.h
  HINTS ${ATTN_PC_CJSON_INCLUDE_DIRS} PATH_SUFFIXES cjson)
find_library(ATTN_CJSON_LIBRARY NAMES cjson HINTS ${ATTN_PC_CJSON_LIBRARY_DIRS})
if(NOT ATTN_CJSON_INCLUDE_DIR OR NOT ATTN_CJSON_LIBRARY)
  message(FATAL_ERROR "attn: cJSON not found (install libcjson-dev); "
                      "cJSON.h: ${ATTN_CJSON_INCLUDE_DIR}, libcjson: ${ATTN_CJSON_LIBRARY}")
endif()
message(STATUS "attn: cJSON ${ATTN_CJSON_LIBRARY} (cJSON.h in ${ATTN_CJSON_INCLUDE_DIR})")
target_include_directories(attn_objects PRIVATE ${ATTN_CJSON_INCLUDE_DIR})
target_link_libraries(attn_objects PUBLIC ${ATTN_CJSON_LIBRARY})
list(APPEND ATTN_EXTRA_LIBRARIES ${ATTN_CJSON_LIBRARY})
# For attn.pc (install.cmake): libcjson's own .pc when there is one, else the library itself.
if(ATTN_PC_CJSON_FOUND)
  list(APPEND ATTN_PC_REQUIRES_PRIVATE libcjson)
  list(APPEND ATTN_PC_COVERED_LIBRARIES ${ATTN_CJSON_LIBRARY})
endif()
