# io.cmake — the component io (option ATTN_IO): libattn_io, the file formats that need a JSON
# parser: safetensors files and sharded checkpoints (src/io/safetensors*.c), attention layers
# recognised by tensor names (model_names.c) and Hugging Face config.json (model_config.c).
# The JSON parser is cJSON (Debian: libcjson-dev): pkg-config's libcjson first, then a plain
# search for cJSON.h and libcjson. Without it the component is skipped with a message. (.npy
# needs no parser and is part of libattn itself, src/npy.)
# For attn_io.pc (install.cmake): ATTN_PC_IO_REQUIRES_PRIVATE (libcjson's own .pc when there is
# one) or ATTN_PC_IO_LIBS_PRIVATE (the library itself).
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(ATTN_PC_CJSON QUIET libcjson)
endif()
find_path(ATTN_CJSON_INCLUDE_DIR cJSON.h
  HINTS ${ATTN_PC_CJSON_INCLUDE_DIRS} PATH_SUFFIXES cjson)
find_library(ATTN_CJSON_LIBRARY NAMES cjson HINTS ${ATTN_PC_CJSON_LIBRARY_DIRS})
if(NOT ATTN_CJSON_INCLUDE_DIR OR NOT ATTN_CJSON_LIBRARY)
  message(STATUS "attn: cJSON not found (install libcjson-dev): libattn_io (safetensors, "
                 "config.json) is not built (ATTN_IO off)")
  return()
endif()
message(STATUS "attn: cJSON ${ATTN_CJSON_LIBRARY} (cJSON.h in ${ATTN_CJSON_INCLUDE_DIR})")

file(GLOB ATTN_IO_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/io/*.c)
attn_add_component(io SOURCES ${ATTN_IO_SOURCES}
                   PRIVATE_INCLUDES ${ATTN_CJSON_INCLUDE_DIR}
                   PRIVATE_LIBRARIES ${ATTN_CJSON_LIBRARY})

set(ATTN_PC_IO_REQUIRES_PRIVATE "")
set(ATTN_PC_IO_LIBS_PRIVATE "")
if(ATTN_PC_CJSON_FOUND)
  set(ATTN_PC_IO_REQUIRES_PRIVATE libcjson)
else()
  get_filename_component(attn_cjson_dir "${ATTN_CJSON_LIBRARY}" DIRECTORY)
  if(NOT attn_cjson_dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
    set(ATTN_PC_IO_LIBS_PRIVATE "-L${attn_cjson_dir} ")
  endif()
  string(APPEND ATTN_PC_IO_LIBS_PRIVATE "-lcjson")
endif()
