// Fixtures of the port tests: a veth pair in a namespace of its own, raw frames in and out of
// an interface, the XDP program that owns the XSKMAP (libxdp's default program or a metadata
// fixture standing in for the steering program), and the packet pool of the test binary.
// Everything a fixture makes is removed by its destructor, also when an assertion fails.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <rte_mbuf.h>

#include "io/packet_pool.h"
#include "support/frame_builder.h"
#include "support/lab.h"

namespace vecflow::test {

// EAL (support/eal_env.h) and one PacketPool for the whole test binary: 16384 buffers of
// 2048 bytes, as the appliance's defaults.
PacketPool& test_pool();

// A namespace with a veth pair: `a` is the port's side, `b` the peer's. Both up, `queues` rx
// and tx queues each, GRO on (so the veth accepts XDP_REDIRECTed frames).
class VethLab {
 public:
  explicit VethLab(int queues = 1);
  ~VethLab();
  VethLab(const VethLab&) = delete;
  VethLab& operator=(const VethLab&) = delete;
  bool ok() const { return ok_; }
  const std::string& ns() const { return ns_; }
  static constexpr const char* a = "vpa0";
  static constexpr const char* b = "vpb0";
  // Runs a shell command inside the namespace.
  int run(const std::string& command) const;

 private:
  std::string ns_;
  bool ok_ = false;
};

// An AF_PACKET socket bound to an interface of the calling thread's namespace. It does not see
// its own transmissions.
class RawSocket {
 public:
  explicit RawSocket(const std::string& ifname);
  ~RawSocket();
  RawSocket(const RawSocket&) = delete;
  RawSocket& operator=(const RawSocket&) = delete;
  bool ok() const { return fd_ >= 0; }
  bool send(const Bytes& frame);
  // The next frame, or nullopt after `timeout_ms` without one.
  std::optional<Bytes> recv(int timeout_ms);
  // Frames until `count` arrived or `timeout_ms` passed since the last one.
  std::vector<Bytes> recv_n(size_t count, int timeout_ms);

 private:
  int fd_ = -1;
};

// The XDP program of an interface in a test, and its XSKMAP.
class TestXdp {
 public:
  enum class Kind {
    LibxdpDefault,  // libxdp's xsk_def_prog: redirect to the queue's socket, no metadata
    MetaFixture,    // meta_redirect.bpf.c: vf_xdp_meta in front of every parsed frame
  };
  TestXdp(int ifindex, Kind kind);
  ~TestXdp();
  TestXdp(const TestXdp&) = delete;
  TestXdp& operator=(const TestXdp&) = delete;
  bool ok() const { return map_fd_ >= 0; }
  const std::string& error() const { return error_; }
  int map_fd() const { return map_fd_; }
  // Detaches now (the destructor then does nothing).
  void detach();

 private:
  int ifindex_;
  int map_fd_ = -1;
  void* skel_ = nullptr;
  std::string error_;
};

// XDP program id attached to `ifindex` (0: none).
uint32_t attached_xdp_prog(int ifindex);

// A UDP/IPv4 frame from 192.0.2.2:sport to 198.51.100.2:dport with `payload` bytes.
Bytes udp_frame(uint16_t sport, uint16_t dport = 9, size_t payload = 18);

// The bytes of an mbuf (all segments).
Bytes mbuf_bytes(const rte_mbuf* m);
// A pool mbuf holding `frame`.
rte_mbuf* mbuf_of(PacketPool& pool, const Bytes& frame);

// Path of a built helper program (trafgen, the virtio-user peer).
std::string built_tool(const std::string& name);

// A shell command running in the background as a child of the test (`exec`ed, so the child is
// the command itself). The destructor stops it (SIGTERM) and reaps it.
class Background {
 public:
  explicit Background(const std::string& command);
  ~Background();
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  bool ok() const { return pid_ > 0; }
  // Sends SIGTERM and waits; returns the exit status (or -1).
  int stop();

 private:
  int pid_ = -1;
};

}  // namespace vecflow::test
