# Installation and the Debian package. Included at the end of the top-level
# CMakeLists.txt; docs/packaging.md is the user's side of this file.
#
# One tree, installed in two layouts:
#
#   cmake --install BUILD [--prefix P]   relative to the prefix: P/bin,
#                                        P/etc/oncegate, P/lib/systemd/system,
#                                        P/share/...; the unit runs with
#                                        DynamicUser (no user is created)
#   cpack -G DEB (or the `package`       the Debian layout: /usr/bin,
#   target), in the build directory      /etc/oncegate (a conffile),
#                                        /lib/systemd/system (the unit runs
#                                        as the system user `oncegate` that
#                                        postinst creates), the copyright,
#                                        changelog and lintian files
#
# Files under the prefix are the default component (`Unspecified`) and go
# into both; a new install() rule elsewhere in the tree lands in the package
# too, under /usr. What differs is in two components: `prefix` (only
# `cmake --install`) and `deb` (only CPack, EXCLUDE_FROM_ALL).

include(GNUInstallDirs)

set(ONCEGATE_PACKAGING_DIR ${PROJECT_SOURCE_DIR}/packaging)
set(ONCEGATE_STAGE_DIR ${PROJECT_BINARY_DIR}/packaging)
file(MAKE_DIRECTORY ${ONCEGATE_STAGE_DIR})

# gzip -9n: what lintian wants of man pages and changelogs (no name, no
# time stamp, so the same input gives the same bytes). At configure time,
# which runs again when a source changes.
function(oncegate_gzip source output)
  execute_process(COMMAND gzip -9nc ${source} OUTPUT_FILE ${output}
                  RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "gzip ${source} failed: ${rc}")
  endif()
  set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY
               CMAKE_CONFIGURE_DEPENDS ${source})
endfunction()

# The unit, from packaging/oncegate.service.in; `user` is the identity lines.
function(oncegate_unit output bindir sysconf docdir user)
  set(ONCEGATE_BINDIR ${bindir})
  set(ONCEGATE_SYSCONF ${sysconf})
  set(ONCEGATE_DOCDIR ${docdir})
  set(ONCEGATE_UNIT_USER "${user}")
  configure_file(${ONCEGATE_PACKAGING_DIR}/oncegate.service.in ${output}
                 @ONLY)
endfunction()

