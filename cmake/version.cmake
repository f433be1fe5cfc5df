# version.cmake — attn's one version number. include/attn.h defines ATTN_VERSION_MAJOR,
# ATTN_VERSION_MINOR and ATTN_VERSION_PATCH; this file reads them (before project(), which
# takes the result) so that attn.h, attn_version(), CMake (project version, SONAME,
# attnConfigVersion.cmake, attn.pc) and the Python package (pyproject reads the same macros)
# always agree. Sets ATTN_VERSION to "MAJOR.MINOR.PATCH".
file(STRINGS ${CMAKE_CURRENT_LIST_DIR}/../include/attn.h attn_version_lines
     REGEX "^#define ATTN_VERSION_(MAJOR|MINOR|PATCH) +[0-9]+")
foreach(part MAJOR MINOR PATCH)
  set(attn_version_${part} "")
  foreach(line ${attn_version_lines})
    if(line MATCHES "^#define ATTN_VERSION_${part} +([0-9]+)")
      set(attn_version_${part} ${CMAKE_MATCH_1})
    endif()
  endforeach()
  if(attn_version_${part} STREQUAL "")
    message(FATAL_ERROR "attn: include/attn.h has no '#define ATTN_VERSION_${part} <number>'")
  endif()
endforeach()
set(ATTN_VERSION "${attn_version_MAJOR}.${attn_version_MINOR}.${attn_version_PATCH}")
