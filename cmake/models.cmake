# models.cmake — the component models (option ATTN_MODELS): libattn_models, the model-level
# parts: linear maps on a CBLAS (src/layers/linear.c), attention layers (single-head, MHA, MQA,
# GQA) with their backward and Adam, model families loaded from checkpoints
# (model_family.c, layer_safetensors.c) and DeepSeek-V2 MLA with RMSNorm (src/mla). It needs
# the component io (checkpoints, config.json) and a CBLAS; without either it is skipped with a
# message. Why BLAS: docs/training.md, "BLAS, not hand-written".
#
# The CBLAS is OpenBLAS through CMake's FindBLAS (imported target BLAS::BLAS, so the installed
# attnConfig.cmake can find the same one again for consumers of the static library); Debian's
# libopenblas-dev provides cblas.h through the alternatives system, under
# /usr/include/<triplet>/. For attn_models.pc (install.cmake): ATTN_PC_MODELS_REQUIRES_PRIVATE
# (OpenBLAS's own .pc, which names its private libraries) or ATTN_PC_MODELS_LIBS_PRIVATE.
if(NOT TARGET attn_io)
  message(STATUS "attn: libattn_models (layers, MLA, model families) needs libattn_io: "
                 "not built (ATTN_MODELS off)")
  return()
endif()
set(BLA_VENDOR OpenBLAS)
find_package(BLAS)
find_path(ATTN_CBLAS_INCLUDE_DIR cblas.h
  PATH_SUFFIXES openblas openblas-pthread x86_64-linux-gnu/openblas-pthread
                x86_64-linux-gnu aarch64-linux-gnu)
if(NOT ATTN_CBLAS_INCLUDE_DIR OR NOT BLAS_FOUND OR NOT TARGET BLAS::BLAS)
  message(STATUS "attn: CBLAS not found (install libopenblas-dev): libattn_models (layers, "
                 "MLA, model families) is not built (ATTN_MODELS off)")
  return()
endif()
message(STATUS "attn: CBLAS ${BLAS_LIBRARIES} (cblas.h in ${ATTN_CBLAS_INCLUDE_DIR})")

file(GLOB ATTN_MODELS_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/layers/*.c
                                                ${PROJECT_SOURCE_DIR}/src/mla/*.c)
attn_add_component(models SOURCES ${ATTN_MODELS_SOURCES} REQUIRES io
                   PRIVATE_INCLUDES ${ATTN_CBLAS_INCLUDE_DIR}
                   PRIVATE_LIBRARIES BLAS::BLAS)

set(ATTN_PC_MODELS_REQUIRES_PRIVATE "")
set(ATTN_PC_MODELS_LIBS_PRIVATE "")
find_package(PkgConfig QUIET)
if(PKG_CONFIG_FOUND)
  pkg_check_modules(ATTN_PC_OPENBLAS QUIET openblas)
endif()
if(ATTN_PC_OPENBLAS_FOUND)
  set(ATTN_PC_MODELS_REQUIRES_PRIVATE openblas)
else()
  list(JOIN BLAS_LIBRARIES " " ATTN_PC_MODELS_LIBS_PRIVATE)
endif()
