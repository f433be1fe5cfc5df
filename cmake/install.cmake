# install.cmake — what `cmake --install` puts where (GNUInstallDirs), and the two ways a
# consumer finds it again (docs/install.md):
#   include/attn*.h                          the public headers (a component's with it)
#   lib/libattn.so.MAJOR.MINOR.PATCH         SONAME libattn.so.MAJOR, plus the two symlinks
#   lib/libattn.a                            the same objects, static
#   lib/libattn_<c>.so*, libattn_<c>.a       each component c built (io, models, mpi)
#   bin/attn, bin/attn-bench                 the tools, when they were built
#   lib/cmake/attn/attnConfig.cmake          find_package(attn): attn::attn (shared),
#     attnConfigVersion.cmake, attn*Targets  attn::attn_static, and with COMPONENTS c
#                                            attn::attn_<c> / attn::attn_<c>_static
#   lib/pkgconfig/attn.pc, attn_<c>.pc       pkg-config (Libs.private/Requires.private: static)
# Included at the end of CMakeLists.txt, when every target exists.
include(CMakePackageConfigHelpers)

set(ATTN_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/attn CACHE STRING
    "Where attnConfig.cmake is installed, relative to the prefix")
set(attn_package_dir ${PROJECT_BINARY_DIR}/package)

# ---- headers, libraries, the tool ---------------------------------------------------------
# Every header but attn_mpi.h always: libattn itself implements parts of attn_io.h (.npy) and
# attn_layers.h (positional encodings); attn_mpi.h includes mpi.h, so it comes with its part.
file(GLOB attn_public_headers CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/*.h)
if(NOT TARGET attn_mpi)
  list(FILTER attn_public_headers EXCLUDE REGEX "/attn_mpi\\.h$")
endif()
install(FILES ${attn_public_headers} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

# One export set per library component, so that find_package(attn) loads only those asked for.
set(ATTN_INSTALLED_COMPONENTS "")
foreach(component "" io models mpi)
  if(component STREQUAL "")
    set(library attn)
    set(export attnTargets)
  else()
    set(library attn_${component})
    set(export attn_${component}Targets)
    if(NOT TARGET ${library})
      continue()
    endif()
    list(APPEND ATTN_INSTALLED_COMPONENTS ${component})
  endif()
  install(TARGETS ${library} ${library}_static EXPORT ${export}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT ${export} NAMESPACE attn:: DESTINATION ${ATTN_INSTALL_CMAKEDIR})
endforeach()
foreach(tool attn_cli attn_bench)
  if(TARGET ${tool})
    install(TARGETS ${tool} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  endif()
endforeach()

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

# What a static link of each library needs besides it: libattn.a -pthread and libm; the
# components their own dependency (io.cmake, models.cmake: its .pc module, or link flags where
# it has none) and the attn libraries below them (Requires).
find_package(PkgConfig QUIET)
set(ATTN_PC_LIBS_PRIVATE "-pthread -lm")
configure_file(${PROJECT_SOURCE_DIR}/cmake/attn.pc.in ${attn_package_dir}/attn.pc @ONLY)
set(attn_pc_files ${attn_package_dir}/attn.pc)
if(TARGET attn_io)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/attn_io.pc.in ${attn_package_dir}/attn_io.pc @ONLY)
  list(APPEND attn_pc_files ${attn_package_dir}/attn_io.pc)
endif()
if(TARGET attn_models)
  configure_file(${PROJECT_SOURCE_DIR}/cmake/attn_models.pc.in ${attn_package_dir}/attn_models.pc
                 @ONLY)
  list(APPEND attn_pc_files ${attn_package_dir}/attn_models.pc)
endif()

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
