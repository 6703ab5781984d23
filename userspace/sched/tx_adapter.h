// The end of the pipeline: acts on each packet's verdict and transmits in bursts.
//
// One TxAdapter per worker (it is the worker's EgressSink), never shared: it uses, on every
// port, the tx queue given to it, so workers never contend for a queue. For each packet of a
// finished event (a vector or a single packet):
//   Transmit  buffered for meta.out_port; a port's buffer is sent when it holds kTxBurst
//             packets and at every flush() (the end of each worker poll). A run of at least
//             kTxBurst packets handed to take() for one port, from one ingress, is offered
//             as it lies, in one call (a one-worker pipeline run's vector: no copy, one call)
//   Kernel    buffered for the kernel path of the ingress port, sent the same way
//   Drop      freed, counted under meta.drop_reason
//   Continue  (or an out_port with no port) freed, counted as bad_verdict
// A packet larger than its egress port's MTU (core/port_mtu.h; the IP packet, L2 header not
// included) is cut into fragments that fit when it is IPv4 without DF (core/ipv4_fragment.h):
// the packet leaves as its first fragment, charged as any packet, and the others are packets
// vecflow made (kMetaFlagCopy); anything else too big is a packet_too_big drop (the route
// stage answers what it routes before it gets here).
// A port that takes only part of a burst is offered the rest again up to kTxRetries times;
// what it still refuses is freed and counted as tx_full. A burst for a port whose cached link
// state (Port::cached_link) is Down is not offered: it is counted as link_down.
//
// Accounting goes to this worker's row of the OutcomeTable, charged to the packet's ingress
// port (m->port, read before the packet is offered: a port owns the packets it takes and may
// free them at once). tx counts where a port accepts; to_kernel where the kernel path does.
//
// Tx hooks (hooks/hook_table.h) run in TxAdapter::send(), on a port's burst just before its
// first Port::tx_burst.
//
// A packet the steering program lifted under a flow offload gate (PacketMeta::offload_gate) is
// settled with the OffloadFeed once its port took it or it was dropped here: the XDP program
// forwards the flow's later frames itself only when none of its earlier ones is still in user
// space (vecflow/offload_abi.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <span>
#include <vector>

#include "core/accounting.h"
#include "core/ids.h"
#include "core/packet.h"
#include "sched/port_bits.h"
#include "sched/worker.h"

namespace vecflow {
class HookTable;
class OffloadFeed;
class Port;
class PortMtuTable;
}  // namespace vecflow

namespace vecflow::sched {

// Packets buffered per destination before a tx burst: the usual DPDK burst, what a NIC's tx
// path and an AF_XDP tx ring are tuned for. Smaller wastes per-call cost, larger holds packets
// longer (a flush at the end of every worker poll bounds that anyway).
inline constexpr uint16_t kTxBurst = 32;

// The most packets send_run() offers a port in one call: a pipeline run's worth.
inline constexpr uint16_t kMaxRun = 256;

// Times a partly refused burst is offered again before the rest is dropped as tx_full. A
// refusal means the tx ring is full; retrying at once only helps if the device is
// mid-completion. Retrying longer would stall the worker (and every flow it holds) behind one
// slow port, which is worse than dropping what that port cannot take.
inline constexpr uint32_t kTxRetries = 3;

// A port and the tx queue this adapter uses on it.
struct TxTarget {
  Port* port = nullptr;
  uint16_t queue = 0;
};

struct TxStats {
  Counter bursts;          // tx_burst calls
  Counter retries;         // calls repeated for the refused part of a burst
  Counter tx_full;         // packets dropped after kTxRetries
  Counter copies_dropped;  // mirror copies a port refused (charged to no port)
  Counter fragmented;      // packets cut into fragments to fit their egress MTU
  Counter fragments;       // the fragments made of them (fragments_out)
};

class TxAdapter final : public EgressSink {
 public:
  // `ports[i]`: where Transmit with out_port i goes. `kernel[i]`: where Kernel verdicts of
  // packets that entered on port i go (a port whose tx hands frames to the kernel stack of
  // that interface); an empty target makes them no_kernel_path drops. `outcomes`: this
  // worker's row of the OutcomeTable (one PortOutcomes per port, indexed by PortId).
  // `hooks`: tx hooks run on every burst offered to a port (not on kernel-path bursts);
  // nullptr: none. `mtus`: the ports' MTUs (outlives the adapter); nullptr: no limit.
  // `offload`: where gated packets are settled (outlives the adapter); nullptr: none.
  TxAdapter(std::vector<TxTarget> ports, std::vector<TxTarget> kernel, PortOutcomes* outcomes,
            HookTable* hooks = nullptr, const PortMtuTable* mtus = nullptr,
            OffloadFeed* offload = nullptr);

