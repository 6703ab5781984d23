// Frames XDP redirected to an interface that the kernel then lost (bpf/xmit_drops.bpf.c says
// where the kernel reports them). The steering program counts an offloaded or redirected frame
// when it hands it over; these are the ones of them that never left by the egress interface,
// counted per interface from the moment start() attached: a redirect the kernel refused as the
// program returned (for the devmaps watch_devmap() names), or a bulk transmit the driver refused
// (in vecflowd's network namespace).
//
// How exact: the kernel reports every frame lost in either place, so the count is exact for
// what goes through the devmap (offload entries and `redirect` rules). Frames a driver accepts
// and loses later (a full queue of the peer's) are the driver's own counters' (`ip -s link`,
// `ethtool -S`); XDP_TX (egress = ingress) does not go through the devmap and is not seen.
//
// Threading: the control thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "core/error.h"
#include "vecflow/xmit_abi.h"

struct xmit_drops_bpf;
struct bpf_link;

namespace vecflow::steer {

class XmitDrops {
 public:
  // Loads the counter for the calling thread's network namespace and attaches it.
  static Result<std::unique_ptr<XmitDrops>> start();
  ~XmitDrops();
  XmitDrops(const XmitDrops&) = delete;
  XmitDrops& operator=(const XmitDrops&) = delete;

  // Counts the redirect errors of the devmap `map_fd` (a steering program's).
  Result<void> watch_devmap(int map_fd);
  // Totals over every CPU for interface `ifindex` (zeros if it lost none).
  vf_xmit_drops of(uint32_t ifindex) const noexcept;

 private:
  XmitDrops() = default;
  xmit_drops_bpf* skel_ = nullptr;
  std::array<bpf_link*, 2> links_{};
};

}  // namespace vecflow::steer
