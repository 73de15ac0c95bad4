# Fails when a file of one layer of src/memo includes a header of a folder its layer may not use.
# Run in script mode by the memo_layering target (CMakeLists.txt), before any layer compiles:
#   cmake -DROOT=<src/memo> -DRULES="core=core|backend=backend,core|..." -P check_layering.cmake
# RULES names every layer (a folder of ROOT) and the folders its files may include: itself and,
# transitively, the layers it declares in memo_layer(... DEPS ...).
cmake_minimum_required(VERSION 3.25)
string(REPLACE "|" ";" rules "${RULES}")
set(layers "")
foreach(rule IN LISTS rules)
  string(REPLACE "=" ";" parts "${rule}")
  list(GET parts 0 name)
  list(GET parts 1 allowed)
  string(REPLACE "," ";" allowed "${allowed}")
  set(allowed_${name} "${allowed}")
  list(APPEND layers "${name}")
endforeach()

set(errors "")
file(GLOB folders LIST_DIRECTORIES true RELATIVE "${ROOT}" "${ROOT}/*")
foreach(folder IN LISTS folders)
  if(IS_DIRECTORY "${ROOT}/${folder}" AND NOT folder IN_LIST layers)
    string(APPEND errors "\n  ${folder}/ is not a layer: declare it with memo_layer() in CMakeLists.txt")
  endif()
endforeach()

foreach(layer IN LISTS layers)
  file(GLOB_RECURSE files "${ROOT}/${layer}/*.h" "${ROOT}/${layer}/*.cc" "${ROOT}/${layer}/*.cu" "${ROOT}/${layer}/*.cuh"
       "${ROOT}/${layer}/*.cu")
  foreach(path IN LISTS files)
    file(STRINGS "${path}" includes REGEX "^[ \t]*#[ \t]*include[ \t]*\"memo/")
    foreach(line IN LISTS includes)
      string(REGEX REPLACE ".*\"memo/([^/\"]+)/.*" "\\1" used "${line}")
      if(NOT used IN_LIST allowed_${layer})
        file(RELATIVE_PATH rel "${ROOT}" "${path}")
        string(REGEX REPLACE ".*\"(memo/[^\"]+)\".*" "\\1" header "${line}")
        string(REPLACE ";" ", " may "${allowed_${layer}}")
        string(APPEND errors "\n  ${rel} includes ${header}: ${layer}/ may include ${may}")
      endif()
    endforeach()
  endforeach()
endforeach()

if(errors)
  message(FATAL_ERROR "memo: include across layers (docs/architecture.md):${errors}")
endif()
