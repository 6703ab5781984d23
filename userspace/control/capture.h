// `vecflowctl capture`: pcapng captures of a port, written under control.capture_dir.
//
// The capture itself, the copies the data path makes and the file they are written to, is
// hooks/pcapng_capture.h's PcapngCapture; here, on the control thread, is the rest: checking the
// request, compiling the filter, draining each capture into its file, stopping at a packet
// count or a duration, and the list of captures. The rx/tx hook points belong to another part;
// it offers them through the PacketTap interface, and the `capture` command exists only when
// one is given.
//
// Files are pcapng (readable by tcpdump -r, Wireshark, tshark), one interface block per
// capture named after the vecflow port, nanosecond timestamps, the direction in each packet's
// flags.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "api/registry.h"
#include "control/server.h"
#include "core/error.h"
#include "hooks/pcapng_capture.h"

struct rte_bpf;

namespace vecflow::control {

// Implemented by the part that owns the rx/tx hook points.
class PacketTap {
 public:
  virtual ~PacketTap() = default;
  // From now on, offers every burst of `port` in the directions the capture wants to
  // capture->capture(), filed under `port`.
  virtual Result<void> attach(PortId port, std::shared_ptr<PcapngCapture> capture) = 0;
  // Stops offering to `capture`; returns once no worker can still be inside its capture().
  virtual void detach(const PcapngCapture* capture) noexcept = 0;
};

struct CaptureRequest {
  std::string port;
  uint8_t directions = kCaptureRx | kCaptureTx;
  uint64_t count = 0;     // stop after this many packets; 0: no limit
  double duration_s = 0;  // stop after this long; 0: no limit
  std::string filter;     // pcap filter expression; empty: everything
  uint32_t snaplen = 0;   // 0: kDefaultSnaplen
  std::string file;       // name under capture_dir; empty: chosen
};

class CaptureManager {
 public:
  // Captures at once. Each holds a ring and a buffer pool; a handful is what an operator
  // follows, and it bounds the memory captures can take.
  static constexpr size_t kMaxCaptures = 4;
  // Copies queued between two drains of the control thread. At kDrainInterval this absorbs
  // 4096 packets / 10 ms, 400 kpps, before copies are counted as lost.
  static constexpr unsigned kRingSize = 4096;
  static constexpr std::chrono::milliseconds kDrainInterval{10};
  static constexpr uint32_t kDefaultSnaplen = 262144;  // what tcpdump keeps by default

  // `ports` are the names of the appliance's ports, in PortId order.
  CaptureManager(ControlServer& server, PacketTap& tap, std::string capture_dir,
                 std::vector<std::string> ports);
  ~CaptureManager();  // stops every capture, closing its file

  Result<Json> start(const CaptureRequest& request);
  Result<Json> stop(std::optional<uint64_t> id);  // no id: all
  Json list() const;
  // Whether some capture runs (flow offload then keeps every flow in user space, in sight).
  bool active() const noexcept;

  // `capture` (start/stop/list) and the capture families.
  void register_commands(Registry& registry);
  // The ports after a reload added or removed some (names by PortId, "" for none).
  void set_port_names(std::vector<std::string> ports) { ports_ = std::move(ports); }

 private:
  struct Capture;
  void drain();
  void finish(Capture& c, std::string_view why);
  void schedule_drain();

  ControlServer& server_;
  PacketTap& tap_;
  std::string dir_;
  std::vector<std::string> ports_;
  std::vector<std::unique_ptr<Capture>> captures_;  // running and finished
  uint64_t next_id_ = 1;
  std::unique_ptr<ScheduledCall> drain_call_;
};

// Compiles a pcap filter expression for Ethernet frames into a DPDK BPF program the data path
// runs on mbufs; the message says where the expression is wrong.
Result<rte_bpf*> compile_capture_filter(const std::string& expression, uint32_t snaplen);

}  // namespace vecflow::control
