# Installs the CMake package (find_package(nccl_net_sdk)), the pkg-config files (nccl-net-sdk.pc for plugins, nns.pc
# for the C API) and the reference plugins.
include(CMakePackageConfigHelpers)
set(NNS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/nccl_net_sdk)
install(EXPORT nccl_net_sdkTargets NAMESPACE nccl_net_sdk:: DESTINATION ${NNS_CMAKE_DIR})
configure_package_config_file(cmake/nccl_net_sdkConfig.cmake.in
  ${PROJECT_BINARY_DIR}/nccl_net_sdkConfig.cmake INSTALL_DESTINATION ${NNS_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/nccl_net_sdkConfigVersion.cmake
  COMPATIBILITY SameMajorVersion ARCH_INDEPENDENT)
install(FILES ${PROJECT_BINARY_DIR}/nccl_net_sdkConfig.cmake ${PROJECT_BINARY_DIR}/nccl_net_sdkConfigVersion.cmake
  DESTINATION ${NNS_CMAKE_DIR})
# Relocatable: the prefix is found relative to the .pc file, so an install can be moved.
file(RELATIVE_PATH NNS_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
string(REGEX REPLACE "/$" "" NNS_PC_TO_PREFIX "${NNS_PC_TO_PREFIX}")  # "../../" (CMake 3.25): no "//include"
configure_file(cmake/nccl-net-sdk.pc.in ${PROJECT_BINARY_DIR}/nccl-net-sdk.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/nccl-net-sdk.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
# The same from the build tree, without installing: nccl-net-sdk-uninstalled.pc beside it points at the sources, and
# pkg-config prefers an X-uninstalled.pc to X.pc in the same directory by itself (PKG_CONFIG_PATH=<build dir>).
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/nccl-net-sdk-uninstalled.pc @ONLY CONTENT [=[srcdir=@PROJECT_SOURCE_DIR@/net-api
includedir=${srcdir}/include

Name: nccl-net-sdk
Description: @PROJECT_DESCRIPTION@ (headers and header-only C++17 SDK), from the build tree
Version: @PROJECT_VERSION@
Cflags: -I${includedir} -fvisibility=hidden
Libs: -Wl,--version-script=${srcdir}/share/plugin-exports.map
]=])
# The collective engine's C API (nns/nns.h, libnns.so): nns.pc beside it, for `pkg-config --cflags --libs nns`
# (CMake: nccl_net_sdk::nns). The library's run path is the consumer's to set (-Wl,-rpath or LD_LIBRARY_PATH).
if(TARGET nns)
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/nns.pc @ONLY CONTENT [=[prefix=${pcfiledir}/@NNS_PC_TO_PREFIX@
includedir=${prefix}/@CMAKE_INSTALL_INCLUDEDIR@
libdir=${prefix}/@CMAKE_INSTALL_LIBDIR@

Name: nns
Description: the nccl-net-sdk collective engine's C API (nns/nns.h)
Version: @PROJECT_VERSION@
Cflags: -I${includedir}
Libs: -L${libdir} -lnns
]=])
  install(FILES ${PROJECT_BINARY_DIR}/nns.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
  file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/nns-uninstalled.pc @ONLY CONTENT [=[libdir=@PROJECT_BINARY_DIR@/lib

Name: nns
Description: the nccl-net-sdk collective engine's C API (nns/nns.h), from the build tree
Version: @PROJECT_VERSION@
Cflags: -I@PROJECT_SOURCE_DIR@/collectives/include -I@PROJECT_SOURCE_DIR@/net-api/include
Libs: -L${libdir} -lnns
]=])
endif()

# The reference plugins, beside the tools: the tools look for a plugin named in NCCL_NET_PLUGIN (or -p) in ../lib
# first, and nccl-net-bench and the collective engine default to socket. Each is installed when it was built.
foreach(plugin socket ib ucx)
  if(TARGET nccl-net-${plugin})
    install(TARGETS nccl-net-${plugin} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
  endif()
endforeach()
