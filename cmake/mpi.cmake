# mpi.cmake — the optional MPI component: libattn_mpi (ring attention, src/mpi/), `attn ring`
# (cli/mpi/) and the ring tests (tests/mpi/test_*.c, each run under mpiexec with 1, 2, 3 and 4
# processes). Everything here is skipped, with a message, when no MPI is found. Open MPI is the
# reference implementation; MPICH works too (no Open MPI-only flags are passed to its mpiexec).
#
# This file is included before the CLI and test targets exist, so the parts that extend them
# run deferred, at the end of the top-level CMakeLists.txt.

find_package(MPI COMPONENTS C)
if(NOT MPI_C_FOUND)
  message(STATUS "attn: MPI not found: libattn_mpi, `attn ring` and the ring tests are skipped")
  return()
endif()

file(GLOB ATTN_MPI_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/mpi/*.c)
# libattn_mpi.so on top of libattn.so for users, and a static one on top of libattn.a for the
# CLI and the tests, so that no program carries two copies of libattn (which sanitizers
# rightly report as duplicate globals). attn_mpi.h includes mpi.h, so MPI is a public
# requirement (components.cmake).
attn_add_component(mpi SOURCES ${ATTN_MPI_SOURCES} PUBLIC_LIBRARIES MPI::MPI_C)

# Open MPI needs --oversubscribe to start more processes than cores (tests use up to 4 on a
# 2-core machine); MPICH oversubscribes by default and rejects the flag.
set(ATTN_MPIEXEC_OVERSUBSCRIBE "")
execute_process(COMMAND ${MPIEXEC_EXECUTABLE} --version
                OUTPUT_VARIABLE attn_mpiexec_version ERROR_VARIABLE attn_mpiexec_version
                RESULT_VARIABLE attn_mpiexec_result)
if(attn_mpiexec_version MATCHES "Open MPI|OpenRTE")
  set(ATTN_MPIEXEC_OVERSUBSCRIBE --oversubscribe)
endif()
# CI runs as root, which Open MPI refuses without these (MPICH ignores them). One thread per
# rank (attn's default count follows OMP_NUM_THREADS) keeps 4 ranks from fighting over 2 cores.
set(ATTN_MPI_TEST_ENVIRONMENT
    "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1;OMP_NUM_THREADS=1")

function(attn_mpi_attach_targets)
  if(TARGET attn_cli)
    file(GLOB ATTN_MPI_CLI_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cli/mpi/*.c)
    target_sources(attn_cli PRIVATE ${ATTN_MPI_CLI_SOURCES})
    target_compile_definitions(attn_cli PRIVATE ATTN_HAVE_MPI)
    target_link_libraries(attn_cli PRIVATE attn_mpi_static)
  endif()
  if(TARGET attn_test_support)
    file(GLOB ATTN_MPI_TEST_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tests/mpi/test_*.c)
    foreach(source ${ATTN_MPI_TEST_SOURCES})
      get_filename_component(name ${source} NAME_WE)
      add_executable(mpi_${name} ${source})
      target_include_directories(mpi_${name} PRIVATE ${PROJECT_SOURCE_DIR}/tests/mpi)
      target_link_libraries(mpi_${name} PRIVATE attn_test_support attn_mpi_static)
      foreach(processes 1 2 3 4)
        add_test(NAME mpi_${name}_np${processes}
                 COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${processes}
                         ${ATTN_MPIEXEC_OVERSUBSCRIBE} ${MPIEXEC_PREFLAGS}
                         $<TARGET_FILE:mpi_${name}> ${MPIEXEC_POSTFLAGS})
        set_tests_properties(mpi_${name}_np${processes} PROPERTIES
                             ENVIRONMENT "${ATTN_MPI_TEST_ENVIRONMENT}"
                             PROCESSORS ${processes} TIMEOUT 120 LABELS mpi)
      endforeach()
    endforeach()
  endif()
  # `attn ring` end to end against `attn forward` (the script passes -np itself).
  if(TARGET attn_cli AND ATTN_TESTS)
    add_test(NAME mpi_cli_ring
             COMMAND bash ${PROJECT_SOURCE_DIR}/tests/mpi/cli_ring.sh $<TARGET_FILE:attn_cli>
                     ${PROJECT_SOURCE_DIR} ${MPIEXEC_EXECUTABLE} ${ATTN_MPIEXEC_OVERSUBSCRIBE}
                     ${MPIEXEC_PREFLAGS})
    set_tests_properties(mpi_cli_ring PROPERTIES ENVIRONMENT "${ATTN_MPI_TEST_ENVIRONMENT}"
                         PROCESSORS 4 TIMEOUT 180 LABELS mpi)
  endif()
endfunction()
cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL attn_mpi_attach_targets)
