# cmake --install: libsqlq (its static archives), the public headers, the sqlq
# program and the benchmark sqlq-bench beside it (which `sqlq bench` runs), a
# CMake package (find_package(sqlq) gives sqlq::sqlq) and a
# pkg-config file (sqlq.pc); with SQLQ_PACKAGE also the man page, bash
# completion, systemd unit and config file, and the .deb (CPack). See
# docs/installing.md.
#
# Components: "runtime" (the programs and what runs them), "dev" (library,
# headers, CMake and pkg-config files), "debug" (the programs' split-off debug
# info; not in the .deb).

include(CMakePackageConfigHelpers)

# libsqlq is static: a program links each layer's archive, and what they
# link (the client libraries, fmt, cctz, threads).
set(SQLQ_INSTALL_LIBS sqlq_lib sqlq_core sqlq_engine_shared ${SQLQ_ENGINES})
set_target_properties(sqlq_lib PROPERTIES EXPORT_NAME sqlq)
set_target_properties(sqlq_core PROPERTIES EXPORT_NAME core)
set_target_properties(sqlq_engine_shared PROPERTIES EXPORT_NAME engine_shared)
foreach(engine ${SQLQ_ENGINES})
  string(REPLACE "sqlq_" "" short ${engine})
  set_target_properties(${engine} PROPERTIES EXPORT_NAME engine_${short})
endforeach()

install(TARGETS ${SQLQ_INSTALL_LIBS} EXPORT sqlqTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/sqlq
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} COMPONENT dev)

