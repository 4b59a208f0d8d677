# CTest fixture of tst_gguf_runtime: installs llama.cpp's Node.js binding, pinned by package.json
# and package-lock.json beside this file, into DEST with npm (its cache, ~/.npm, keeps the
# download between local runs; CI starts from none). Only the linux-x64 CPU build is installed
# (--omit=optional drops the CUDA and Vulkan builds, ~600 MB) and no install script runs (the
# binding's own would look for a GPU and download or build llama.cpp).
#   cmake -DNPM=/usr/bin/npm -DSRC=tests/export/gguf -DDEST=build/node-llama-cpp -P InstallRuntime.cmake
foreach(f package.json package-lock.json probabilities.mjs)
  configure_file(${SRC}/${f} ${DEST}/${f} COPYONLY)
endforeach()
set(stamp ${DEST}/node_modules/.latmix-installed)
if(EXISTS ${stamp} AND NOT ${SRC}/package-lock.json IS_NEWER_THAN ${stamp})
  message(STATUS "node-llama-cpp already installed in ${DEST}")
  return()
endif()
set(ENV{NODE_LLAMA_CPP_SKIP_DOWNLOAD} true)
execute_process(COMMAND ${NPM} ci --omit=optional --ignore-scripts --no-audit --no-fund
                WORKING_DIRECTORY ${DEST} RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "npm ci in ${DEST} failed (${rc}): tst_gguf_runtime needs node-llama-cpp 3.21.1 from the npm "
                      "registry. Check the network or npm's proxy settings, or run the other tests with ctest -E gguf_runtime.")
endif()
file(TOUCH ${stamp})
