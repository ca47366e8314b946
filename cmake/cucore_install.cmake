include(CMakePackageConfigHelpers)

install(TARGETS cucore EXPORT cucoreTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/cucore DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT cucoreTargets NAMESPACE cucore:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cucore)

configure_package_config_file(cmake/cucoreConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/cucoreConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cucore)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/cucoreConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cucoreConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/cucoreConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/cucore_find_hiredis.cmake
              ${PROJECT_SOURCE_DIR}/cmake/cucore_find_zstd.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/cucore)

# The .pc file names its prefix relative to its own directory, so a staged or moved install works.
file(RELATIVE_PATH CUCORE_PC_TO_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
configure_file(cmake/cucore.pc.in ${CMAKE_CURRENT_BINARY_DIR}/cucore.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/cucore.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
