# kernels.cmake — architecture kernels behind runtime dispatch (src/kernels/registry.c).
#
# Every .c under src/kernels/avx2 is compiled with AVX2 + FMA + F16C and every .c under
# src/kernels/avx512 with AVX-512 (F, DQ, BW, VL) + FMA; only these files get those flags, so
# the rest of the library still runs on any x86-64 CPU and registry.c decides from CPUID and
# the OS which table runs. The ATTN_HAVE_*_KERNELS definitions are PUBLIC on attn_objects so every target
# that includes kernels/registry.h (tests, CLI) sees the same table declarations.
# src/kernels/avx512bf16 adds AVX512-BF16 + F16C (the bf16 / fp16 kernels of lowp.h) and
# src/kernels/amx AMX-TILE + AMX-BF16 + AMX-INT8; each is built when the compiler knows the flags and
# runs only where cpu_features says the CPU and OS allow it.
# Off on non-x86 compilers: then only the generic table exists.
include(CheckCCompilerFlag)

option(ATTN_ENABLE_SIMD_KERNELS "Build the AVX2 and AVX-512 kernel tables (x86-64)" ON)
# A test build: the AVX-512 and AVX512-BF16 tables compiled against SIMDe's portable
# intrinsics (Debian: libsimde-dev) over AVX2, with cpu_features reporting their extensions on
# any AVX2 CPU, so their kernels run under the tests where the CPU lacks them. Never a build to
# ship or to time (src/kernels/simd/emulate_avx512.h).
option(ATTN_EMULATE_AVX512 "Test build: run the AVX-512 kernel tables emulated on AVX2 (needs SIMDe)" OFF)