  void finish(std::span<rte_event> events) noexcept override;
  // The same for loose packets, each acted on by its verdict: what a pipeline decided before
  // its event finished (pipeline glue), and mirror copies (kMetaFlagCopy: transmitted, but
  // charged to no port, since they never entered).
  void take(std::span<rte_mbuf*> pkts) noexcept;
  void drop(std::span<rte_event> events, DropReason reason) noexcept override;
  void flush() noexcept override;

  // A port added or removed by a live reload (control thread, while the worker runs). Every
  // PortId below kMaxPorts has its place from the start; a port's bit lets packets reach it.
  // attach(): Transmit to `id` goes to `port` and Kernel verdicts of packets from `id` to
  // `kernel` (empty: none), the targets written before the bits. detach(): from now on those
  // are link_down and no_kernel_path drops; the caller waits a grace period (runtime/qsbr.h)
  // before the port goes, since a worker in its round may still send through it (its buffers
  // are flushed within that round).
  void attach(PortId id, TxTarget port, TxTarget kernel) noexcept;
  void detach(PortId id) noexcept;

  const TxStats& stats() const noexcept { return stats_; }

 private:
  struct Buffer {
    uint16_t n = 0;
    std::array<rte_mbuf*, kTxBurst> pkts{};
    std::array<uint16_t, kTxBurst> ingress{};
    // The bytes of pkts[0, n), and whether their ingress differs (or a copy is among them):
    // a burst from one ingress port, nearly every one, is charged in one step, not per packet.
    uint64_t bytes = 0;
    bool mixed = false;
    // The OR of the PacketMeta::offload_gate of pkts[0, n) that are not copies: non-zero if
    // a packet there is to be settled (send() reads which before the port takes them).
    uint16_t gated = 0;
  };

  // Buffer::ingress of a mirror copy: nothing to charge.
  static constexpr uint16_t kNoCharge = 0xffff;

  void packet(rte_mbuf* m) noexcept;
  uint32_t mtu(uint16_t out) const noexcept;
  // A Transmit packet over `mtu` bytes for port `out`: fragmented, or dropped.
  void oversize(rte_mbuf* m, uint16_t out, uint32_t mtu) noexcept;
  void buffer(uint16_t dest, bool kernel, rte_mbuf* m, uint8_t flags) noexcept;
  void send(uint16_t dest, bool kernel) noexcept;
  // The first packets of `pkts`, as many as go to one port from one ingress in a row, sent
  // without being buffered when they are at least kTxBurst and the port's buffer is empty.
  // Returns how many it sent (or dropped); 0 leaves them all to the buffers.
  size_t send_run(std::span<rte_mbuf*> pkts) noexcept;
  // Drops `pkts` as link_down if the port's link is down (then returns true).
  bool link_down(const TxTarget& t, std::span<rte_mbuf*> pkts) noexcept;
  // Offers pkts[0, n) to `t`'s tx queue (`kernel`: its exception path), again up to
  // kTxRetries times for what it refused; returns how many it took.
  uint16_t offer(const TxTarget& t, bool kernel, rte_mbuf** pkts, uint16_t n) noexcept;
  // What a port refused after the retries: dropped as tx_full.
  void refused(std::span<rte_mbuf*> pkts) noexcept;
  // Charges what a port took of a buffer, the first `sent` packets (read before the offer:
  // `lengths`, the packets' lengths when the buffer is mixed).
  void charge(const Buffer& b, uint16_t sent, const uint32_t* lengths, bool kernel) noexcept;
  void drop_packet(rte_mbuf* m, DropReason reason) noexcept;
  // A gated packet of a buffer: what settling it takes, read before its port takes it.
  struct Gated {
    uint16_t index;  // in the buffer
    uint16_t gate;
    uint32_t seq;
  };
  // The gated packets of b.pkts[0, b.n) (b.gated non-zero) into `out`; returns how many.
  uint16_t gated(const Buffer& b, std::array<Gated, kTxBurst>& out) const noexcept;
  void free_dropped() noexcept;

  std::vector<TxTarget> ports_;
  std::vector<TxTarget> kernel_;
  PortOutcomes* outcomes_;
  HookTable* hooks_;
  const PortMtuTable* mtus_;
  OffloadFeed* offload_;
  std::vector<Buffer> tx_;         // by out_port
  std::vector<Buffer> to_kernel_;  // by ingress port
  // Bit i: ports_[i] / kernel_[i] has a port. Written by attach()/detach() on the control
  // thread, tested as take() meets a port and per packet on the slow paths.
  SharedPortBits tx_ports_;
  SharedPortBits kernel_ports_;
  SharedPortBits removed_ports_;  // detached: their packets are link_down drops
  PortBits tx_dirty_;
  PortBits kernel_dirty_;
  uint16_t ndropped_ = 0;
  std::array<rte_mbuf*, kTxBurst> dropped_{};
  TxStats stats_;
};

}  // namespace vecflow::sched
