# sanitizers.cmake — sanitizer build flavours of the whole project (library, CLI, tests, fuzz
# replays), selected with -DATTN_SANITIZE=<flavour>. Included at the end of CMakeLists.txt, so it
# instruments every target of the project (a deferred sweep at the end of configuration).
#
#   address  AddressSanitizer + UndefinedBehaviorSanitizer, every report fatal
#            (-fno-sanitize-recover=all). Used by build-asan in scripts/test.sh.
#   thread   ThreadSanitizer. With clang, OpenMP comes from LLVM's libomp, whose OMPT tool
#            "Archer" (libarcher.so, shipped with libomp-dev) is loaded automatically when the
#            program is built with TSan and tells TSan about OpenMP's barriers, reductions and
#            task dependences; no suppression file is needed. Tests that mention (num_)threads
#            get the ctest label "threaded" (ctest -L threaded runs only those).
#
# Every test gets ASAN/UBSAN/LSAN/TSAN_OPTIONS so that any report makes it fail;
# see docs/robustness.md.

set(ATTN_SANITIZE "" CACHE STRING "Sanitizer flavour: '', 'address' (ASan+UBSan) or 'thread' (TSan)")
set_property(CACHE ATTN_SANITIZE PROPERTY STRINGS "" address thread)

# detect_odr_violation=1 reports a global defined twice with different sizes (a real ODR bug)
# but not the same object twice: the CLI and MPI tests link libattn statically and, through
# libattn_mpi.so, dynamically too (see docs/robustness.md, "known exclusions").
# intercept_tls_get_addr=0: clang 14's runtime (like every LLVM before 17 and GCC before 14) takes
# a dynamic TLS block that starts 16 bytes into a page for one with glibc 2.19's header and reads
# the two words before it as the block's range; since glibc 2.25 there is no header, so a malloc'd
# block that lands there by chance (libomp dlopens libarcher.so, whose TLS is dynamic) gives
# LeakSanitizer a garbage range and its tracer dies at exit ("Tracer caught signal 11") after a
# test has passed. Off, dynamic TLS is not scanned for roots; attn keeps no pointers in TLS.
set(ATTN_ASAN_OPTIONS "detect_leaks=1:halt_on_error=1:exitcode=86:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1:detect_odr_violation=1:intercept_tls_get_addr=0")
# LLVM's libomp keeps per-thread descriptors it never frees (not instrumented, not ours).
set(ATTN_LSAN_SUPPRESSIONS ${PROJECT_BINARY_DIR}/lsan-suppressions.txt)
file(WRITE ${ATTN_LSAN_SUPPRESSIONS} "# written by cmake/sanitizers.cmake\nleak:libomp.so\n")
set(ATTN_LSAN_OPTIONS "suppressions=${ATTN_LSAN_SUPPRESSIONS}:print_suppressions=0")
set(ATTN_UBSAN_OPTIONS "halt_on_error=1:print_stacktrace=1:exitcode=87")
# Tests whose assertion is about memory use itself (peak RSS), which ASan's shadow memory and
# quarantine inflate by design; they run in every other build.
set(ATTN_ASAN_DISABLED_TESTS cli_forward_memory)
# Benchmark smoke tests (bench_*, tests/bench/*.sh): they check that a benchmark's printed
# numbers follow from its timings and sizes, which the plain build shows; under a sanitizer
# they only cost minutes.
set(ATTN_SANITIZER_SKIPPED_TESTS "^bench_")
# ignore_noninstrumented_modules: libomp itself is not instrumented; Archer supplies its
# synchronisation instead (LLVM's documented setting for OpenMP under TSan).
set(ATTN_TSAN_OPTIONS "halt_on_error=1:exitcode=88:ignore_noninstrumented_modules=1:second_deadlock_stack=1")

if(ATTN_SANITIZE STREQUAL "")
  set(ATTN_SANITIZER_FLAGS "")
