# ctest driver: install the build tree into a scratch prefix, then build the C
# example comm/capi/examples/consumer against it twice, the way users would:
# with CMake's find_package(terngrad), and with a bare compiler command from
# pkg-config. Then import the installed Python package with nothing but
# PYTHONPATH set. Variables: BUILD_DIR, SOURCE_DIR, WORK_DIR, C_COMPILER,
# PKG_CONFIG, PYTHON (may be empty: that route is then not run).
file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    string(REPLACE ";" " " cmd "${ARGN}")
    message(FATAL_ERROR "step failed (${rc}): ${cmd}\n${out}\n${err}")
  endif()
  message(STATUS "${out}")
  set(run_output "${out}" PARENT_SCOPE)
endfunction()

run(${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})

# 1. CMake: find_package(terngrad) in a C-only project.
run(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/cmake -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_C_COMPILER=${C_COMPILER})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/cmake)
run(${WORK_DIR}/cmake/consumer)

# 2. pkg-config: cc main.c $(pkg-config --cflags --libs terngrad).
file(GLOB_RECURSE pc_files ${prefix}/terngrad.pc)
if(NOT pc_files)
  message(FATAL_ERROR "terngrad.pc was not installed under ${prefix}")
endif()
list(GET pc_files 0 pc)
get_filename_component(pc_dir ${pc} DIRECTORY)
run(${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir} ${PKG_CONFIG} --cflags --libs terngrad)
separate_arguments(flags UNIX_COMMAND "${run_output}")
run(${CMAKE_COMMAND} -E env PKG_CONFIG_PATH=${pc_dir} ${PKG_CONFIG} --variable=libdir terngrad)
string(STRIP "${run_output}" libdir)
run(${C_COMPILER} -std=c11 -Wall -Werror ${SOURCE_DIR}/main.c ${flags} -Wl,-rpath,${libdir}
    -o ${WORK_DIR}/consumer_pc)
run(${WORK_DIR}/consumer_pc)

# 3. Python: the installed package loads the installed library by itself.
if(PYTHON)
  file(GLOB_RECURSE init_files ${prefix}/__init__.py)
  list(FILTER init_files INCLUDE REGEX "/dist-packages/terngrad/__init__.py$")
  if(NOT init_files)
    message(FATAL_ERROR "the Python package was not installed under ${prefix}")
  endif()
  list(GET init_files 0 init)
  get_filename_component(pkg_dir ${init} DIRECTORY)
  get_filename_component(site_dir ${pkg_dir} DIRECTORY)
  run(${CMAKE_COMMAND} -E env --unset=TERNGRAD_LIBRARY PYTHONPATH=${site_dir} ${PYTHON}
      ${CMAKE_CURRENT_LIST_DIR}/installed_python_check.py)
endif()
