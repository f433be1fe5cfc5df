# components.cmake — attn_add_component(): one optional library of attn built on top of the
# core libattn, as libattn_<name>.so (SONAME libattn_<name>.so.MAJOR) and libattn_<name>.a from
# one set of objects, with the names attn::attn_<name> and attn::attn_<name>_static
# (docs/install.md, "Components"). Used by io.cmake, models.cmake and mpi.cmake.
#
#   attn_add_component(<name> SOURCES <files> [REQUIRES <attn components>]
#                      [PRIVATE_INCLUDES <dirs>] [PUBLIC_LIBRARIES <libraries>]
#                      [PRIVATE_LIBRARIES <libraries>])
#
# REQUIRES names the other components whose public API the code calls (io for models): the
# shared library links their shared libraries, the static one their static ones. The library's
# own dependencies (PRIVATE_LIBRARIES: cJSON, BLAS) are private: the shared library records
# them itself (DT_NEEDED), the static one passes them on as link-only requirements.
# PUBLIC_LIBRARIES are what the component's header includes (MPI for attn_mpi.h).
#
# libattn.so exports only its public API (hidden visibility); the internal helpers a component
# calls (attn_fail, checked sizes, aligned memory) come from a private, hidden copy of
# libattn.a's objects (--exclude-libs keeps them out of the component's exports), and
# --no-undefined proves nothing is left unresolved. A sanitizer build leaves the sanitizer's
# runtime hooks for the executable to resolve, so --no-undefined is for plain builds only.
function(attn_add_component name)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" ""
                        "SOURCES;REQUIRES;PRIVATE_INCLUDES;PUBLIC_LIBRARIES;PRIVATE_LIBRARIES")
  set(library attn_${name})
  add_library(${library}_objects OBJECT ${arg_SOURCES})
  target_include_directories(${library}_objects PUBLIC ${PROJECT_SOURCE_DIR}/include
                             PRIVATE ${PROJECT_SOURCE_DIR}/src ${arg_PRIVATE_INCLUDES})
  target_link_libraries(${library}_objects PUBLIC ${arg_PUBLIC_LIBRARIES} Threads::Threads)

  set(shared_requires "")
  set(static_requires "")
  foreach(component ${arg_REQUIRES})
    list(APPEND shared_requires attn_${component})
    list(APPEND static_requires attn_${component}_static)
  endforeach()
  add_library(${library} SHARED $<TARGET_OBJECTS:${library}_objects>)
  target_link_libraries(${library} PUBLIC ${shared_requires} attn ${arg_PUBLIC_LIBRARIES}
                        PRIVATE ${arg_PRIVATE_LIBRARIES} Threads::Threads m)
  target_link_libraries(${library} PRIVATE attn_static)
  target_link_options(${library} PRIVATE -Wl,--exclude-libs,libattn.a)
  if(NOT ATTN_SANITIZE)
    target_link_options(${library} PRIVATE -Wl,--no-undefined)
  endif()
  add_library(${library}_static STATIC $<TARGET_OBJECTS:${library}_objects>)
  target_link_libraries(${library}_static PUBLIC ${static_requires} attn_static ${arg_PUBLIC_LIBRARIES}
                        PRIVATE ${arg_PRIVATE_LIBRARIES} Threads::Threads m)
  set_target_properties(${library} PROPERTIES VERSION ${PROJECT_VERSION}
                                              SOVERSION ${PROJECT_VERSION_MAJOR})
  set_target_properties(${library}_static PROPERTIES OUTPUT_NAME ${library})
  foreach(target ${library} ${library}_static)
    target_include_directories(${target} PUBLIC
      $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  endforeach()
  add_library(attn::${library} ALIAS ${library})
  add_library(attn::${library}_static ALIAS ${library}_static)
endfunction()
