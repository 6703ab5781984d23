// trafgen's second engine: the kernel's XDP live-frames mode. BPF_PROG_RUN with
// BPF_F_TEST_XDP_LIVE_FRAMES runs an XDP program `repeat` times on copies of one frame, in
// batches, and transmits every copy the program returns XDP_TX for out of the interface named
// as ingress (`xdp_md.ingress_ifindex`): for a veth, to its peer. No socket, no skb, no copy
// from user space per frame: several Mpps of 64 B frames from one core here, ten times the
// AF_PACKET TX ring (trafgen.cc's header has the figures and the limits). xdp_live.bpf.c writes
// each frame's flow, sequence number, send stamp and checksums, so that the frames are those of the
// AF_PACKET sender and `trafgen recv` reads them unchanged.
#pragma once

#include <atomic>
#include <cstdint>
#include <expected>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "frame.h"

namespace vecflow::trafgen {

// The program loaded for one stream of frames out of interface `ifindex`: `flows` flows from
// `first_flow`, laid out by `spec` as build_flow_frame() lays them out.
class XdpLiveFrames {
 public:
  // Loads the program (needs root). Frames larger than a page less the kernel's head- and
  // tailroom (3408 B on Linux 6.18 x86-64) cannot be sent this way: the kernel refuses them
  // when they are run.
  static std::expected<XdpLiveFrames, std::string> load(const FrameSpec& spec, uint32_t flows,
                                                        uint32_t first_flow, int ifindex);
  XdpLiveFrames(XdpLiveFrames&&) noexcept;
  XdpLiveFrames& operator=(XdpLiveFrames&&) noexcept;
  ~XdpLiveFrames();

  // Attaches the program to the loopback interface of this namespace (generic XDP, through a
  // link that goes with the process), where it passes every frame. The kernel adds the program
  // of a BPF_PROG_RUN to its XDP dispatcher as the run starts and removes it as the run ends,
  // each time rewriting the dispatcher and waiting for an RCU grace period: ~25 ms per run
  // here, whatever its length. A program already in the dispatcher skips both, and a run then
  // costs ~15 us plus its frames. Fails when loopback has an XDP program of its own.
  std::expected<void, std::string> hold_in_dispatcher();
  // Sends the next `frames` frames (one BPF_PROG_RUN, batches of 64). A signal interrupts it;
  // frames_run() then says how far it got.
  std::expected<void, std::string> send(uint32_t frames);
  // The next frame as the program writes it, without sending it (BPF_PROG_RUN without live
  // frames): what the tests compare with build_flow_frame(). `recycled`: the program writes
  // it over these bytes instead of the prebuilt frame's, as over a copy a receiver changed.
  std::expected<std::vector<uint8_t>, std::string> next_frame(
      std::span<const uint8_t> recycled = {});
  // Frames the program wrote so far (each one sent unless the interface refused it).
  uint64_t frames_run() const;
  // A frame's send stamp is CLOCK_MONOTONIC plus this: CLOCK_REALTIME as it ran at load(),
  // the clock `trafgen recv` reads (a step of the real-time clock after load() is not in it).
  uint64_t stamp_offset_ns() const;

 private:
  struct State;
  explicit XdpLiveFrames(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

struct XdpLiveOptions {
  std::string dev;
  uint32_t flows = 1;
  uint32_t first_flow = 0;
  double rate = 0;  // packets per second; 0 = as fast as possible
  double burst_us = 50;
  uint64_t count = 0;   // 0: until duration
  double duration = 0;  // seconds; 0: until count
};

struct XdpLiveResult {
  uint64_t sent = 0;
  bool held = false;            // hold_in_dispatcher() succeeded
  uint64_t runs = 0;            // BPF_PROG_RUN calls
  uint64_t dev_tx_dropped = 0;  // what the interface counted as dropped meanwhile
  double seconds = 0;
};

// Sends as `trafgen send --engine xdp-live`, with the program held in the dispatcher where it
// can be: unpaced, in runs of up to 256k frames; paced (`rate`), in runs of the frames due
// within `burst_us` (at least one), sleeping until each run is due. Stops early when `stop`
// becomes true.
std::expected<XdpLiveResult, std::string> send_xdp_live(const FrameSpec& spec,
                                                        const XdpLiveOptions& opt,
                                                        const std::atomic<bool>& stop);

}  // namespace vecflow::trafgen