if(ATTN_ENABLE_SIMD_KERNELS AND CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64|amd64")
  check_c_compiler_flag("-mavx2 -mfma -mf16c" ATTN_COMPILER_HAS_AVX2)
  check_c_compiler_flag("-mavx512f -mavx512dq -mavx512bw -mavx512vl -mfma" ATTN_COMPILER_HAS_AVX512)

  file(GLOB ATTN_AVX2_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/avx2/*.c)
  file(GLOB ATTN_AVX512_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/avx512/*.c)

  if(ATTN_COMPILER_HAS_AVX2 AND ATTN_AVX2_SOURCES)
    target_sources(attn_objects PRIVATE ${ATTN_AVX2_SOURCES})
    set_source_files_properties(${ATTN_AVX2_SOURCES} PROPERTIES COMPILE_OPTIONS "-mavx2;-mfma;-mf16c")
    # GCC's partial redundancy elimination leaves a register copy per accumulator and step
    # in the 8-bit decode loops at 16 registers (8 vmovdqa per 8 VPMADDWD): without it the
    # same code runs fewer instructions (docs/kernels.md, "The vector abstraction").
    if(CMAKE_C_COMPILER_ID STREQUAL "GNU")
      set_property(SOURCE ${PROJECT_SOURCE_DIR}/src/kernels/avx2/decode_avx2.c APPEND PROPERTY
                   COMPILE_OPTIONS "-fno-tree-pre")
    endif()
    target_compile_definitions(attn_objects PUBLIC ATTN_HAVE_AVX2_KERNELS=1)
    add_compile_definitions(ATTN_HAVE_AVX2_KERNELS=1)
  endif()
  if(ATTN_EMULATE_AVX512)
    include(CheckIncludeFile)
    check_include_file("simde/x86/avx512.h" ATTN_HAVE_SIMDE)
    if(NOT ATTN_HAVE_SIMDE)
      message(FATAL_ERROR "ATTN_EMULATE_AVX512 needs SIMDe's headers (Debian: libsimde-dev)")
    endif()
    set(ATTN_EMULATION_FLAGS "-mavx2;-mfma;-mf16c;-Wno-psabi;-include;${PROJECT_SOURCE_DIR}/src/kernels/simd/emulate_avx512.h")
    file(GLOB ATTN_AVX512BF16_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/avx512bf16/*.c)
    target_sources(attn_objects PRIVATE ${ATTN_AVX512_SOURCES} ${ATTN_AVX512BF16_SOURCES})
    set_source_files_properties(${ATTN_AVX512_SOURCES} ${ATTN_AVX512BF16_SOURCES} PROPERTIES
                                COMPILE_OPTIONS "${ATTN_EMULATION_FLAGS}")
    target_compile_definitions(attn_objects PUBLIC ATTN_HAVE_AVX512_KERNELS=1
                               ATTN_HAVE_AVX512BF16_KERNELS=1 ATTN_EMULATED_AVX512=1)
    add_compile_definitions(ATTN_HAVE_AVX512_KERNELS=1 ATTN_HAVE_AVX512BF16_KERNELS=1
                            ATTN_EMULATED_AVX512=1)
  elseif(ATTN_COMPILER_HAS_AVX512 AND ATTN_AVX512_SOURCES)
    target_sources(attn_objects PRIVATE ${ATTN_AVX512_SOURCES})
    # Functions on 64 bytes and loops on 32: otherwise the decode kernels' speed moves by a few
    # percent with where an unrelated change puts them (bench/results/intel-xeon-avx512.md).
    set_source_files_properties(${ATTN_AVX512_SOURCES} PROPERTIES
      COMPILE_OPTIONS "-mavx512f;-mavx512dq;-mavx512bw;-mavx512vl;-mfma;-falign-functions=64;-falign-loops=32")
    target_compile_definitions(attn_objects PUBLIC ATTN_HAVE_AVX512_KERNELS=1)
    add_compile_definitions(ATTN_HAVE_AVX512_KERNELS=1)
  endif()

  check_c_compiler_flag("-mavx512f -mavx512dq -mavx512bw -mavx512vl -mavx512bf16 -mf16c -mfma"
                        ATTN_COMPILER_HAS_AVX512BF16)
  check_c_compiler_flag("-mamx-tile -mamx-bf16 -mamx-int8" ATTN_COMPILER_HAS_AMX)
  file(GLOB ATTN_AVX512BF16_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/avx512bf16/*.c)
  file(GLOB ATTN_AMX_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/kernels/amx/*.c)
  if(ATTN_COMPILER_HAS_AVX512BF16 AND ATTN_AVX512BF16_SOURCES AND NOT ATTN_EMULATE_AVX512)
    target_sources(attn_objects PRIVATE ${ATTN_AVX512BF16_SOURCES})
    set_source_files_properties(${ATTN_AVX512BF16_SOURCES} PROPERTIES COMPILE_OPTIONS
      "-mavx512f;-mavx512dq;-mavx512bw;-mavx512vl;-mavx512bf16;-mf16c;-mfma")
    target_compile_definitions(attn_objects PUBLIC ATTN_HAVE_AVX512BF16_KERNELS=1)
    add_compile_definitions(ATTN_HAVE_AVX512BF16_KERNELS=1)
  endif()
  if(ATTN_COMPILER_HAS_AMX AND ATTN_AMX_SOURCES)
    target_sources(attn_objects PRIVATE ${ATTN_AMX_SOURCES})
    if(ATTN_EMULATE_AVX512) # (their AVX-512 parts emulated as the tables they build on)
      set_source_files_properties(${ATTN_AMX_SOURCES} PROPERTIES COMPILE_OPTIONS
                                  "-mamx-tile;-mamx-bf16;-mamx-int8;${ATTN_EMULATION_FLAGS}")
    else()
      set_source_files_properties(${ATTN_AMX_SOURCES} PROPERTIES COMPILE_OPTIONS "-mamx-tile;-mamx-bf16;-mamx-int8")
    endif()
    target_compile_definitions(attn_objects PUBLIC ATTN_HAVE_AMX_KERNELS=1)
    add_compile_definitions(ATTN_HAVE_AMX_KERNELS=1)
  endif()
endif()