elseif(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "ATTN_SANITIZE=${ATTN_SANITIZE} needs clang (configure with CC=clang)")
elseif(ATTN_SANITIZE STREQUAL "address")
  set(ATTN_SANITIZER_FLAGS -fsanitize=address,undefined -fno-sanitize-recover=all
                           -fno-omit-frame-pointer -g)
elseif(ATTN_SANITIZE STREQUAL "thread")
  set(ATTN_SANITIZER_FLAGS -fsanitize=thread -fno-omit-frame-pointer -g)
else()
  message(FATAL_ERROR "ATTN_SANITIZE = '${ATTN_SANITIZE}': expected '', 'address' or 'thread'")
endif()

# Compiles and links `target` with the flavour's flags (no-op without a flavour).
function(attn_sanitize_target target)
  get_target_property(target_type ${target} TYPE)
  if(ATTN_SANITIZER_FLAGS AND
     target_type MATCHES "^(EXECUTABLE|SHARED_LIBRARY|STATIC_LIBRARY|OBJECT_LIBRARY|MODULE_LIBRARY)$")
    target_compile_options(${target} PRIVATE ${ATTN_SANITIZER_FLAGS})
    target_link_options(${target} PRIVATE ${ATTN_SANITIZER_FLAGS})
  endif()
endfunction()

# Makes any sanitizer report fail test `test_name`; labels it "threaded" when its source
# (tests/<name>.c) mentions num_threads or threads.
function(attn_sanitize_test test_name)
  if(NOT ATTN_SANITIZE STREQUAL "")
    set(asan_options "${ATTN_ASAN_OPTIONS}")
    get_test_property(${test_name} LABELS labels)
    if(labels MATCHES "mpi")
      # Open MPI's dlopen'ed (then unloaded) plugins leak by design and cannot be named in a
      # suppression; memory errors are still fatal, only leak checking is off for these.
      string(REPLACE "detect_leaks=1" "detect_leaks=0" asan_options "${asan_options}")
    endif()
    set_property(TEST ${test_name} APPEND PROPERTY ENVIRONMENT
      "ASAN_OPTIONS=${asan_options}" "UBSAN_OPTIONS=${ATTN_UBSAN_OPTIONS}"
      "LSAN_OPTIONS=${ATTN_LSAN_OPTIONS}" "TSAN_OPTIONS=${ATTN_TSAN_OPTIONS}")
  endif()
  if(ATTN_SANITIZE STREQUAL "address" AND test_name IN_LIST ATTN_ASAN_DISABLED_TESTS)
    set_property(TEST ${test_name} PROPERTY DISABLED TRUE)
  endif()
  if(NOT ATTN_SANITIZE STREQUAL "" AND test_name MATCHES "${ATTN_SANITIZER_SKIPPED_TESTS}")
    set_property(TEST ${test_name} PROPERTY DISABLED TRUE)
  endif()
  set(test_source ${PROJECT_SOURCE_DIR}/tests/${test_name}.c)
  if(EXISTS ${test_source})
    file(STRINGS ${test_source} thread_lines REGEX "num_threads|threads")
    if(thread_lines)
      set_property(TEST ${test_name} APPEND PROPERTY LABELS threaded)
    endif()
  endif()
endfunction()

# Every target and test of the project: the library objects, both libraries, the CLI, the
# test support library, each test, the fuzz replays, and whatever other cmake files add with
# cmake_language(DEFER) (the MPI tests): this sweep is itself deferred, registered last.
function(attn_sanitize_everything)
  get_property(targets DIRECTORY ${PROJECT_SOURCE_DIR} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target ${targets})
    attn_sanitize_target(${target})
  endforeach()
  get_property(tests DIRECTORY ${PROJECT_SOURCE_DIR} PROPERTY TESTS)
  foreach(test_name ${tests})
    attn_sanitize_test(${test_name})
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL attn_sanitize_everything)
if(NOT ATTN_SANITIZE STREQUAL "")
  message(STATUS "attn: sanitizer flavour '${ATTN_SANITIZE}'")
endif()
