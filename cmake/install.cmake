# cmake/install.cmake — what `cmake --install` puts where, in the GNUInstallDirs
# layout under CMAKE_INSTALL_PREFIX (or --prefix), below DESTDIR when it is set:
#
#   bin/                       kvfs, kvfs-bench
#   LIBDIR/                    libkvfs.so.0 (SONAME, client/lib/libkvfs.map), libkvfs.so, libkvfs.a
#   LIBDIR/pkgconfig/          kvfs.pc
#   LIBDIR/cmake/kvfs/         the CMake package: find_package(kvfs) gives kvfs::kvfs
#                              (shared) and kvfs::kvfs_static
#   include/kvfs/              kvfs.h, kvfs_ioctl.h
#   KVFS_PYTHON_DIR/kvfs/      the Python package (client/python/kvfs)
#   share/man/man{1,3,8}/      kvfs-bench(1), libkvfs(3), kvfs(8) (man/, built with scdoc)
#   share/kvfs/examples/       examples/: fio job files, the C round trip, ...
#
# The build tree stays usable as it is: nothing here changes a target.
include(CMakePackageConfigHelpers)

# STRING, not PATH: cmake makes a relative PATH given with -D absolute
# against the build folder.
set(KVFS_PYTHON_DIR lib/python3/dist-packages CACHE STRING
	"Where the kvfs Python package is installed, relative to the prefix (Debian's directory for /usr) or absolute")
set(KVFS_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/kvfs)

install(TARGETS kvfs kvfs-bench RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS kvfs_shared kvfs_static EXPORT kvfsTargets
	LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
	ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES ${CMAKE_SOURCE_DIR}/include/kvfs/kvfs.h ${CMAKE_SOURCE_DIR}/include/kvfs/kvfs_ioctl.h
	DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/kvfs)

install(EXPORT kvfsTargets NAMESPACE kvfs:: DESTINATION ${KVFS_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/kvfsConfig.cmake.in
	${CMAKE_BINARY_DIR}/kvfsConfig.cmake INSTALL_DESTINATION ${KVFS_CMAKE_DIR})
# SOVERSION 0: every 0.x release keeps the ABI, as the SONAME says.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/kvfsConfigVersion.cmake
	COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_BINARY_DIR}/kvfsConfig.cmake ${CMAKE_BINARY_DIR}/kvfsConfigVersion.cmake
	DESTINATION ${KVFS_CMAKE_DIR})

# kvfs.pc names absolute directories, and the prefix is only known for sure
# when installing (`cmake --install --prefix` overrides the configured one):
# configure_file runs then, with the prefix in force.
set(KVFS_PC_LIBS_PRIVATE "-lnuma -pthread")
if(KVFS_HAVE_CUDA)
	string(APPEND KVFS_PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart_static -ldl -lrt")
endif()
install(CODE "
	set(PROJECT_VERSION \"${PROJECT_VERSION}\")
	set(KVFS_PC_LIBS_PRIVATE \"${KVFS_PC_LIBS_PRIVATE}\")
	set(KVFS_PC_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
	set(KVFS_PC_LIBDIR \"${CMAKE_INSTALL_LIBDIR}\")
	set(KVFS_PC_INCLUDEDIR \"${CMAKE_INSTALL_INCLUDEDIR}\")
	foreach(v KVFS_PC_LIBDIR KVFS_PC_INCLUDEDIR)
		if(NOT IS_ABSOLUTE \"\${\${v}}\")
			set(\${v} \"\\\${prefix}/\${\${v}}\")
		endif()
	endforeach()
	configure_file(\"${CMAKE_SOURCE_DIR}/cmake/kvfs.pc.in\" \"${CMAKE_BINARY_DIR}/kvfs.pc\" @ONLY)
")
install(FILES ${CMAKE_BINARY_DIR}/kvfs.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

install(DIRECTORY ${CMAKE_SOURCE_DIR}/client/python/kvfs DESTINATION ${KVFS_PYTHON_DIR}
	FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)

# Every file under examples/ but its CMakeLists.txt, where it lies there.
file(GLOB_RECURSE KVFS_EXAMPLES CONFIGURE_DEPENDS RELATIVE ${CMAKE_SOURCE_DIR}/examples
	${CMAKE_SOURCE_DIR}/examples/*)
list(REMOVE_ITEM KVFS_EXAMPLES CMakeLists.txt)
foreach(f ${KVFS_EXAMPLES})
	get_filename_component(d ${f} DIRECTORY)
	install(FILES ${CMAKE_SOURCE_DIR}/examples/${f} DESTINATION ${CMAKE_INSTALL_DATADIR}/kvfs/examples/${d})
endforeach()
