# Helpers that every part's CMakeLists.txt uses. Flags are per target, never global.
include_guard(GLOBAL)

# Warnings and sanitizers for one of our own targets.
# Optimisation: Release compiles ax's own C++ at -O2, and only the CPU kernels (ax_hot_target) at
# -O3. -O3 costs about a quarter more compile time per file and bought nothing measurable outside
# the kernels (docs/notes/build-time.md); without -ffast-math neither level reorders floating point,
# so results are the same bit for bit.
function(ax_target_defaults target)
  target_compile_options(${target} PRIVATE
    $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O2>
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter>
    # Unity builds: GCC reads a file that a unity source includes as a header, and then warns
    # about every class of it that holds a type from its anonymous namespace (-Wsubobject-linkage).
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-subobject-linkage>
    # Error locations ("at datasets/shards/src/x.cc:12") name repository paths, not build-machine ones.
    $<$<COMPILE_LANGUAGE:CXX>:-fmacro-prefix-map=${PROJECT_SOURCE_DIR}/=>)
  if(AX_SANITIZE)
    target_compile_options(${target} PRIVATE -fsanitize=address,undefined -fno-omit-frame-pointer)
    target_link_options(${target} PRIVATE -fsanitize=address,undefined)
  endif()
endfunction()

# A target whose loops are the run time (the CPU backend's kernels): -O3 in Release, after the -O2
# of ax_target_defaults (the last -O wins).
function(ax_hot_target target)
  target_compile_options(${target} PRIVATE $<$<AND:$<CONFIG:Release>,$<COMPILE_LANGUAGE:CXX>>:-O3>)
  # Compiled a file at a time, as measured (docs/notes/cuda-perf.md, benchmarks-train.md).
  set_target_properties(${target} PROPERTIES UNITY_BUILD OFF)
endfunction()

# A library of one part: ax_library(name SOURCES ... DEPS ... [INCLUDE_DIR dir]). Public headers
# live in <part>/include/ax/<part>/ (INCLUDE_DIR, default the folder's include/): the library
# exports that folder only, so a part sees the headers of the parts it links and no others
# (docs/architecture.md "Parts and layers").
function(ax_library name)
  cmake_parse_arguments(A "" "INCLUDE_DIR" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  if(NOT A_INCLUDE_DIR)
    set(A_INCLUDE_DIR ${CMAKE_CURRENT_SOURCE_DIR}/include)
  endif()
  add_library(${name} STATIC ${A_SOURCES})
  if(IS_DIRECTORY ${A_INCLUDE_DIR})
    target_include_directories(${name} PUBLIC ${A_INCLUDE_DIR})
  endif()
  target_link_libraries(${name} PUBLIC ${A_DEPS} PRIVATE ${A_PRIVATE_DEPS})
  # A unity build, eight sources per translation unit: a part's files share its headers and
  # nlohmann-json's, parsed once per unit instead of once per file (docs/notes/build-time.md). A
  # part's files keep their file-local names distinct.
  set_target_properties(${name} PROPERTIES POSITION_INDEPENDENT_CODE ON UNITY_BUILD ON
                                           UNITY_BUILD_BATCH_SIZE 8)
  ax_target_defaults(${name})
endfunction()

function(ax_executable name)
  cmake_parse_arguments(A "" "" "SOURCES;DEPS" ${ARGN})
  add_executable(${name} ${A_SOURCES})
  target_link_libraries(${name} PRIVATE ${A_DEPS})
  ax_target_defaults(${name})
endfunction()

# Writes ${CMAKE_BINARY_DIR}/ax-parts.json: every target of ax's own folders (not tests/, bench/)
# with its folder, kind, sources, public include folder and the ax targets it links. The one
# description of the parts and their arrows: scripts/layers.py checks the includes against it and
# draws docs/architecture.md's picture from it.
function(ax_export_parts)
  set(dirs ${PROJECT_SOURCE_DIR})
  set(entries "")
  while(dirs)
    list(POP_FRONT dirs dir)
    get_property(sub DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
    list(APPEND dirs ${sub})
    file(RELATIVE_PATH rel_dir ${PROJECT_SOURCE_DIR} ${dir})
    if(rel_dir MATCHES "^(tests|bench)(/|$)")
      continue()
    endif()
    get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(t IN LISTS targets)
      if(NOT t MATCHES "^(ax_|ax-|spank_ax$)" OR t MATCHES "^ax_dep_")
        continue()
      endif()
      get_target_property(type ${t} TYPE)
      set(links "")
      if(type STREQUAL "INTERFACE_LIBRARY")
        get_target_property(raw ${t} INTERFACE_LINK_LIBRARIES)
        set(sources "")
      else()
        get_target_property(raw ${t} LINK_LIBRARIES)
        get_target_property(sources ${t} SOURCES)
      endif()
      foreach(l IN LISTS raw)
        if(l MATCHES "^(ax_[a-z_]+|ax-[a-z-]+)$" AND TARGET ${l})
          list(APPEND links "\"${l}\"")
        endif()
      endforeach()
      set(srcs "")
      foreach(s IN LISTS sources)
        if(NOT IS_ABSOLUTE ${s})
          set(s ${dir}/${s})
        endif()
        file(RELATIVE_PATH s ${PROJECT_SOURCE_DIR} ${s})
        list(APPEND srcs "\"${s}\"")
      endforeach()
      set(include "")
      if(NOT type STREQUAL "EXECUTABLE" AND NOT type STREQUAL "MODULE_LIBRARY")
        get_target_property(inc ${t} INTERFACE_INCLUDE_DIRECTORIES)
        foreach(i IN LISTS inc)
          # The part's own include folder: not src/ (private), not the build tree's generated
          # headers (ax/common/build_config.h).
          if(i MATCHES "^${PROJECT_SOURCE_DIR}/" AND NOT i MATCHES "/src$"
             AND NOT i MATCHES "^${CMAKE_BINARY_DIR}/")
            file(RELATIVE_PATH include ${PROJECT_SOURCE_DIR} ${i})
          endif()
        endforeach()
      endif()
      list(JOIN links ", " links)
      list(JOIN srcs ", " srcs)
      list(APPEND entries "  {\"name\": \"${t}\", \"type\": \"${type}\", \"folder\": \"${rel_dir}\", \"include\": \"${include}\", \"links\": [${links}], \"sources\": [${srcs}]}")
    endforeach()
  endwhile()
  list(JOIN entries ",\n" body)
  file(WRITE ${CMAKE_BINARY_DIR}/ax-parts.json "[\n${body}\n]\n")
endfunction()