set(SQLQ_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/sqlq)
install(EXPORT sqlqTargets NAMESPACE sqlq:: DESTINATION ${SQLQ_CMAKE_DIR}
  COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/sqlqConfig.cmake.in
  ${PROJECT_BINARY_DIR}/sqlqConfig.cmake INSTALL_DESTINATION ${SQLQ_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sqlqConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sqlqConfig.cmake
  ${PROJECT_BINARY_DIR}/sqlqConfigVersion.cmake
  DESTINATION ${SQLQ_CMAKE_DIR} COMPONENT dev)

# sqlq.pc. The archives are static, so their dependencies are in Requires
# and Libs (not .private): plain `pkg-config --libs sqlq` links. The prefix
# is found from the file's own place, so an install moved by DESTDIR or
# --prefix still works.
set(SQLQ_PC_REQUIRES "sqlite3 fmt")
set(SQLQ_PC_ENGINE_LIBS "-lsqlq_sqlite")
if(SQLQ_WITH_POSTGRES)
  string(APPEND SQLQ_PC_REQUIRES " libpq")
  string(APPEND SQLQ_PC_ENGINE_LIBS " -lsqlq_postgres")
endif()
if(SQLQ_WITH_MYSQL)
  string(APPEND SQLQ_PC_REQUIRES " libmariadb")
  string(APPEND SQLQ_PC_ENGINE_LIBS " -lsqlq_mysql")
endif()
get_filename_component(SQLQ_CCTZ_LIBDIR ${CCTZ_LIBRARY} DIRECTORY)
file(RELATIVE_PATH SQLQ_PC_TO_PREFIX
  ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" SQLQ_PC_TO_PREFIX "${SQLQ_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/sqlq.pc.in
  ${PROJECT_BINARY_DIR}/sqlq.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/sqlq.pc
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)

set(SQLQ_PROGRAMS sqlq sqlq-bench)
if(NOT SQLQ_PACKAGE)
  install(TARGETS ${SQLQ_PROGRAMS} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
    COMPONENT runtime)
  return()
endif()

# --- SQLQ_PACKAGE: what a distribution package adds ---

# Each program stripped, its debug info in PROGRAM.debug (found by gdb
# through the .gnu_debuglink it leaves, from <prefix>/lib/debug/<bindir>/).
set(SQLQ_STRIPPED_FILES)
foreach(program ${SQLQ_PROGRAMS})
  set(stripped ${PROJECT_BINARY_DIR}/stripped/${program})
  add_custom_command(OUTPUT ${stripped} ${stripped}.debug
    COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/stripped
    COMMAND ${CMAKE_OBJCOPY} --only-keep-debug --compress-debug-sections=zlib
            $<TARGET_FILE:${program}> ${stripped}.debug
    COMMAND ${CMAKE_OBJCOPY} --strip-debug --strip-unneeded
            --add-gnu-debuglink=${stripped}.debug $<TARGET_FILE:${program}>
            ${stripped}
    DEPENDS ${program}
    COMMENT "Splitting ${program}'s debug info off")
  list(APPEND SQLQ_STRIPPED_FILES ${stripped} ${stripped}.debug)
  install(PROGRAMS ${stripped} DESTINATION ${CMAKE_INSTALL_BINDIR}
    COMPONENT runtime)
  install(FILES ${stripped}.debug
    DESTINATION lib/debug${CMAKE_INSTALL_FULL_BINDIR} COMPONENT debug)
endforeach()

# sqlq(1): help2man from `sqlq --help`, `sqlq --version` and, for the
# server's settings, `sqlq serve --help` (cmake/man_include.cmake), so the
# page says what the program does.
find_program(HELP2MAN help2man REQUIRED)
set(SQLQ_MAN ${PROJECT_BINARY_DIR}/man/sqlq.1)
add_custom_command(OUTPUT ${SQLQ_MAN}.gz
  COMMAND ${CMAKE_COMMAND} -DSQLQ=$<TARGET_FILE:sqlq>
          -DIN=${PROJECT_SOURCE_DIR}/packaging/sqlq.h2m
          -DOUT=${PROJECT_BINARY_DIR}/man/sqlq.h2m
          -P ${PROJECT_SOURCE_DIR}/cmake/man_include.cmake
  COMMAND ${HELP2MAN} --no-info --section=1
          --name=durable\ queues\ in\ SQL\ tables
          --include=${PROJECT_BINARY_DIR}/man/sqlq.h2m
          --output=${SQLQ_MAN} $<TARGET_FILE:sqlq>
  COMMAND gzip -9nf ${SQLQ_MAN}
  DEPENDS sqlq ${PROJECT_SOURCE_DIR}/packaging/sqlq.h2m
          ${PROJECT_SOURCE_DIR}/cmake/man_include.cmake
  COMMENT "Writing the man page sqlq(1)")
add_custom_target(sqlq_package_files ALL
  DEPENDS ${SQLQ_STRIPPED_FILES} ${SQLQ_MAN}.gz)

# The archives without their debug info (a package of the library, not of
# its debugging): 110 MB less.
install(CODE "
  file(GLOB archives \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}/libsqlq*.a\")
  foreach(a \${archives})
    execute_process(COMMAND ${CMAKE_STRIP} --strip-debug \${a} COMMAND_ERROR_IS_FATAL ANY)
  endforeach()" COMPONENT dev)
install(FILES ${SQLQ_MAN}.gz DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
  COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/sqlq.bash-completion
  DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions
  RENAME sqlq COMPONENT runtime)

# The service: `sqlq serve` as a dynamic user, its SQLite database in the
# state directory, settings in the config file.
set(SQLQ_CONF ${CMAKE_INSTALL_FULL_SYSCONFDIR}/sqlq/sqlq.conf)
configure_file(${PROJECT_SOURCE_DIR}/packaging/sqlq.service.in
  ${PROJECT_BINARY_DIR}/packaging/sqlq.service @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/packaging/sqlq.service
  DESTINATION lib/systemd/system COMPONENT runtime)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/sqlq.conf
  DESTINATION ${CMAKE_INSTALL_FULL_SYSCONFDIR}/sqlq COMPONENT runtime)

# The .deb: `cpack --config build/package/CPackConfig.cmake` (or
# `cmake --build --preset package --target package`). One package, sqlq,
# with the runtime and dev components; the debug info stays out of it.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sqlq)
set(CPACK_PACKAGE_VENDOR "sqlq")
set(CPACK_PACKAGE_CONTACT "sqlq maintainers <sqlq@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "durable queues in SQL tables")
set(CPACK_PACKAGE_DESCRIPTION
  "sqlq keeps work queues, rings, rotations and schedules in tables of an
SQLite, PostgreSQL or MariaDB/MySQL database. This package has the sqlq
command line program, its HTTP server (sqlq serve, run by the sqlq systemd
unit), the benchmark sqlq-bench (sqlq bench), and libsqlq with its C++
headers, CMake package and pkg-config file.")
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime dev)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION database)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# What a C++ program building against libsqlq needs besides this package
# (the CMake package finds them with find_dependency, sqlq.pc names them).
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libsqlite3-dev, libfmt-dev, libcctz-dev, nlohmann-json3-dev, libpq-dev, libmariadb-dev")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
  ${PROJECT_SOURCE_DIR}/packaging/debian/conffiles
  ${PROJECT_SOURCE_DIR}/packaging/debian/postinst
  ${PROJECT_SOURCE_DIR}/packaging/debian/prerm
  ${PROJECT_SOURCE_DIR}/packaging/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
