// An AF_XDP socket of libxdp's own (not vecflow's AfXdpPort) on queue 0 of an interface, bound
// in copy mode without libxdp's default program: the tests of the steering program bind it
// where the program redirects (its xsks_map), to see the frames and metadata it lifts.
#pragma once

#include <xdp/xsk.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "support/frame_builder.h"
#include "vecflow/xdp_meta.h"

namespace vecflow::test {

class RawXsk {
 public:
  // `frames` buffers of XSK_UMEM__DEFAULT_FRAME_SIZE. ok() says whether the socket is bound.
  RawXsk(const std::string& ifname, uint32_t frames);
  ~RawXsk();
  RawXsk(const RawXsk&) = delete;
  RawXsk& operator=(const RawXsk&) = delete;

  bool ok() const { return xsk_ != nullptr; }
  int fd() const { return xsk_socket__fd(xsk_); }

  // Gives the kernel every buffer to receive into; false if the fill ring would not take them.
  bool fill();

  // The frames received (the metadata in front of each, and its bytes) until `want` came or
  // about a second passed; each buffer goes back to the fill ring once read.
  std::vector<std::pair<vf_xdp_meta, Bytes>> receive(size_t want);

 private:
  uint32_t frames_;
  void* buffer_ = nullptr;
  size_t size_ = 0;
  xsk_umem* umem_ = nullptr;
  xsk_socket* xsk_ = nullptr;
  xsk_ring_prod fq_{}, tx_{};
  xsk_ring_cons cq_{}, rx_{};
};

}  // namespace vecflow::test
