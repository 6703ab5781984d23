// The data path of the appliance, built from one ApplianceConfig:
//
//   ports (AF_XDP sockets in the steering program's XSKMAP, DPDK PMDs)
//     -> RxAdapter per polling lcore (same-flow vectors, NEW events to the first stage)
//     -> Scheduler (one queue per pipeline group, plus egress when a stage is ordered)
//     -> Worker per worker lcore (PipelineHandler runs the group, forwards or finishes)
//     -> TxAdapter per worker (own tx queue on every port; kernel verdicts through the
//        ingress port's exception path)
//
// or, when one worker lcore polls every rx queue (scheduler.path: auto, the default), the
// direct path: ports -> DirectPath (the pipeline run on each poll's bursts) -> TxAdapter, with
// no scheduler, rx adapter or vectors (direct_path.h says why nothing is lost).
//
// Placement. Pipeline workers run on scheduler.workers (default cpu.workers). A port's rx
// queues are polled on its `lcore` when the file gives one, else spread round-robin over the
// worker lcores; every lcore that polls some queue has one RxAdapter (one scheduler producer).
// Each worker transmits on its own tx queue of every port (tx queues are single-writer), so a
// port needs at least as many tx queues as there are workers.
//
// Accounting: every packet a port delivers to user space is counted rx by the RxAdapter of
// the lcore that received it and ends tx, to_kernel or dropped under one reason in the
// OutcomeTable row of the lcore that decided it, charged to its ingress port.
//
// Lifetime (control thread): create() before the runtime launches its lcores; the services
// are placed on the lcores by create(). drain() after the lcores stopped: enqueues the rx
// adapters' partial vectors and runs the workers on the calling thread until the scheduler
// holds no event, so every received packet gets its final outcome (shutdown_flush for what
// cannot leave). The destructor stops the ports and frees everything.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/config.h"
#include "core/accounting.h"
#include "core/error.h"
#include "core/offload_feed.h"
#include "core/port_mtu.h"
#include "datapath/direct_path.h"
#include "datapath/pipeline_handler.h"
#include "hooks/hook_table.h"
#include "io/hardware.h"
#include "io/packet_pool.h"
#include "io/port.h"
#include "io/port_factory.h"
#include "io/vlan/vlan_demux.h"
#include "pipeline/pipeline.h"
#include "runtime/runtime.h"
#include "sched/rx_adapter.h"
#include "sched/scheduler.h"
#include "sched/tx_adapter.h"
#include "sched/worker.h"
#include "steer/steering.h"

namespace vecflow {

class DataPath {
 public:
  static Result<std::unique_ptr<DataPath>> create(const config::ApplianceConfig& cfg,
                                                  Runtime& runtime, steer::XdpSteering& steering,
                                                  OutcomeTable& outcomes);
  ~DataPath();
  DataPath(const DataPath&) = delete;
  DataPath& operator=(const DataPath&) = delete;

  // After every lcore stopped: flushes what is in flight to its final outcome. Returns the
  // events still held when `timeout_ms` ran out (0 when drained).
  uint64_t drain(unsigned timeout_ms = 1000) noexcept;

  // False when the file declares no port (then nothing below exists).
  bool has_ports() const noexcept { return !ports_.empty(); }
  // The direct path, or nullptr when packets go through the scheduler (then scheduler(),
  // rx_adapters() and workers() are the path).
  const DirectPath* direct() const noexcept { return direct_.get(); }
  unsigned direct_lcore() const noexcept { return direct_lcore_; }
  const std::vector<std::unique_ptr<Port>>& ports() const noexcept { return ports_; }
  // The ports' MTUs as the data path uses them (core/port_mtu.h).
  const PortMtuTable& mtus() const noexcept { return *mtus_; }
  // Control thread: reads every port's device_mtu() into mtus(), logging a change; at start
  // and on every link event (the MTU of an interface changes with an RTM_NEWLINK).
  void refresh_mtus();
  PacketPool& pool() noexcept { return *pool_; }
  Pipeline& pipeline() noexcept { return *pipeline_; }
  // What the workers offer to flow offload (core/offload_feed.h).
  OffloadFeed& offload_feed() noexcept { return *offload_; }
  // Rx/tx hook points of every port queue, run by the adapters (captures use them).
  HookTable& hooks() noexcept { return *hooks_; }
  // nullptr on the direct path.
  const sched::Scheduler* scheduler() const noexcept { return sched_.get(); }
  const std::vector<std::shared_ptr<sched::RxAdapter>>& rx_adapters() const noexcept { return rx_; }
  const std::vector<std::shared_ptr<sched::Worker>>& workers() const noexcept { return workers_; }
  const std::vector<std::unique_ptr<sched::TxAdapter>>& tx_adapters() const noexcept { return tx_; }
  // lcore id of rx adapter i / worker i.
  unsigned rx_lcore(size_t i) const noexcept { return rx_lcores_[i]; }
  unsigned worker_lcore(size_t i) const noexcept { return worker_lcores_[i]; }

