# The Debian packages (dist/debian/packages.cmake): cpack builds them from this build dir, their files
# and computed Depends are checked, apt-get installs them on this machine, the daemon starts from
# them (systemctl where systemd runs), and a trap purges them (tests/install/packages.sh; root).
# Not in the sanitizer build: its binaries are not what a package ships.
if(NOT FEDGATE_SANITIZE)
  add_test(NAME packages_deb COMMAND ${CMAKE_SOURCE_DIR}/tests/install/packages.sh ${CMAKE_BINARY_DIR})
  set_tests_properties(packages_deb PROPERTIES LABELS "integration;packages" TIMEOUT 900 SKIP_RETURN_CODE 77
    RUN_SERIAL TRUE)
endif()
