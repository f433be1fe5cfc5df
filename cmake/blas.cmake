# blas.cmake — finds a CBLAS for the layers' projections (src/layers, attn_linear_forward).
# Debian's libopenblas-dev provides cblas.h (through the alternatives system, under
# /usr/include/<triplet>/) and libopenblas. Why BLAS: docs/training.md, "BLAS, not hand-written".
# The library comes from CMake's FindBLAS (vendor OpenBLAS) as the imported target BLAS::BLAS,
# so the installed attnConfig.cmake can find the same one again (find_dependency) for
# consumers of the static library. Adds the include directory to attn_objects, appends
# BLAS::BLAS to ATTN_EXTRA_LIBRARIES so libattn (shared and static) links it, and names
# OpenBLAS for attn.pc (ATTN_PC_REQUIRES_PRIVATE or ATTN_PC_LIBS_PRIVATE).
set(BLA_VENDOR OpenBLAS)
find_package(BLAS)
find_path(ATTN_CBLAS_INCLUDE_DIR cblas.h
  PATH_SUFFIXES openblas openblas-pthread x86_64-linux-gnu/openblas-pthread
                x86_64-linux-gnu aarch64-linux-gnu)
if(NOT ATTN_CBLAS_INCLUDE_DIR OR NOT BLAS_FOUND OR NOT TARGET BLAS::BLAS)
  message(FATAL_ERROR "attn: CBLAS not found (install libopenblas-dev); "
                      "cblas.h: ${ATTN_CBLAS_INCLUDE_DIR}, libopenblas: ${BLAS_LIBRARIES}")
endif()
message(STATUS "attn: CBLAS ${BLAS_LIBRARIES} (cblas.h in ${ATTN_CBLAS_INCLUDE_DIR})")
target_include_directories(attn_objects PRIVATE ${ATTN_CBLAS_INCLUDE_DIR})
target_link_libraries(attn_objects PUBLIC BLAS::BLAS)
list(APPEND ATTN_EXTRA_LIBRARIES BLAS::BLAS)
# For attn.pc (install.cmake): OpenBLAS's own .pc when there is one (it also names its private
# libraries, for a static link), else the library itself.
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(ATTN_PC_OPENBLAS QUIET openblas)
endif()
if(ATTN_PC_OPENBLAS_FOUND)
  list(APPEND ATTN_PC_REQUIRES_PRIVATE openblas)
else()
  list(APPEND ATTN_PC_LIBS_PRIVATE ${BLAS_LIBRARIES})
endif()
list(APPEND ATTN_PC_COVERED_LIBRARIES BLAS::BLAS)
