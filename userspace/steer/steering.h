// XdpSteering: vecflow's XDP steering on the kernel interfaces of its afxdp ports. At start
// it compiles the steering section per interface, loads one instance of bpf/steer.bpf.c per
// interface with those rules already in its maps, removes a stale vecflow program a crashed
// run left behind, and attaches with libxdp: through the multi-program dispatcher where the
// kernel allows it (so other XDP programs can share the interface), else as the interface's
// single program; native mode unless the port asks for generic. It detaches on stop.
//
// What other parts take from it: the AF_XDP socket map of each interface (AfXdpPort inserts
// its sockets, keyed by rx queue), the path of the BPF object (DPDK's net_af_xdp `xdp_prog=`),
// and the counters (control plane).
//
// Thread safety: one control thread owns it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "config/config.h"
#include "core/error.h"
#include "steer/offload_table.h"
#include "steer/program.h"
#include "steer/xmit_drops.h"

namespace vecflow::steer {

// An interface that runs the steering program: an afxdp port.
struct SteerPort {
  std::string name;       // vecflow port name (rules match on it)
  std::string interface;  // kernel interface
  config::XdpAttachMode mode = config::XdpAttachMode::Auto;
  // False when DPDK's net_af_xdp owns queues of the interface: DPDK 22.11 loads and attaches
  // the object itself (`xdp_prog=`, refusing an interface that already has a program). Then
  // start() only clears stale vecflow programs from the interface, and adopt() fills the
  // instance DPDK attached once its port has started.
  bool attach = true;
  RxQueuePlan queues{};  // the rx queues the port reads, and what becomes of the others
};

struct SteerSetup {
  config::SteeringSection steering;
  std::vector<SteerPort> ports;
  // The kernel interface of every port that has one, by port name: redirect targets.
  std::map<std::string, std::string, std::less<>> interfaces;
  // Entries of each loaded program's offload table (offload.table_size); an instance DPDK
  // loaded (adopt()) keeps its object's default.
  uint32_t offload_entries = SteerProgram::Limits{}.offload_entries;
};

// The steering slice of the appliance file.
SteerSetup steer_setup(const config::ApplianceConfig& cfg);

struct SteerInterface {
  std::string port;
  std::string interface;
  uint32_t ifindex = 0;
  uint32_t prog_id = 0;
  bool dispatcher = false;  // libxdp multi-program dispatcher; false: the single program
  bool generic = false;     // generic (skb) mode; false: native
  bool adopted = false;     // attached by DPDK's net_af_xdp, filled by adopt()
  // What watch() last found: the program runs on the interface, is gone (nothing there, or
  // only other programs), or another single program took the interface.
  enum class State : uint8_t { Attached, Missing, Replaced } state = State::Attached;
  uint64_t detaches = 0;    // times watch() found the program gone
  uint64_t reattaches = 0;  // times watch() put it back
};

class XdpSteering {
 public:
  // Attaches to every port of `setup`, or to none: on error whatever was attached is
  // detached again, and the error names the port.
  static Result<std::unique_ptr<XdpSteering>> start(const SteerSetup& setup);
  ~XdpSteering();
  XdpSteering(const XdpSteering&) = delete;
  XdpSteering& operator=(const XdpSteering&) = delete;

  // Detaches from every interface. Idempotent.
  void stop() noexcept;

  // Takes over the steering program DPDK's net_af_xdp attached to a port declared with
  // `attach = false`, and installs the rules in it. Until then that interface passes every
  // frame to the kernel (an unconfigured program does).
  Result<void> adopt(std::string_view port);

  // Replaces the rules on every interface, each atomically (see SteerProgram::install).
  // Per-rule counters restart with the new set.
  Result<void> replace_rules(const config::SteeringSection& steering);

  // Checks that the program still runs on every interface (something outside vecflowd may
  // have detached or replaced it) and applies steering.on_detach: `reattach` puts the same
  // program back (maps, rules and AF_XDP sockets included, so lifting resumes at once) unless
  // another program took the interface, which it leaves alone and reports; `exit` returns an
  // error naming the interface. A few system calls per interface: the control thread calls
  // it a few times a second.
  Result<void> watch();

  const std::vector<SteerInterface>& interfaces() const noexcept { return status_; }
  // The XSKMAP of a port's interface, -1 for a port without steering. Valid until stop().
  int xsks_map_fd(std::string_view port) const noexcept;
  // With xmit_drops: what the port's interface refused of the frames XDP handed it.
  Result<SteerCounters> counters(std::string_view port) const;
  // The offload table of a port's interface, nullptr for a port without steering. Valid until
  // stop(); the same control thread.
  OffloadTable* offload(std::string_view port) noexcept;
  // Summed over every interface; per-rule counters add up by rule id.
  Result<SteerCounters> counters() const;

  // The BPF object file for DPDK's net_af_xdp `xdp_prog=`: $VECFLOW_BPF_DIR/steer.bpf.o when
  // set, else the build tree's object when it exists, else the installed one under
  // /usr/lib/vecflow/bpf. steer_nometa.bpf.o instead of steer.bpf.o on a kernel that refuses
  // XDP metadata (kernel_allows_xdp_metadata()).
  static std::string bpf_object_path();

  // Removes every vecflow steering program from an interface (stale instances of a crashed
  // run); returns how many. Programs of others are left alone.
  static Result<int> remove_stale(uint32_t ifindex);

  struct Attached;

 private:
  XdpSteering() = default;
  Result<void> attach(const SteerSetup& setup, const SteerPort& port);
  Result<SteerCounters> counters(const Attached& a) const;
  // Counts what the kernel loses of the frames a's program redirects (XmitDrops).
  void watch_devmap(const Attached& a);

  SteerSetup setup_;
  std::unique_ptr<XmitDrops> xmit_drops_;  // nullptr where the kernel refused it
  std::vector<std::unique_ptr<Attached>> attached_;
  std::vector<SteerInterface> status_;
};

// Routes libbpf's and libxdp's messages into the "steer" logger. Idempotent.
void route_bpf_logs();

}  // namespace vecflow::steer
