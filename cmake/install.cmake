# `cmake --install BUILD [--prefix P]` and the .deb (`cpack -G DEB` in BUILD):
# the sluice binary in P/bin, and what it reads at run time, the shipped model,
# in P/share/sluice/models/sluice-k3-mini, where the installed binary looks for
# its default model (src/cli/main.cpp). The chat page is inside the binary.
include(GNUInstallDirs)
install(TARGETS sluice RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${CMAKE_SOURCE_DIR}/models/sluice-k3-mini
        DESTINATION ${CMAKE_INSTALL_DATADIR}/sluice/models)
install(FILES ${CMAKE_SOURCE_DIR}/README.md DESTINATION ${CMAKE_INSTALL_DOCDIR})

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME sluice)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "Exact Mixture-of-Experts inference with experts streamed from disk, and an OpenAI-compatible server")
set(CPACK_PACKAGE_CONTACT "sluice developers <sluice@localhost>")
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)  # the release tree's binary carries debug info; the package does not
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)  # Depends: from the libraries the binary links (dpkg-shlibdeps)
include(CPack)
