// The appliance file as plain, validated structs.
//
// load_config() is the one place the YAML is read and checked. It returns either a complete
// ApplianceConfig whose every cross-reference holds (port names, interfaces, lcores, schedule
// types the backend supports), or every error it found, each located at file:line:col with
// the key path. The parts of the engine never see YAML; the app hands each its slice.
// configs/reference.yaml documents every key.
#pragma once

#include <cstdint>
#include <expected>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/net.h"
#include "core/queue_owner.h"
#include "core/sched_types.h"

namespace vecflow::config {

// Where a value came from, 1-based as editors count.
struct Location {
  std::string file;
  int line = 0;
  int column = 0;
  bool operator==(const Location&) const = default;
};

struct ConfigError {
  Location where;
  std::string path;  // "ports[1].devargs"
  std::string message;
  // "file:line:col: ports[1].devargs: expected a string"
  std::string to_string() const;
};

// ---- appliance, cpu, dpdk, logging ----------------------------------------------------------

struct ApplianceSection {
  std::string name = "vecflow";
};

enum class CpuProfile : uint8_t { Power, Latency };

struct CpuSection {
  unsigned control = 0;
  // Lcores that run data-plane services. May include the control lcore (one-core boxes): then
  // the control server and the data path share that lcore's service loop.
  std::vector<unsigned> workers;
  // What a data lcore does when its queues run dry (runtime/lcore.h has the trade-offs).
  // power: polls spin_us more, then sleeps until a frame arrives (on its ports' sockets or rx
  // interrupts and its scheduler port's doorbell), or naps up to idle_sleep_max_us when one of
  // them cannot wake it. latency: never sleeps, a core per data lcore at 100 %.
  CpuProfile profile = CpuProfile::Power;
  uint32_t spin_us = 50;  // runtime's kDefaultSpinUs (app/appliance.cc checks they agree)
  uint32_t idle_sleep_max_us = 200;
  // One round of an lcore's services lasting this long is reported as a stall (status,
  // log, metrics): a service is stuck and the flows it serves wait.
  uint32_t stall_after_ms = 250;
};

enum class HugePages { Auto, On, Off };

struct DpdkSection {
  uint32_t memory_mb = 512;
  HugePages hugepages = HugePages::Auto;
  std::string file_prefix = "vecflow";
  std::vector<std::string> eal_args;
  uint32_t mbufs = 16384;  // packet buffers in the shared pool
  // Per-lcore mempool cache. The largest DPDK allows: the rx adapter's open vectors keep up to
  // flow buckets x vector size packets (512 with one worker) in flight, and with a smaller
  // cache each mbuf went back through the pool's ring and came out cold (engine benchmark,
  // 1024 flows: +10 % with 512 over 256).
  uint32_t mbuf_cache = 512;
  // Let DPDK secondary processes (dpdk-dumpcap, dpdk-proc-info) attach: EAL keeps its
  // hugepage memory in files they can map instead of running in-memory. Needs hugepages.
  bool multiprocess = false;
};

enum class LogLevel { Trace, Debug, Info, Warn, Error };

struct LoggingSection {
  LogLevel level = LogLevel::Info;
};

// ---- ports ------------------------------------------------------------------------------------

// What the XDP steering program does with a frame (steering section, and a port's
// other_queues).
enum class SteerActionKind { Pass, Drop, Userspace, Tx, Redirect };

enum class XskMode { Auto, Copy, ZeroCopy };
enum class XdpAttachMode { Auto, Native, Generic };

// A run of rx queues of an interface and who reads them: vecflow's own AF_XDP sockets, or
// DPDK's net_af_xdp PMD. Either way vecflow's steering program decides what is lifted.
struct QueueRange {
  uint16_t first = 0;
  uint16_t count = 1;
  QueueOwner owner = QueueOwner::Vecflow;
};

struct BusyPoll {
  bool enabled = false;
  uint32_t budget = 64;
  uint32_t timeout_us = 20;
};

// The largest L2 header a port receives: Ethernet and two VLAN tags.
inline constexpr uint32_t kMaxL2Header = 14 + 2 * 4;
// Bytes of frame one AF_XDP UMEM frame of `frame_size` holds: what the mbuf's headroom (192,
// io/packet_pool.h) and XDP's (256) leave; io/port_factory.cc checks the two against it.
// Queues DPDK's net_af_xdp owns get 4096-byte buffers of which it keeps 320 (io/port_factory.cc).
constexpr uint32_t afxdp_frame_room(uint32_t frame_size, bool dpdk_owned = false) {
  return dpdk_owned ? 4096 - 320 - 256 : frame_size - 192 - 256;
}
// The buffers one frame may span on vecflow's own AF_XDP sockets (multi-buffer, XDP_USE_SG):
// the kernel's copy-mode transmit takes at most 16 (io/afxdp/afxdp_port.cc). DPDK's net_af_xdp
// (22.11) has no multi-buffer: a frame on its queues is one buffer.
inline constexpr uint32_t kAfxdpBuffersPerFrame = 16;
// The largest MTU an AF_XDP port takes: 25 578 with frame_size 2048, 58 346 with 4096, 3498
// on queues DPDK owns; without multi-buffer (a kernel before 6.6), what one buffer holds.
constexpr uint32_t afxdp_max_mtu(uint32_t frame_size, bool dpdk_owned = false,
                                 bool multi_buffer = true) {
  const uint32_t buffers = dpdk_owned || !multi_buffer ? 1 : kAfxdpBuffersPerFrame;
  return buffers * afxdp_frame_room(frame_size, dpdk_owned) - kMaxL2Header;
}
// Whether a kernel release ("6.1.0-18-amd64", uname -r) has AF_XDP multi-buffer (XDP_USE_SG,
// Linux 6.6).
bool kernel_has_xsk_multi_buffer(std::string_view release);

// The longest name a Linux interface may have (IFNAMSIZ - 1).
inline constexpr size_t kMaxInterfaceName = 15;

struct AfXdpPort {
  std::string interface;
  // The rx queues read. `queues: all` (the file's default) leaves this empty and all_queues
  // set until start-up fills in every rx queue the interface has (resolve_rx_queues).
  std::vector<QueueRange> queues;
  bool all_queues = false;
  // What the XDP program does with frames for user space on rx queues the file leaves
  // unread: Pass or Drop. Unset: the file must read every queue the interface has.
  std::optional<SteerActionKind> other_queues;
  Location queues_where;  // the `queues` key, or the port when the file has none
  XskMode mode = XskMode::Auto;
  XdpAttachMode xdp_mode = XdpAttachMode::Auto;
  BusyPoll busy_poll;
  uint32_t ring_size = 2048;
  uint32_t frame_size = 2048;
};

struct DpdkPort {
  std::string devargs;  // "net_af_packet0,iface=eth2" or a PCI address "0000:03:00.0"
  bool is_pci = false;
  uint16_t queues = 1;
  uint16_t rx_descriptors = 1024;
  uint16_t tx_descriptors = 1024;
  std::string interface;  // the kernel interface named by `iface=` in the devargs, if any
};

// The tag a VLAN port's frames carry: 802.1Q (TPID 0x8100), or 802.1ad (0x88a8, a provider's
// service tag, the outer tag of QinQ).
enum class VlanProto : uint8_t { Dot1q, Dot1ad };

// An 802.1Q VLAN of another port as an L3 interface of its own (router on a stick): frames
// tagged `vlan` on the parent's link are this port's, and what leaves through it is tagged.
// QinQ is a VLAN port of a VLAN port (as Linux stacks VLAN devices): the parent carries the
// outer tag (usually 802.1ad), this port the 802.1Q tag inside it. Its kernel side is the Linux
// VLAN device `interface` on the parent's interface, which vecflowd creates when it is missing
// (and removes at stop) or follows when it exists.
struct VlanPort {
  std::string parent;  // the port whose frames carry the tag: an afxdp or dpdk port, or a
                       // VLAN port of one (QinQ: two tags at most)
  uint16_t vlan = 0;   // VID, 1..4094
  VlanProto proto = VlanProto::Dot1q;
  std::string interface;  // default: "<parent interface>.<vlan>"
};

struct PortConfig {
  std::string name;
  Location where;
  std::optional<unsigned> lcore;  // lcore that polls this port; default: spread over workers
  // The link's MTU, set on the device when vecflowd starts (the kernel interface's for ports
  // on one, else the ethdev's); none: as the device has it.
  std::optional<uint32_t> mtu;
  std::variant<AfXdpPort, DpdkPort, VlanPort> kind;

