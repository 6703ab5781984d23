// A port is where packets enter and leave user space: an AF_XDP port (a kernel interface
// whose selected flows the XDP program lifts) or a DPDK port of any PMD. Both hand the rest
// of the engine the same thing: bursts of rte_mbuf* carrying the fields core/packet.h lists.
//
// Threading: each rx queue is polled by exactly one lcore, and each tx queue is used by
// exactly one lcore at a time; the burst calls take no lock. An rx queue and the tx queue of
// the same index may be used by two different lcores (their rings are independent).
// start()/stop(), enable_kernel_path() and status() run on the control thread.
//
// Buffers: every port receives into and transmits from the appliance's one PacketPool
// (io/packet_pool.h), so an mbuf received on any port can leave through any other without a
// copy. Where a copy cannot be avoided (a chained mbuf leaving through AF_XDP), the port makes
// it once and counts it in TxQueueCounters::copies.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/counter.h"
#include "core/drop_reason.h"
#include "core/error.h"
#include "core/ids.h"
#include "core/net.h"
#include "core/queue_owner.h"
#include "io/hardware.h"

struct rte_mbuf;

namespace vecflow {

class KernelPath;
class FlowHashRewrite;
class VlanDemux;

enum class LinkState : uint8_t { Unknown, Down, Up };

// Whether received frames land in our buffers directly (AF_XDP zero-copy, any DPDK PMD writing
// into our mbufs) or the kernel copies them there (AF_XDP copy mode).
enum class CopyMode : uint8_t { ZeroCopy, Copy };
// What the queue's poller is doing now: polling, or asleep on the queue's wake-up descriptor.
enum class WakeMode : uint8_t { Polling, Interrupt };

std::string_view to_string(LinkState s) noexcept;
std::string_view to_string(CopyMode m) noexcept;
std::string_view to_string(WakeMode m) noexcept;

// Counters of one rx queue, written only by the lcore polling it. The members are in
// RxQueueCounts, unpadded, so that the ports part's table of them (control/parts/ports_part.cc)
// can count them by size; RxQueueCounters gives each queue its own cache lines.
struct RxQueueCounts {
  Counter packets;  // handed to the caller of rx_burst
  Counter bytes;
  Counter sleeps;                     // times arm_wakeup() handed out a descriptor
  std::atomic<bool> sleeping{false};  // between such an arm and its disarm (status: interrupt)
  // Frames the port received but did not hand on (malformed frames it dropped) and buffers it
  // could not get (nombuf: a fill ring or descriptor ring left short).
  DropCounters drops;
};
struct alignas(64) RxQueueCounters : RxQueueCounts {};

// Counters of one tx queue, written only by the lcore transmitting on it (unpadded in
// TxQueueCounts, as RxQueueCounts).
struct TxQueueCounts {
  Counter packets;  // accepted by tx_burst
  Counter bytes;
  Counter refused;    // offered to tx_burst but not taken (ring full); the caller drops them
  Counter copies;     // packets copied into a fresh buffer because they could not go as they were
  Counter to_kernel;  // accepted by to_kernel()
  Counter to_kernel_bytes;
};
struct alignas(64) TxQueueCounters : TxQueueCounts {};

// One queue as the status shows it. `index` is the q of rx_burst/tx_burst.
struct QueueStatus {
  uint16_t index = 0;
  uint16_t device_queue = 0;  // the queue id on the device (NIC/veth queue, ethdev queue)
  QueueOwner owner = QueueOwner::Vecflow;
  std::string served_by;  // "xsk fd 12", "net_af_xdp_vf0q2", "net_ring0"
  CopyMode copy = CopyMode::ZeroCopy;
  WakeMode wake = WakeMode::Polling;
  bool can_sleep = false;  // offers a wake-up descriptor (AF_XDP socket, DPDK rx interrupt)
  bool busy_poll = false;
  uint64_t rx_packets = 0, rx_bytes = 0, sleeps = 0;
  uint64_t tx_packets = 0, tx_bytes = 0, tx_refused = 0, tx_copies = 0;
  uint64_t to_kernel = 0, to_kernel_bytes = 0;
  // Pool buffers lent to the kernel by this queue's AF_XDP socket right now (fill ring and
  // frames not yet read back, transmissions not yet completed). Constant when idle: the fill
  // ring is kept full. 0 for queues without a socket of vecflow's.
  uint64_t kernel_buffers = 0;
  std::vector<std::pair<DropReason, uint64_t>> drops;  // non-zero reasons only
};

struct PortStatus {
  std::string name;
  std::string kind;
  PortId id{};
  LinkState link = LinkState::Unknown;
  MacAddress mac;
  std::string device;       // interface name, or DPDK device name
  std::string kernel_path;  // TAP interface of the exception path, empty if none
  std::vector<QueueStatus> queues;
  // Drops the device or the kernel reported for the port as a whole (frames that never reached
  // user space: AF_XDP rx ring full, fill ring empty; DPDK imissed, rx_nombuf, ierrors).
  std::vector<std::pair<DropReason, uint64_t>> device_drops;
  // The driver's own counters, as it names them (DPDK xstats, AF_XDP XDP_STATISTICS).
  std::vector<std::pair<std::string, uint64_t>> device_stats;
  // Facts about the device worth showing ("vhost.ring": "packed", "xdp.program": "17").
  std::vector<std::pair<std::string, std::string>> device_info;
};

class Port {
 public:
  Port(std::string name, PortId id);
  virtual ~Port();
  Port(const Port&) = delete;
  Port& operator=(const Port&) = delete;

