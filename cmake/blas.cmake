# blas.cmake — finds a CBLAS for the layers' projections (src/layers, attn_linear_forward).
# Debian's libopenblas-dev provides cblas.h (through the alternatives system, under
# /usr/include/<triplet>/) and libopenblas. Measured against a naive loop in docs/training.md.
# Adds the include directory and the library to attn_objects and appends the library to
# ATTN_EXTRA_LIBRARIES so libattn (shared and static) links it.
find_path(ATTN_CBLAS_INCLUDE_DIR cblas.h
  PATH_SUFFIXES openblas openblas-pthread x86_64-linux-gnu/openblas-pthread
                x86_64-linux-gnu aarch64-linux-gnu)
find_library(ATTN_CBLAS_LIBRARY NAMES openblas)
if(NOT ATTN_CBLAS_INCLUDE_DIR OR NOT ATTN_CBLAS_LIBRARY)
  message(FATAL_ERROR "attn: CBLAS not found (install libopenblas-dev); "
                      "cblas.h: ${ATTN_CBLAS_INCLUDE_DIR}, libopenblas: ${ATTN_CBLAS_LIBRARY}")
endif()
message(STATUS "attn: CBLAS ${ATTN_CBLAS_LIBRARY} (cblas.h in ${ATTN_CBLAS_INCLUDE_DIR})")
target_include_directories(attn_objects PRIVATE ${ATTN_CBLAS_INCLUDE_DIR})
target_link_libraries(attn_objects PUBLIC ${ATTN_CBLAS_LIBRARY})
list(APPEND ATTN_EXTRA_LIBRARIES ${ATTN_CBLAS_LIBRARY})