  bool is_afxdp() const { return std::holds_alternative<AfXdpPort>(kind); }
  bool is_vlan() const { return std::holds_alternative<VlanPort>(kind); }
  // The kernel interface behind the port, if it has one.
  const std::string* kernel_interface() const;
};

// ---- steering ---------------------------------------------------------------------------------

struct SteerAction {
  SteerActionKind kind = SteerActionKind::Userspace;
  std::string redirect_port;  // for Redirect
  bool operator==(const SteerAction&) const = default;
};

struct PortRange {
  uint16_t low = 0;
  uint16_t high = 0;
  bool operator==(const PortRange&) const = default;
};

enum class L3Proto { Ipv4, Ipv6, Arp };

struct SteerMatch {
  std::optional<std::string> port;     // ingress port name
  std::optional<uint16_t> vlan;        // the outer tag's VLAN id
  std::optional<uint16_t> inner_vlan;  // the second tag's (QinQ)
  std::optional<L3Proto> l3;
  std::optional<IpPrefix> src;
  std::optional<IpPrefix> dst;
  std::optional<uint8_t> l4_proto;
  std::optional<PortRange> src_port;
  std::optional<PortRange> dst_port;
};

struct SteerRule {
  std::string name;       // defaults to "rule<N>"
  uint32_t priority = 0;  // higher wins; equal priorities: earlier rule wins
  SteerMatch match;
  SteerAction action;
  Location where;
};

// What vecflowd does when its steering program disappears from an interface (someone ran
// `ip link set dev X xdp off`, or another tool replaced it): put it back, or exit with an
// error so that the service manager restarts the appliance from a clean state.
enum class OnDetach { Reattach, Exit };

struct SteeringSection {
  SteerAction default_action{SteerActionKind::Userspace, {}};
  SteerAction malformed{SteerActionKind::Drop, {}};  // frames the parser rejects
  SteerAction no_socket{SteerActionKind::Pass, {}};  // `userspace` with no AF_XDP socket bound
  bool symmetric_hash = true;
  OnDetach on_detach = OnDetach::Reattach;
  std::vector<SteerRule> rules;
};

// ---- scheduler --------------------------------------------------------------------------------

// Whether a single worker that polls every rx queue runs the pipeline straight on what it
// receives (datapath/direct_path.h) or through the scheduler.
enum class SchedPath { Auto, Scheduled };

struct SchedulerSection {
  SchedBackend backend = SchedBackend::Builtin;
  SchedPath path = SchedPath::Auto;
  std::string device;             // eventdev: "event_dsw0", "event_sw0" (vdev) or a device name
  std::string devargs;            // extra vdev arguments
  std::vector<unsigned> workers;  // lcores that run pipeline workers; default: cpu.workers
  uint16_t vector_size = 64;      // 1 = plain per-packet events
  uint32_t vector_timeout_us = 50;
  // Flow buckets per rx queue: open vectors, and the flow ids the scheduler balances
  // (sched/rx_adapter.h). 0: auto, 8 per pipeline worker.
  uint16_t vector_buckets = 0;
  uint32_t queue_depth = 4096;
  // Packets waiting for one worker beyond which new packets of its flows are dropped
  // (sched_backpressure), so a stalled or overloaded worker cannot take every packet buffer
  // from the others. 0: the buffers the ports do not keep posted for receive (dpdk.mbufs minus
  // fill rings and rx descriptors) / (2 x workers). builtin backend only.
  uint32_t worker_backlog = 0;
  FlowIdSource flow_id = FlowIdSource::Auto;
};

// ---- pipeline ---------------------------------------------------------------------------------

// The match a stage applies to a packet's 5-tuple (acl rules, the mirror stage); absent
// fields match anything.
struct FiveTupleMatch {
  std::optional<IpPrefix> src;
  std::optional<IpPrefix> dst;
  std::optional<uint8_t> l4_proto;
  std::optional<PortRange> src_port;
  std::optional<PortRange> dst_port;
};

// One stage's parameters: a struct its stage type defines next to the stage and reads from
// the file (config/stage_type.h). Held by value; a copy copies the parameters.
class StageParams {
 public:
  virtual ~StageParams() = default;
  virtual std::unique_ptr<StageParams> clone() const = 0;
};

template <typename T>
class TypedStageParams final : public StageParams {
 public:
  explicit TypedStageParams(T v) : value(std::move(v)) {}
  std::unique_ptr<StageParams> clone() const override {
    return std::make_unique<TypedStageParams>(value);
  }
  T value;
};

class AnyStageParams {
 public:
  AnyStageParams() = default;
  template <typename T>
  requires(!std::is_same_v<std::decay_t<T>, AnyStageParams>) AnyStageParams(T v)
      : p_(std::make_unique<TypedStageParams<T>>(std::move(v))) {}
  AnyStageParams(const AnyStageParams& o) : p_(o.p_ ? o.p_->clone() : nullptr) {}
  AnyStageParams(AnyStageParams&&) noexcept = default;
  AnyStageParams& operator=(const AnyStageParams& o) {
    p_ = o.p_ ? o.p_->clone() : nullptr;
    return *this;
  }
  AnyStageParams& operator=(AnyStageParams&&) noexcept = default;

