# Finds what the Python module `kvtwin` (python/, docs/python.md) needs: a Python 3 interpreter
# with its development headers, numpy (Debian's python3-numpy), pybind11 (pybind11-dev) and, for
# its tests, pytest (python3-pytest). The module is built only when all but pytest are found; its
# tests then run under ctest when pytest is found too. Whatever is missing is said once here, and
# the test entries skip by name (tests/python/CMakeLists.txt).
#
# The interpreter is Debian's /usr/bin/python3 when it exists, because that is the one the Debian
# packages install numpy, pybind11 and pytest for (a python3 earlier on PATH, such as a pyenv one,
# usually lacks them); -DPython3_EXECUTABLE=... chooses another. The module, its tests and the
# benchmark all use this one interpreter (KVTWIN_PYTHON).
#
# Sets: KVTWIN_PYTHON_MODULE (ON when the module is built), KVTWIN_PYTHON (the interpreter),
# KVTWIN_PYTEST_FOUND, KVTWIN_PYTHON_MISSING (what is missing, for skip messages).
option(KVTWIN_WITH_PYTHON "Build the Python module kvtwin when pybind11 and numpy are found" ON)

set(KVTWIN_PYTHON_MODULE OFF)
set(KVTWIN_PYTEST_FOUND OFF)
set(KVTWIN_PYTHON "")
set(KVTWIN_PYTHON_MISSING "")

if(NOT KVTWIN_WITH_PYTHON)
  set(KVTWIN_PYTHON_MISSING "KVTWIN_WITH_PYTHON is OFF")
  return()
endif()
# A sanitizer build's libraries need the sanitizer runtime loaded first, which a stock python3 does
# not do: the module is not built there (the asan preset), and its tests skip saying so.
if(KVTWIN_SANITIZE)
  set(KVTWIN_PYTHON_MISSING "a build without sanitizers (KVTWIN_SANITIZE is ON)")
  message(STATUS "kvtwin: the Python module is not built in a sanitizer build")
  return()
endif()

if(NOT DEFINED Python3_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python3_EXECUTABLE /usr/bin/python3 CACHE FILEPATH
      "The Python interpreter the kvtwin module is built for (Debian's, which has python3-numpy)")
endif()
find_package(Python3 COMPONENTS Interpreter OPTIONAL_COMPONENTS Development.Module NumPy)

set(missing "")
if(NOT Python3_Interpreter_FOUND)
  list(APPEND missing "a python3 interpreter")
else()
  set(KVTWIN_PYTHON "${Python3_EXECUTABLE}")
  if(NOT Python3_Development.Module_FOUND)
    list(APPEND missing "the Python headers (python3-dev)")
  endif()
  if(NOT Python3_NumPy_FOUND)
    list(APPEND missing "numpy for ${Python3_EXECUTABLE} (python3-numpy)")
  endif()
  find_package(pybind11 2.6 CONFIG QUIET)
  if(NOT pybind11_FOUND)
    list(APPEND missing "pybind11 (pybind11-dev, python3-pybind11)")
  endif()
  execute_process(COMMAND "${Python3_EXECUTABLE}" -c "import pytest"
                  RESULT_VARIABLE pytest_status OUTPUT_QUIET ERROR_QUIET)
  if(pytest_status EQUAL 0)
    set(KVTWIN_PYTEST_FOUND ON)
  endif()
endif()

if(missing)
  list(JOIN missing ", " KVTWIN_PYTHON_MISSING)
  message(STATUS "kvtwin: the Python module is not built: missing ${KVTWIN_PYTHON_MISSING} (./quickstart installs them)")
else()
  set(KVTWIN_PYTHON_MODULE ON)
  message(STATUS "kvtwin: the Python module is built for ${Python3_EXECUTABLE} (Python ${Python3_VERSION}, "
                 "pybind11 ${pybind11_VERSION})")
  if(NOT KVTWIN_PYTEST_FOUND)
    message(STATUS "kvtwin: pytest not found for ${Python3_EXECUTABLE}: the Python tests will skip (python3-pytest)")
  endif()
endif()