  const std::string& name() const noexcept { return name_; }
  PortId id() const noexcept { return id_; }
  // "afxdp" or "dpdk".
  virtual std::string_view kind() const noexcept = 0;

  virtual uint16_t rx_queue_count() const noexcept = 0;
  virtual uint16_t tx_queue_count() const noexcept = 0;

  // Receives up to `n` packets from rx queue `q` into `pkts`. Every returned mbuf has
  // m->port == id(), its flow id in m->hash.rss and a reset PacketMeta (core/packet.h).
  virtual uint16_t rx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept = 0;

  // Transmits up to `n` packets on tx queue `q`; returns how many the port took (it owns and
  // frees those). The caller keeps the rest and decides whether to retry or drop them.
  // With n == 0 the port only reclaims buffers of completed transmissions, which an idle
  // transmitter should do now and then so that its last packets' buffers return to the pool.
  virtual uint16_t tx_burst(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept = 0;

  // Asks the device or the kernel (may cost a system call: not for the data path).
  virtual LinkState link_state() const noexcept = 0;
  // The link state as of the last refresh_link(): what the tx path reads before each burst,
  // a relaxed load. Unknown until the first refresh.
  LinkState cached_link() const noexcept { return link_.load(std::memory_order_relaxed); }
  // Control thread, a few times a second: reads link_state() into the cache. Returns the new
  // state when it changed, nothing otherwise.
  std::optional<LinkState> refresh_link() noexcept;

  virtual Result<void> start() = 0;
  virtual void stop() noexcept = 0;

  // ---- implemented here or with a default: a test double overrides only what it uses ----

  // The port's MAC address (the interface's, or the DPDK device's).
  virtual MacAddress mac() const noexcept { return {}; }
  // The MTU of the port's link, read now (core/port_mtu.h): the kernel interface's for AF_XDP
  // ports and DPDK ports on a kernel interface, else the ethdev's; 0 when the device says
  // nothing. Control thread (may read sysfs).
  virtual uint32_t device_mtu() const { return 0; }

  // Sleeping on rx queue `q` (runtime/service.h's arm_wakeup contract, per queue): called by
  // the service polling `q` on its own lcore once the lcore has been idle for cpu.spin_us.
  // Arms the queue's wake-up and returns a descriptor that becomes
  // readable (POLLIN) when packets arrive, or -1 if the queue cannot wake anyone (the lcore
  // then keeps napping). Every successful arm is paired with one disarm_wakeup(q) after the
  // sleep, on the same lcore, before the next rx_burst(q).
  virtual int arm_wakeup(uint16_t q) noexcept;
  virtual void disarm_wakeup(uint16_t q) noexcept;

  // The exception path: hands packets to the kernel stack (Verdict::Kernel). Like tx_burst it
  // returns how many it took; the caller drops the rest (DropReason::NO_KERNEL_PATH when the
  // port has none). Uses tx queue `q`'s counters; the same single-lcore rule applies.
  virtual uint16_t to_kernel(uint16_t q, rte_mbuf** pkts, uint16_t n) noexcept;
  // Creates the exception path: a TAP interface `tap_name` (default "vfk<id>-<name>", cut to
  // 15 characters) with the port's MAC, one queue per tx queue. Packets handed to it arrive in
  // the kernel as if received on that TAP; the kernel accepts those for its own addresses
  // (weak host model) and answers through its normal routes (io/kernel_path.h). Call before
  // start(); the TAP lives as long as the port.
  Result<void> enable_kernel_path(std::string tap_name = {});
  const KernelPath* kernel_path() const noexcept { return kernel_.get(); }

  // Snapshot for the control plane: per-queue counters and modes, device drops and stats.
  virtual PortStatus status() const;
  // What the device is (`vecflowctl hardware`), read now; control thread only.
  virtual PortHardware hardware() const { return {}; }
  // How received frames get their flow hash (io/rx_classify.h): whether anything reads it
  // (`needed`: else a frame without one from the NIC or XDP gets none, and is not hashed), and
  // the rewrite every received burst goes through (nullptr: none). Control thread, before any
  // lcore polls the port; `rewrite` outlives the port's polling. Both real ports take them;
  // test doubles that parse nothing may ignore them.
  virtual void set_flow_hash(bool needed, const FlowHashRewrite* rewrite) noexcept {
    (void)needed;
    (void)rewrite;
  }

  // The port's VLAN sub-interfaces (io/vlan/vlan_port.h): its rx bursts hand each frame
  // tagged with one of their VLANs to it, untagged and with its port id, and drop a tagged
  // frame none of them claims (vlan_unknown). Control thread, also while lcores poll the port
  // (a reload adds its first VLAN): vlans() is published before the bursts' own copy, so that
  // a burst whose frames were handed out is also charged frame by frame. `demux` outlives
  // the polling. Both real ports take it; a port's own is in vlans().
  virtual void set_vlans(const VlanDemux* demux) noexcept {
    __atomic_store_n(&vlans_, demux, __ATOMIC_RELEASE);
  }
  const VlanDemux* vlans() const noexcept { return __atomic_load_n(&vlans_, __ATOMIC_ACQUIRE); }

  // Queues 0 .. counted_rx_queues() - 1 (tx: counted_tx_queues()) have counters.
  const RxQueueCounters& rx_counters(uint16_t q) const noexcept { return rx_counters_[q]; }
  const TxQueueCounters& tx_counters(uint16_t q) const noexcept { return tx_counters_[q]; }
  uint16_t counted_rx_queues() const noexcept { return counted_rx_; }
  uint16_t counted_tx_queues() const noexcept { return counted_tx_; }

 protected:
  // Sizes the counter arrays; derived ports call it once their queue counts are known, before
  // any burst runs. Never called while lcores run.
  void size_counters(uint16_t rx_queues, uint16_t tx_queues);
  RxQueueCounters& rx_counter(uint16_t q) noexcept { return rx_counters_[q]; }
  TxQueueCounters& tx_counter(uint16_t q) noexcept { return tx_counters_[q]; }
  // Fills the generic part of a status: identity, link, mac, counters of every queue.
  PortStatus base_status() const;

 private:
  std::string name_;
  PortId id_;
  std::unique_ptr<RxQueueCounters[]> rx_counters_;
  std::unique_ptr<TxQueueCounters[]> tx_counters_;
  uint16_t counted_rx_ = 0;
  uint16_t counted_tx_ = 0;
  std::unique_ptr<KernelPath> kernel_;
  std::atomic<LinkState> link_{LinkState::Unknown};
  const VlanDemux* vlans_ = nullptr;
};

}  // namespace vecflow