  // The parameters if they are a T, else nullptr.
  template <typename T>
  const T* get_if() const {
    const auto* t = dynamic_cast<const TypedStageParams<T>*>(p_.get());
    return t ? &t->value : nullptr;
  }
  // The parameters, which must be a T (a stage's factory is only given its own type's).
  template <typename T>
  const T& get() const {
    return dynamic_cast<const TypedStageParams<T>&>(*p_).value;
  }

 private:
  std::unique_ptr<StageParams> p_;
};

struct StageType;

struct StageConfig {
  std::string type;  // "route", "acl", ...
  std::string name;  // defaults to the type, "-2" suffixed when repeated
  SchedType sched = SchedType::Atomic;
  bool fuse = false;  // run to completion with the previous stage on the same worker
  Location where;
  // What the type's keys said; read, checked and shown by `kind` (set by the loader).
  AnyStageParams params;
  const StageType* kind = nullptr;
};

// ---- icmp -------------------------------------------------------------------------------------

// The limits of the ICMP errors vecflowd sends (the route stage's, the acl's `reject`):
// Linux's defaults (net.ipv4.icmp_ratelimit, XRLIM_BURST_FACTOR, icmp_msgs_per_sec).
struct IcmpSection {
  uint32_t ratelimit_ms = 1000;  // per destination: one error per this many ms; 0: no limit
  uint32_t burst = 6;            // per destination: errors at once before the limit holds
  uint32_t per_second = 1000;    // of each kind, per lcore; 0: no limit
};

// ---- offload ----------------------------------------------------------------------------------

// Flow offload to XDP (steer/flow_offloader.h): flows the pipeline decided, on ports with a
// steering program, are forwarded by that program from their next frame on. Off by default.
struct OffloadSection {
  bool enabled = false;
  // Entries of each interface's XDP table (its size is fixed when the program loads).
  uint32_t table_size = 16384;
  // An entry no frame used for this long is removed (the flow, if it comes back, is decided
  // again in user space).
  uint32_t idle_timeout_ms = 30000;
  // How often the table is read: idle entries, counters, and the changes of routes,
  // neighbours and rules that take offloaded flows back to user space.
  uint32_t sweep_ms = 200;
};

// ---- control ----------------------------------------------------------------------------------

struct ControlSection {
  std::string socket = "/run/vecflow/control.sock";
  uint32_t socket_mode = 0660;
  std::string group = "vecflow";
  std::string metrics;  // "127.0.0.1:9469"; empty: no metrics endpoint
  std::string capture_dir = "/var/lib/vecflow/capture";
  uint32_t max_request_bytes = 65536;
  uint32_t read_timeout_ms = 5000;
  // Accept `fault-*` commands that break the data path on purpose (a stalled lcore), for
  // tests and lab drills. Off by default: a production box never offers them.
  bool fault_injection = false;
};

// ---- vrfs -------------------------------------------------------------------------------------

// A routing domain of its own (a VRF): its interfaces' packets are routed in its route table,
// apart from every other VRF's, so two tenants may use the same addresses. The ports no VRF
// names are the default VRF's. Routes of the route stage name their VRF (`vrf:`); a route may
// send its packets on to another VRF's table (route leaking, a next hop `vrf:`).
// VRFs, the default one included (ids 0..kMaxVrfs-1: a byte per port, packet and connection,
// and a route table keeps id kMaxVrfs for none, pipeline/vrf.h).
inline constexpr size_t kMaxVrfs = 255;
// The name of the VRF of the ports no VRF names, in routes (`vrf:`) and views.
inline constexpr std::string_view kDefaultVrf = "default";

struct VrfConfig {
  std::string name;
  Location where;
  // The kernel routing table the VRF's routes come from where a route stage follows the
  // kernel (`routes: from-kernel`), as Linux's `ip link add NAME type vrf table N`; 0: none.
  uint32_t table = 0;
  std::vector<std::string> ports;
  // The VRF whose conntrack zone this VRF's connections are tracked in (kDefaultVrf or another
  // VRF's name, whose own zone it is); empty: its own. VRFs that reach each other by route
  // leaks without NAT, their addresses apart, share one so that a connection's replies find it.
  std::string conntrack_zone = {};
  bool operator==(const VrfConfig&) const = default;
};

// ---- the whole file ---------------------------------------------------------------------------

struct ApplianceConfig {
  std::string source;  // file path, or "<embedded demo>"
  std::string hash;    // FNV-1a 64 of the file's bytes, hex; identifies what is running
  ApplianceSection appliance;
  CpuSection cpu;
  DpdkSection dpdk;
  LoggingSection logging;
  std::vector<PortConfig> ports;
  SteeringSection steering;
  SchedulerSection scheduler;
  std::vector<StageConfig> pipeline;
  IcmpSection icmp;
  OffloadSection offload;
  ControlSection control;
  std::vector<VrfConfig> vrfs;

