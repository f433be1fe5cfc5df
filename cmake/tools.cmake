# tools.cmake — the two programs (ATTN_CLI, ATTN_BENCH): `attn`, the user's commands (cli/:
# forward, backward, inspect, kv-size, ring, demo, heatmap, train), and `attn-bench`, the
# benchmarks (bench/: forward grid and peak, decode, serve, small, the tile and instruction
# micro-benchmarks). They share the option parser, its tensor and error helpers and the figure
# helpers (attn_tool_common),
# draw pictures with cairo and pango (pictures.cmake) and use every library component, linked
# statically. Both tools are built against the public headers; attn-bench also reads a few
# internal ones (kernel registry, decode path names) to name what it measured.
if(NOT TARGET attn_models OR NOT TARGET attn_io)
  message(FATAL_ERROR "attn: the attn tool needs libattn_io (cJSON) and libattn_models "
                      "(CBLAS); install libcjson-dev and libopenblas-dev, or configure with "
                      "-DATTN_CLI=OFF for the libraries and their tests alone")
endif()
find_package(PkgConfig)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(ATTN_PICTURES IMPORTED_TARGET cairo pangocairo)
endif()
if(NOT ATTN_PICTURES_FOUND)
  message(FATAL_ERROR "attn: the attn tool draws pictures with cairo and pango (install "
                      "pkg-config, libcairo2-dev and libpango1.0-dev), or configure with "
                      "-DATTN_CLI=OFF for the libraries and their tests alone")
endif()

set(attn_tool_common_sources ${PROJECT_SOURCE_DIR}/cli/arguments.c
    ${PROJECT_SOURCE_DIR}/cli/npy_tensor.c ${PROJECT_SOURCE_DIR}/cli/figure.c)
add_library(attn_tool_common STATIC ${attn_tool_common_sources})
target_include_directories(attn_tool_common PUBLIC ${PROJECT_SOURCE_DIR}/cli)
target_link_libraries(attn_tool_common PUBLIC attn_models_static attn_io_static attn_static
                      PkgConfig::ATTN_PICTURES OpenMP::OpenMP_C)

file(GLOB ATTN_CLI_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cli/*.c)
list(REMOVE_ITEM ATTN_CLI_SOURCES ${attn_tool_common_sources})
add_executable(attn_cli ${ATTN_CLI_SOURCES})
set_target_properties(attn_cli PROPERTIES OUTPUT_NAME attn)
target_link_libraries(attn_cli PRIVATE attn_tool_common)

if(ATTN_BENCH)
  file(GLOB ATTN_BENCH_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/bench/*.c)
  # instruction_rates.c times AVX-512 instructions by name: x86-64 only.
  if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    list(REMOVE_ITEM ATTN_BENCH_SOURCES ${PROJECT_SOURCE_DIR}/bench/instruction_rates.c)
  endif()
  add_executable(attn_bench ${ATTN_BENCH_SOURCES})
  set_target_properties(attn_bench PROPERTIES OUTPUT_NAME attn-bench)
  target_include_directories(attn_bench PRIVATE ${PROJECT_SOURCE_DIR}/bench
                                                ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(attn_bench PRIVATE attn_tool_common)
  if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    target_compile_definitions(attn_bench PRIVATE ATTN_BENCH_INSTRUCTION_RATES)
  endif()
endif()
