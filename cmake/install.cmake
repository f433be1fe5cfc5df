# install.cmake — what `cmake --install` puts where (GNUInstallDirs), and the two ways a
# consumer finds it again (docs/install.md):
#   include/attn*.h                          every public header (attn_mpi.h with the MPI part)
#   lib/libattn.so.MAJOR.MINOR.PATCH         SONAME libattn.so.MAJOR, plus the two symlinks
#   lib/libattn.a                            the same objects, static
#   lib/libattn_mpi.so*, libattn_mpi.a       the MPI component, when it was built
#   bin/attn                                 the command-line tool, when it was built
#   lib/cmake/attn/attnConfig.cmake          find_package(attn): attn::attn (shared),
#     attnConfigVersion.cmake, attnTargets   attn::attn_static, and with COMPONENTS mpi
#                                            attn::attn_mpi / attn::attn_mpi_static
#   lib/pkgconfig/attn.pc, attn_mpi.pc       pkg-config (Libs.private/Requires.private: static)
# Included at the end of CMakeLists.txt, when every target exists.
include(CMakePackageConfigHelpers)

set(ATTN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/attn CACHE STRING
    "Where attnConfig.cmake is installed, relative to the prefix")
set(attn_package_dir ${PROJECT_BINARY_DIR}/package)

# ---- headers, libraries, the tool ---------------------------------------------------------
file(GLOB attn_public_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/*.h)
if(NOT TARGET attn_mpi)
  list(FILTER attn_public_headers EXCLUDE REGEX "/attn_mpi\\.h$")
endif()
install(FILES ${attn_public_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(TARGETS attn attn_static EXPORT attnTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT attnTargets NAMESPACE attn:: DESTINATION ${ATTN_INSTALL_CMAKEDIR})
if(TARGET attn_mpi)
  install(TARGETS attn_mpi attn_mpi_static EXPORT attnMPITargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT attnMPITargets NAMESPACE attn:: DESTINATION ${ATTN_INSTALL_CMAKEDIR})
endif()
if(TARGET attn_cli)
  install(TARGETS attn_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

# ---- find_package(attn) ---------------------------------------------------------------------
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/attnConfig.cmake.in
                              ${attn_package_dir}/attnConfig.cmake
                              INSTALL_DESTINATION ${ATTN_INSTALL_CMAKEDIR})
# One SONAME per major version, so one compatible config per major version too.
write_basic_package_version_file(${attn_package_dir}/attnConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${attn_package_dir}/attnConfig.cmake ${attn_package_dir}/attnConfigVersion.cmake
        DESTINATION ${ATTN_INSTALL_CMAKEDIR})

# ---- pkg-config -----------------------------------------------------------------------------
# The prefix is found from the .pc file's own place (${pcfiledir}), so the files stay right
# for `cmake --install build --prefix P`, DESTDIR and a moved tree alike.
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(ATTN_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
  set(ATTN_PC_LIBDIR "${CMAKE_INSTALL_LIBDIR}")
else()
  file(RELATIVE_PATH attn_pc_up /attn-prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /attn-prefix)
  string(REGEX REPLACE "/$" "" attn_pc_up "${attn_pc_up}")
  set(ATTN_PC_PREFIX "\${pcfiledir}/${attn_pc_up}")
  set(ATTN_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(ATTN_PC_INCLUDEDIR "${CMAKE_INSTALL_INCLUDEDIR}")
else()
  set(ATTN_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()

# What a static link of libattn.a needs besides it: -pthread and libm here, and what the
# dependencies' cmake files (blas.cmake, ...) appended to ATTN_PC_REQUIRES_PRIVATE (their .pc
# modules) and ATTN_PC_LIBS_PRIVATE (link flags, where a dependency has no .pc), listing what
# they so covered in ATTN_PC_COVERED_LIBRARIES. Any other library of ATTN_EXTRA_LIBRARIES (a
# file path or a plain name) is named here as -L<dir> -l<name>, so nothing libattn links is
# left out of attn.pc.
list(PREPEND ATTN_PC_LIBS_PRIVATE -pthread -lm)
foreach(library ${ATTN_EXTRA_LIBRARIES})
  if(library IN_LIST ATTN_PC_COVERED_LIBRARIES)
    continue()
  elseif(TARGET ${library})
    message(FATAL_ERROR "attn: attn.pc cannot name the target ${library}; the cmake file that "
                        "adds it must append it to ATTN_PC_COVERED_LIBRARIES and name it for "
                        "attn.pc (ATTN_PC_REQUIRES_PRIVATE or ATTN_PC_LIBS_PRIVATE)")
  elseif(IS_ABSOLUTE "${library}")
    get_filename_component(library_dir "${library}" DIRECTORY)
    get_filename_component(library_name "${library}" NAME_WE)
    string(REGEX REPLACE "^lib" "" library_name "${library_name}")
    if(NOT library_dir IN_LIST CMAKE_C_IMPLICIT_LINK_DIRECTORIES)
      list(APPEND ATTN_PC_LIBS_PRIVATE "-L${library_dir}")
    endif()
    list(APPEND ATTN_PC_LIBS_PRIVATE "-l${library_name}")
  else()
    list(APPEND ATTN_PC_LIBS_PRIVATE "-l${library}")
  endif()
endforeach()
list(REMOVE_DUPLICATES ATTN_PC_LIBS_PRIVATE)
list(JOIN ATTN_PC_LIBS_PRIVATE " " ATTN_PC_LIBS_PRIVATE)
list(JOIN ATTN_PC_REQUIRES_PRIVATE " " ATTN_PC_REQUIRES_PRIVATE)
find_package(PkgConfig QUIET)
configure_file(${PROJECT_SOURCE_DIR}/cmake/attn.pc.in ${attn_package_dir}/attn.pc @ONLY)
set(attn_pc_files ${attn_package_dir}/attn.pc)

if(TARGET attn_mpi)
  # attn_mpi.h includes mpi.h: the MPI implementation's own .pc (Open MPI or MPICH) when
  # there is one, else its include directories and libraries.
  set(ATTN_PC_MPI_REQUIRES "")
  set(ATTN_PC_MPI_CFLAGS "")
  set(ATTN_PC_MPI_LIBS "")
  if(PKG_CONFIG_FOUND)
    pkg_search_module(ATTN_PC_MPI QUIET ompi-c mpich)
  endif()
  if(ATTN_PC_MPI_FOUND)
    set(ATTN_PC_MPI_REQUIRES "${ATTN_PC_MPI_MODULE_NAME}")
  else()
    foreach(dir ${MPI_C_INCLUDE_DIRS})
      string(APPEND ATTN_PC_MPI_CFLAGS " -I${dir}")
    endforeach()
    foreach(library ${MPI_C_LIBRARIES})
      string(APPEND ATTN_PC_MPI_LIBS " ${library}")
    endforeach()
  endif()
  configure_file(${PROJECT_SOURCE_DIR}/cmake/attn_mpi.pc.in ${attn_package_dir}/attn_mpi.pc @ONLY)
  list(APPEND attn_pc_files ${attn_package_dir}/attn_mpi.pc)
endif()
install(FILES ${attn_pc_files} DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