  const PortConfig* find_port(std::string_view name) const;
  // The port whose link carries `port`'s frames: itself, or a VLAN port's parent's link.
  const PortConfig* link_of(const PortConfig& port) const;
  std::optional<uint16_t> port_index(std::string_view name) const;
};

using LoadResult = std::expected<ApplianceConfig, std::vector<ConfigError>>;

class StageTypes;

// Reads and validates an appliance file. `stages`: the stage types the pipeline section may
// use (pipeline/stage_registry.h: StageRegistry::builtin().config_types()).
LoadResult load_config(const std::string& path, const StageTypes& stages);
// The same from text already in memory; `source` names it in error locations.
LoadResult load_config_text(std::string_view text, const std::string& source,
                            const StageTypes& stages);

// Rx queues one afxdp port may read: the entries of the XDP program's socket map.
inline constexpr unsigned kMaxRxQueues = 64;

// Start-up, once the interface's rx queue count is known: gives a port declared `queues: all`
// every rx queue of its interface, and refuses (an error located at the port's `queues`) a
// port that names a queue its interface lacks, or leaves queues unread without saying what
// happens to them (`other_queues`). `port` indexes cfg.ports and names an afxdp port.
std::optional<ConfigError> resolve_rx_queues(ApplianceConfig& cfg, size_t port,
                                             unsigned interface_queues);
// "0", "0-3", "0-1, 4, 6-7": the queues set in `mask` (bit q: queue q), for messages.
std::string queue_list(uint64_t mask);

// Names used in messages and the control protocol.
std::string_view to_string(SteerActionKind k);
std::string_view to_string(XskMode m);

}  // namespace vecflow::config