  // ---- VLAN ports added and removed by a reload (control thread, while traffic runs) ----
  // Port ids: the file's order at start; then a port keeps its id for as long as vecflowd
  // runs, a port removed and declared again gets its old one back (its counters go on), and
  // a new port the lowest id never given. Everything the lcores read by port id (the
  // OutcomeTable, the MTUs, the tx adapters, hooks, offload feed, the stages' per-port
  // tables) is kMaxPorts long from the start, so an added port moves nothing they read.
  // ports() has a null entry for an id whose port was removed.
  //
  // Adding is in two steps. add_vlan_port() makes the port of `next` (its parent runs) and
  // starts it (kernel device, exception path), gives every tx adapter its targets and the
  // pipeline its PortInfo; no frame reaches it yet. publish_vlan_port() then claims its tags
  // in its link's demultiplexer: after the rest of the reload (its VRF, its routes), so that
  // its first frame is handled as the new file says.
  Result<PortId> add_vlan_port(const config::ApplianceConfig& next, const config::PortConfig& port);
  void publish_vlan_port(std::string_view name);
  // Removing too. detach_vlan_port() releases its tags: from then on its frames are
  // vlan_unknown on the link (reattach_vlan_port() claims them again: a reload that failed
  // later). retire_vlan_port(), once the pipeline no longer routes to it, takes it off the tx
  // adapters (packets still on their way to it are link_down), waits a grace period, stops it
  // and tells the pipeline.
  void detach_vlan_port(std::string_view name);
  void reattach_vlan_port(std::string_view name);
  void retire_vlan_port(std::string_view name);
  // The id `name` has or had, if any.
  std::optional<PortId> port_id(std::string_view name) const;
  // Every port given an id, by PortId, removed ones too (their counters stay in the
  // OutcomeTable, and go on if they come back); ports() says which run.
  std::vector<std::string> port_names() const;
  // By link, the VLAN ports on it (QinQ ones too), removed ones too: their frames were
  // lifted on the link.
  std::map<std::string, std::vector<std::string>> vlans_by_link() const;

 private:
  DataPath() = default;
  Result<void> create_ports(const config::ApplianceConfig& cfg, steer::XdpSteering& steering);
  // Where VLAN port `id`'s frames are told apart: its link's demultiplexer (made when the
  // link has none yet, handed to the link last) and its tags there.
  struct VlanClaim {
    uint16_t link = kNoPort;
    uint16_t tpid = 0;
    uint16_t vid = 0;
    std::optional<uint16_t> inner;  // a QinQ customer's 802.1Q VLAN
  };
  VlanClaim vlan_claim(const config::ApplianceConfig& cfg, const config::PortConfig& port) const;
  void claim(PortId id, bool on);
  void keep_vlan_tags(const config::ApplianceConfig& cfg);
  void keep_vlan_tags(const config::PortConfig& link);
  Result<void> build_pipeline(const config::ApplianceConfig& cfg, Runtime& runtime);
  Result<void> build_scheduler(const config::ApplianceConfig& cfg, Runtime& runtime,
                               OutcomeTable& outcomes);
  // A TxAdapter on tx queue `queue` of every port, for the worker in OutcomeTable slot `slot`.
  void add_tx_adapter(uint16_t queue, unsigned slot, OutcomeTable& outcomes);
  Result<void> build_direct(unsigned lcore, const std::vector<std::pair<Port*, uint16_t>>& queues,
                            Runtime& runtime, OutcomeTable& outcomes);

  Runtime* runtime_ = nullptr;
  // Read by the pipeline and the tx adapters: before them, to go after them.
  std::unique_ptr<PortMtuTable> mtus_;
  // The teardown, in one place. The destructor's body takes every service off its lcore and
  // stops the ports (no buffer is lent to a device any more); then the members go in reverse
  // declaration order:
  //   workers, handlers, tx adapters, rx adapters   (users of the scheduler's ports)
  //   the scheduler                                 (stopping a device frees the events it
  //                                                  still holds: their vectors and packets)
  //   the vector pool                               (after every vector is back)
  //   the pipeline, hooks, ports
  //   the packet pool                               (after every mbuf is back)
  // and EAL after the DataPath (Appliance). A test tears down a device holding events.
  std::unique_ptr<PacketPool> pool_;
  std::vector<std::unique_ptr<Port>> ports_;          // by PortId; null: removed by a reload
  std::vector<Port*> start_order_;                    // ports_, parents before their VLAN ports
  std::map<std::string, uint16_t, std::less<>> ids_;  // every name given an id, and the id
  std::map<uint16_t, VlanClaim> claims_;              // by PortId: the VLAN ports'
  std::map<uint16_t, uint16_t> vlan_links_;  // by PortId, every VLAN port's link, removed too
  PortEnvironment env_;  // what create_port() was given at start, for the ports added later
  // Per port with VLAN sub-interfaces, their VLANs (io/vlan/vlan_demux.h): read by its rx bursts.
  std::map<uint16_t, std::unique_ptr<VlanDemux>> vlan_demux_;
  // The links' receive VLAN offloads turned off (keep_vlan_tags), back on as they go.
  std::vector<InterfaceFeaturesOff> vlan_offloads_off_;
  std::unique_ptr<HookTable> hooks_;
  std::unique_ptr<OffloadFeed> offload_;
  std::unique_ptr<Pipeline> pipeline_;
  // The conntrack stage's rewrite of the flow hash every port applies (nullptr: none).
  const FlowHashRewrite* hash_rewrite_ = nullptr;
  std::vector<std::shared_ptr<Service>> control_services_;
  sched::VectorPool vectors_;
  std::unique_ptr<sched::Scheduler> sched_;
  std::shared_ptr<Service> sched_service_;
  unsigned sched_service_lcore_ = 0;
  std::vector<std::shared_ptr<sched::RxAdapter>> rx_;
  std::vector<unsigned> rx_lcores_;
  std::vector<std::unique_ptr<sched::TxAdapter>> tx_;
  std::vector<uint16_t> tx_queues_;  // the tx queue of every port tx_[i] sends on
  std::vector<std::unique_ptr<PipelineHandler>> handlers_;
  std::vector<std::shared_ptr<sched::Worker>> workers_;
  std::vector<unsigned> worker_lcores_;
  std::shared_ptr<DirectPath> direct_;
  unsigned direct_lcore_ = 0;
  bool ports_started_ = false;
};

}  // namespace vecflow
