# Debian packages from the install components, with CPack's DEB generator: in a build dir,
# `cpack -G DEB` (tools/package.sh) writes
#   fedgated               the gateway daemon, fedgatectl, the systemd unit, the hugepages helper,
#                          man pages, the example config in /etc/fedgate, bash completion
#   fedgate-node           a compute node's command line and sidecar, its man page and completion
#   libfedgate-client      the client library (shared)
#   libfedgate-client-dev  its headers, fedgate-client.pc and CMake package
# Depends are what dpkg-shlibdeps finds the binaries linked against (Debian package names,
# computed at packaging time, never listed by hand); the -dev package depends on its library.
# tests/install/packages.sh builds, checks, installs and starts them.

set(FEDGATE_PACKAGE_MAINTAINER "fedgate developers <fedgate@localhost>" CACHE STRING
  "The Maintainer field of the Debian packages")
# The unit goes where Debian's own packages put theirs, whatever FEDGATE_SYSTEMD_UNIT_DIR says for a
# plain `cmake --install` (unless that is absolute: then there).
if(IS_ABSOLUTE "${FEDGATE_SYSTEMD_UNIT_DIR}")
  set(fedgate_package_unit_dir "${FEDGATE_SYSTEMD_UNIT_DIR}")
else()
  set(fedgate_package_unit_dir /lib/systemd/system)
endif()

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME fedgate)
set(CPACK_PACKAGE_VENDOR fedgate)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "${FEDGATE_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "kernel-bypass gateway for federated learning across networks")
# Installed as /usr with DESTDIR, so every path the install code computes (the unit's ExecStart, the
# /etc of prefix /usr) is the final one and the unit's absolute directory stays inside the package.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_CUSTOM_INSTALL_VARIABLES "FEDGATE_PACKAGE_UNIT_DIR=${fedgate_package_unit_dir}")
set(CPACK_STRIP_FILES ON)

set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL fedgated fedgate-node client client-dev)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # NAME_VERSION-RELEASE_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)  # libfedgate-client's shlibs, for whoever links it
set(CPACK_DEBIAN_ENABLE_COMPONENT_DEPENDS ON)  # client-dev depends on client (same version)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)

set(CPACK_DEBIAN_FEDGATED_PACKAGE_NAME fedgated)
set(CPACK_COMPONENT_FEDGATED_DESCRIPTION
  "fedgate gateway daemon (DPDK) and its control tool fedgatectl
 fedgated proxies mapped ports between the parties of a federated-learning job (full NAT, both
 directions) and resolves compute processes' DMA (RDMA/RoCE v2) addresses across them, on DPDK
 cores. Includes fedgatectl, the systemd unit fedgated.service, its hugepages helper, man pages,
 bash completion and an example configuration in /etc/fedgate.")
# The unit is installed, neither enabled nor started: the config must be written first.
set(CPACK_DEBIAN_FEDGATED_PACKAGE_CONTROL_EXTRA ${CMAKE_CURRENT_LIST_DIR}/fedgated/conffiles
  ${CMAKE_CURRENT_LIST_DIR}/fedgated/postinst ${CMAKE_CURRENT_LIST_DIR}/fedgated/prerm
  ${CMAKE_CURRENT_LIST_DIR}/fedgated/postrm)

set(CPACK_DEBIAN_FEDGATE-NODE_PACKAGE_NAME fedgate-node)
set(CPACK_DEBIAN_FEDGATE-NODE_PACKAGE_SECTION utils)
set(CPACK_COMPONENT_FEDGATE-NODE_DESCRIPTION
  "fedgate compute-node tool: register, resolve, connect, expose and forward
 fedgate-node registers a compute process with its fedgate gateway, resolves other parties'
 processes through it, connects to them by process ID, and (expose, forward) joins programs that
 cannot change through local TCP ports.")

set(CPACK_DEBIAN_CLIENT_PACKAGE_NAME libfedgate-client${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_CLIENT_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_CLIENT_DESCRIPTION
  "fedgate client library
 Lets a compute process resolve and connect to processes of other parties through its fedgate
 gateway (RDMA verbs or TCP).")
set(CPACK_DEBIAN_CLIENT-DEV_PACKAGE_NAME libfedgate-client-dev)
set(CPACK_DEBIAN_CLIENT-DEV_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_CLIENT-DEV_DEPENDS client)
set(CPACK_COMPONENT_CLIENT-DEV_DESCRIPTION
  "fedgate client library: development files
 Headers (C++ and C API), fedgate-client.pc and the CMake package (find_package(fedgate)).")

include(CPack)