# -- Both layouts: the programs, shared data, documentation -----------------
install(TARGETS oncegate RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(PROGRAMS tools/oncegate-drill tools/test_upstream.py
        DESTINATION ${CMAKE_INSTALL_BINDIR} OPTIONAL)
install(PROGRAMS scripts/cluster-certs.sh DESTINATION ${CMAKE_INSTALL_BINDIR}
        RENAME oncegate-cluster-certs)
install(DIRECTORY tools/oncegate_drill
        DESTINATION ${CMAKE_INSTALL_DATADIR}/oncegate/python
        PATTERN __pycache__ EXCLUDE
        PATTERN *.pyc EXCLUDE)
install(DIRECTORY cluster-config/
        DESTINATION ${CMAKE_INSTALL_DATADIR}/oncegate/cluster-config)
# Monitoring to import: docs/packaging.md.
install(FILES packaging/prometheus/oncegate.rules.yml
        DESTINATION ${CMAKE_INSTALL_DATADIR}/oncegate/prometheus)
install(FILES packaging/grafana/oncegate-dashboard.json
        DESTINATION ${CMAKE_INSTALL_DATADIR}/oncegate/grafana)
install(FILES README.md packaging/debian/copyright
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(DIRECTORY docs/ DESTINATION ${CMAKE_INSTALL_DOCDIR})
foreach(page oncegate oncegate-drill oncegate-cluster-certs test_upstream.py)
  oncegate_gzip(${ONCEGATE_PACKAGING_DIR}/man/${page}.1
                ${ONCEGATE_STAGE_DIR}/${page}.1.gz)
  install(FILES ${ONCEGATE_STAGE_DIR}/${page}.1.gz
          DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
endforeach()

# -- `cmake --install` only: configuration and unit under the prefix --------
oncegate_unit(${PROJECT_BINARY_DIR}/oncegate.service
  ${CMAKE_INSTALL_FULL_BINDIR} ${CMAKE_INSTALL_FULL_SYSCONFDIR}/oncegate
  ${CMAKE_INSTALL_FULL_DOCDIR}
  "# No user is created by `cmake --install`: systemd allocates one per start.
DynamicUser=yes")
install(FILES packaging/oncegate.ini
        DESTINATION ${CMAKE_INSTALL_SYSCONFDIR}/oncegate COMPONENT prefix)
install(FILES ${PROJECT_BINARY_DIR}/oncegate.service
        DESTINATION lib/systemd/system COMPONENT prefix)

# -- The Debian package only (paths from the package's root) ----------------
oncegate_unit(${ONCEGATE_STAGE_DIR}/deb/oncegate.service
  /usr/bin /etc/oncegate /usr/share/doc/oncegate
  "# The system user and group that the package's postinst created.
User=oncegate
Group=oncegate")
# The package is built from oncegate's own tree (a native package, no
# Debian revision): its changelog is changelog.gz, not changelog.Debian.gz.
oncegate_gzip(${ONCEGATE_PACKAGING_DIR}/debian/changelog
              ${ONCEGATE_STAGE_DIR}/changelog.gz)
install(FILES packaging/oncegate.ini DESTINATION etc/oncegate
        COMPONENT deb EXCLUDE_FROM_ALL)
install(FILES ${ONCEGATE_STAGE_DIR}/deb/oncegate.service
        DESTINATION lib/systemd/system COMPONENT deb EXCLUDE_FROM_ALL)
install(FILES ${ONCEGATE_STAGE_DIR}/changelog.gz
        DESTINATION usr/share/doc/oncegate COMPONENT deb EXCLUDE_FROM_ALL)
# Stripped as dh_strip does: symbols, and the .comment and .note sections
# (the build id stays). Runs after the default component is staged.
install(CODE "execute_process(COMMAND \"${CMAKE_STRIP}\"
                --remove-section=.comment --remove-section=.note
                \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/usr/bin/oncegate\"
                RESULT_VARIABLE rc)
              if(NOT rc EQUAL 0)
                message(FATAL_ERROR \"strip oncegate: \${rc}\")
              endif()"
        COMPONENT deb EXCLUDE_FROM_ALL)
install(FILES packaging/debian/lintian-overrides
        DESTINATION usr/share/lintian/overrides RENAME oncegate
        COMPONENT deb EXCLUDE_FROM_ALL)

# The changelog's newest entry must name this version (lintian reads it as
# the package's history; the test packaging.deb checks it too).
file(STRINGS ${ONCEGATE_PACKAGING_DIR}/debian/changelog changelog_top
     LIMIT_COUNT 1)
if(NOT changelog_top MATCHES "^oncegate \\(${PROJECT_VERSION}\\) ")
  message(WARNING "packaging/debian/changelog: the newest entry is not "
                  "version ${PROJECT_VERSION} (${changelog_top}); add one")
endif()

# -- CPack ------------------------------------------------------------------
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME oncegate)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_VENDOR "The oncegate authors")
set(CPACK_PACKAGE_CONTACT "oncegate maintainers <maintainers@oncegate.dev>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "webhook idempotency gateway: each signal executed at most once")
set(CPACK_PACKAGE_DESCRIPTION
"oncegate sits in front of an order pipeline and deduplicates webhooks
(TradingView alerts, Standard Webhooks, GitHub): the first request of a key
is accepted or forwarded once, a retry gets 409 and a reused key with
another payload 422, decided by one actor per key and committed to SQLite
before anyone is answered. Several nodes replicate every decision with Raft
over mutual TLS.

This package ships the node with a hardened systemd unit running as the
system user oncegate, the failover drill runner, the cluster certificate
helper, Prometheus alert rules and a Grafana dashboard.")
# Staged from "/" so that /etc and /lib/systemd stay where Debian wants
# them; the default component goes under /usr (see the top of this file).
set(CPACK_PACKAGING_INSTALL_PREFIX /)
set(CPACK_INSTALL_CMAKE_PROJECTS
    "${PROJECT_BINARY_DIR};${PROJECT_NAME};Unspecified;/usr"
    "${PROJECT_BINARY_DIR};${PROJECT_NAME};deb;/")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)   # oncegate_VERSION_ARCH.deb
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The maintainer scripts call adduser; the drill and the test upstream are
# Python; oncegate-cluster-certs runs the openssl tool.
set(ONCEGATE_DEB_DEPENDS "adduser, python3, openssl")
find_program(ONCEGATE_DPKG_SHLIBDEPS dpkg-shlibdeps)
if(ONCEGATE_DPKG_SHLIBDEPS)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  # Without dpkg-dev: the runtime packages of what the binary links
  # (Debian 12), as dpkg-shlibdeps finds them.
  string(APPEND ONCEGATE_DEB_DEPENDS
    ", libc6 (>= 2.34), libstdc++6 (>= 12), libgcc-s1 (>= 3.0)"
    ", libcaf-core0.17 (>= 0.17.6), libcaf-io0.17 (>= 0.17.6)"
    ", libcaf-openssl0.17 (>= 0.17.6)"
    ", libsqlite3-0 (>= 3.36.0), libssl3 (>= 3.0.0)"
    ", libboost-json1.81.0 (>= 1.81.0), libspdlog1.10, libfmt9 (>= 9.1.0)"
    ", libraft2 (>= 0.15.0), libuv1 (>= 1.4.2)")
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "${ONCEGATE_DEB_DEPENDS}")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${ONCEGATE_PACKAGING_DIR}/debian/conffiles
    ${ONCEGATE_PACKAGING_DIR}/debian/postinst
    ${ONCEGATE_PACKAGING_DIR}/debian/prerm
    ${ONCEGATE_PACKAGING_DIR}/debian/postrm)
# 0755 scripts, 0644 conffiles and md5sums, whatever the checkout's modes.
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# `package_source`: the tree without builds and VCS data.
set(CPACK_SOURCE_GENERATOR TGZ)
set(CPACK_SOURCE_IGNORE_FILES "/\\\\.git/" "/build[^/]*/" "__pycache__"
    "/data/")
include(CPack)
