# The Debian package: `cpack -G DEB` (or `ninja package`) in the build directory makes
# vecflow_<version>-<release>_<arch>.deb from the install rules in this folder.
#
# Runtime dependencies: dpkg-shlibdeps finds the libraries vecflowd links (libbpf, libxdp,
# yaml-cpp, DPDK's core libraries ...). EAL loads its drivers as plugins from DPDK's PMD
# directory, which shlibdeps cannot see, so the ones an appliance file can ask for without a
# vendor NIC are declared by name below.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME vecflow)
set(CPACK_PACKAGE_VENDOR vecflow)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "packet-forwarding appliance: XDP steering, AF_XDP and DPDK ports, vector scheduler")
set(contents "the daemon vecflowd with its systemd service, the XDP programs")
if(TARGET vecflowctl)
  string(APPEND contents ",\nthe operator CLI vecflowctl with its bash completion")
endif()
set(CPACK_PACKAGE_DESCRIPTION
    "vecflow forwards packets between the ports declared in one YAML appliance file.
An XDP program keeps flows in the kernel, drops, redirects or lifts them to user
space over AF_XDP; DPDK ports of any poll-mode driver join the same path. Packets
are packed into per-flow vectors, spread over worker cores by an event scheduler
and run through a forwarding pipeline (acl, route, neighbour, l2, mirror, count).
.
This package holds ${contents}
and the default appliance file.")

set(VECFLOW_DEB_MAINTAINER "vecflow developers <vecflow@localhost>"
    CACHE STRING "Maintainer field of the Debian package")
set(VECFLOW_DEB_RELEASE 1 CACHE STRING "Debian revision of the package")

# Debug information stays in the build tree; the package carries stripped binaries.
set(CPACK_STRIP_FILES TRUE)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_RELEASE ${VECFLOW_DEB_RELEASE})
set(CPACK_DEBIAN_PACKAGE_MAINTAINER ${VECFLOW_DEB_MAINTAINER})
set(CPACK_DEBIAN_PACKAGE_SECTION net)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)

# Plugins EAL loads at start-up (dpdk.* in the appliance file):
#   mempool-ring   the mempool handler every packet buffer pool uses
#   bus-vdev/pci   virtual devices (devargs: net_af_packet0,...) and PCI NICs (pci: ...)
#   net-af-xdp     DPDK-owned queues of afxdp ports (queues: owner: dpdk)
#   net-af-packet, net-virtio, net-tap, net-pcap, net-ring, net-null, net-vhost
#                  the vdev ports of the examples and the tests; virtio for VM appliances
#   event-dsw/sw   scheduler.backend: eventdev
# Vendor NIC drivers (ixgbe, i40e, ice, mlx5 ...) are recommended, for NICs bound to vfio-pci.
set(VECFLOW_DPDK_ABI 23)
set(plugins mempool-ring bus-vdev bus-pci net-af-xdp net-af-packet net-virtio net-tap net-pcap
            net-ring net-null net-vhost event-dsw event-sw)
list(TRANSFORM plugins PREPEND librte-)
list(TRANSFORM plugins APPEND ${VECFLOW_DPDK_ABI})
list(JOIN plugins ", " plugin_depends)
# systemd: the unit, systemd-sysusers and systemd-tmpfiles run by postinst; procps: the
# unit's ExecReload= sends SIGHUP with /bin/kill.
set(CPACK_DEBIAN_PACKAGE_DEPENDS "systemd, procps, ${plugin_depends}")
set(CPACK_DEBIAN_PACKAGE_RECOMMENDS
    "librte-net-e1000-${VECFLOW_DPDK_ABI}, librte-net-ixgbe${VECFLOW_DPDK_ABI}, librte-net-i40e${VECFLOW_DPDK_ABI}, librte-net-ice${VECFLOW_DPDK_ABI}, librte-net-mlx5-${VECFLOW_DPDK_ABI}, librte-net-vmxnet3-${VECFLOW_DPDK_ABI}")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "xdp-tools, bpftool, dpdk")

set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${CMAKE_CURRENT_SOURCE_DIR}/debian/conffiles ${CMAKE_CURRENT_SOURCE_DIR}/debian/postinst
    ${CMAKE_CURRENT_SOURCE_DIR}/debian/prerm ${CMAKE_CURRENT_SOURCE_DIR}/debian/postrm)
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION TRUE)

include(CPack)
