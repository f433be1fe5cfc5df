# fuzz.cmake — the fuzz targets in fuzz/ (see fuzz/README.md and docs/robustness.md).
#
# Each target is one fuzz/fuzz_<name>.c defining LLVMFuzzerTestOneInput. It is built twice:
#  - always (with the tests): fuzz_replay_<name>, the target plus fuzz/replay_main.c, a plain
#    driver that feeds it every file of fuzz/corpus/<name>/ and fuzz/regressions/<name>/. That is
#    the ctest test fuzz_replay_<name>: every crash ever found stays fixed, with any compiler,
#    and under ASan/UBSan in build-asan.
#  - with -DATTN_FUZZ=ON (clang and -DATTN_SANITIZE=address): fuzz_<name>, the libFuzzer binary
#    (-fsanitize=fuzzer,address,undefined); the rest of the project is then also compiled with
#    -fsanitize=fuzzer-no-link so the fuzzer sees coverage inside the library. fuzz/run.sh runs
#    each for ATTN_FUZZ_SECONDS.
# A target whose code under test does not exist yet in the tree is skipped.

option(ATTN_FUZZ "Build the libFuzzer targets (clang, with ATTN_SANITIZE=address)" OFF)

# name | paths it needs (relative to the source dir, comma-separated) | extra sources (same) |
# the library it links (attn_static unless named; skipped when that component is not built)
set(ATTN_FUZZ_TARGETS
  "npy|src/npy/npy.c|"
  "safetensors|src/io/safetensors.c||attn_io_static"
  "arguments|cli/arguments.c,cli/npy_tensor.c|cli/arguments.c,cli/npy_tensor.c"
  "forward|src/forward|fuzz/attention_case.c"
  "serve|src/varlen|"
  "model_config|src/io/model_config.c||attn_models_static")

if(ATTN_FUZZ)
  if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang" OR NOT ATTN_SANITIZE STREQUAL "address")
    message(FATAL_ERROR "ATTN_FUZZ=ON needs CC=clang and -DATTN_SANITIZE=address")
  endif()
  # Coverage instrumentation for everything the fuzzers call into.
  get_property(attn_fuzz_instrumented DIRECTORY ${PROJECT_SOURCE_DIR} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target ${attn_fuzz_instrumented})
    get_target_property(target_type ${target} TYPE)
    if(target_type MATCHES "^(EXECUTABLE|SHARED_LIBRARY|STATIC_LIBRARY|OBJECT_LIBRARY)$")
      target_compile_options(${target} PRIVATE -fsanitize=fuzzer-no-link)
    endif()
  endforeach()
endif()

if(ATTN_TESTS)
  # The property tests build their random calls with the forward fuzzer's case builder.
  foreach(property_test test_property_forward)
    if(TARGET ${property_test})
      target_sources(${property_test} PRIVATE ${PROJECT_SOURCE_DIR}/fuzz/attention_case.c)
      target_include_directories(${property_test} PRIVATE ${PROJECT_SOURCE_DIR}/fuzz)
    endif()
  endforeach()

  foreach(entry ${ATTN_FUZZ_TARGETS})
    string(REPLACE "|" ";" fields "${entry}")
    list(GET fields 0 name)
    list(GET fields 1 needs)
    list(LENGTH fields field_count)
    set(extra "")
    if(field_count GREATER 2)
      list(GET fields 2 extra)
    endif()
    set(library attn_static)
    if(field_count GREATER 3)
      list(GET fields 3 library)
    endif()
    string(REPLACE "," ";" needs "${needs}")
    string(REPLACE "," ";" extra "${extra}")
    set(present TRUE)
    foreach(path ${needs})
      if(NOT EXISTS ${PROJECT_SOURCE_DIR}/${path})
        set(present FALSE)
      endif()
    endforeach()
    if(NOT present OR NOT EXISTS ${PROJECT_SOURCE_DIR}/fuzz/fuzz_${name}.c OR
       NOT TARGET ${library})
      continue()
    endif()
    set(extra_sources "")
    foreach(path ${extra})
      list(APPEND extra_sources ${PROJECT_SOURCE_DIR}/${path})
    endforeach()

    add_executable(fuzz_replay_${name} ${PROJECT_SOURCE_DIR}/fuzz/fuzz_${name}.c
                   ${PROJECT_SOURCE_DIR}/fuzz/replay_main.c ${extra_sources})
    target_include_directories(fuzz_replay_${name} PRIVATE ${PROJECT_SOURCE_DIR}/src
                               ${PROJECT_SOURCE_DIR}/cli ${PROJECT_SOURCE_DIR}/fuzz)
    target_link_libraries(fuzz_replay_${name} PRIVATE ${library})
    add_test(NAME fuzz_replay_${name}
             COMMAND fuzz_replay_${name} ${PROJECT_SOURCE_DIR}/fuzz/corpus/${name}
                     ${PROJECT_SOURCE_DIR}/fuzz/regressions/${name})
    set_tests_properties(fuzz_replay_${name} PROPERTIES TIMEOUT 300)

    if(ATTN_FUZZ)
      add_executable(fuzz_${name} ${PROJECT_SOURCE_DIR}/fuzz/fuzz_${name}.c ${extra_sources})
      target_include_directories(fuzz_${name} PRIVATE ${PROJECT_SOURCE_DIR}/src
                                 ${PROJECT_SOURCE_DIR}/cli ${PROJECT_SOURCE_DIR}/fuzz)
      target_link_libraries(fuzz_${name} PRIVATE ${library})
      target_compile_options(fuzz_${name} PRIVATE -fsanitize=fuzzer,address,undefined
                             -fno-sanitize-recover=all -g)
      target_link_options(fuzz_${name} PRIVATE -fsanitize=fuzzer,address,undefined)
    endif()
  endforeach()
endif()
