# targets.cmake: the CUDA kernel library, its check and bench tools; included by the tree's and the standalone build.
# Expects target nccl_net_api (the net-api headers) and CUDA enabled with CMAKE_CUDA_ARCHITECTURES set.
set(_nns_cuda_dir ${CMAKE_CURRENT_LIST_DIR})

# Warnings: the tree adds -Wall -Wextra (-Werror) for every language, which nvcc does not take as is: hand them to the
# host compiler instead for .cu files.
get_directory_property(_nns_cuda_options COMPILE_OPTIONS)
set(_nns_cuda_wrapped "")
foreach(option IN LISTS _nns_cuda_options)
  list(APPEND _nns_cuda_wrapped $<$<COMPILE_LANGUAGE:CXX>:${option}> $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${option}>)
endforeach()
set_directory_properties(PROPERTIES COMPILE_OPTIONS "${_nns_cuda_wrapped}")

add_library(nns_cuda_kernels STATIC ${_nns_cuda_dir}/src/reduce.cu)
target_include_directories(nns_cuda_kernels PUBLIC ${_nns_cuda_dir}/include)
target_link_libraries(nns_cuda_kernels PUBLIC nccl_net_api CUDA::cudart)
# C++17 for the .cu file: CMake 3.25 knows no CUDA20 flags for nvcc 13.
set_target_properties(nns_cuda_kernels PROPERTIES CUDA_STANDARD 17 CUDA_STANDARD_REQUIRED ON
                                                  POSITION_INDEPENDENT_CODE ON)
# CMAKE_CUDA_ARCHITECTURES "80 90" embeds sm_80 and sm_90 machine code plus their PTX, which newer GPUs JIT-compile.
target_compile_options(nns_cuda_kernels PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-warn-spills>)

add_library(nns_cuda_check STATIC ${_nns_cuda_dir}/check/reduce_check.cc)
target_include_directories(nns_cuda_check PUBLIC ${_nns_cuda_dir}/check)
# The host kernel layer's header-only conversions (nns/coll/float_convert.hpp): the reference rounds as the CPU does.
target_include_directories(nns_cuda_check PRIVATE ${_nns_cuda_dir}/../include)
target_link_libraries(nns_cuda_check PUBLIC nns_cuda_kernels)

add_executable(nns-cuda-reduce-check ${_nns_cuda_dir}/check/check_main.cc)
target_link_libraries(nns-cuda-reduce-check PRIVATE nns_cuda_check)

add_executable(nns-cuda-reduce-bench ${_nns_cuda_dir}/bench/reduce_bench.cc)
target_link_libraries(nns-cuda-reduce-bench PRIVATE nns_cuda_kernels)
