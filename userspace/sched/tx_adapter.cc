#include "sched/tx_adapter.h"

#include <algorithm>

#include "core/ipv4_fragment.h"
#include "core/offload_feed.h"
#include "core/port_mtu.h"
#include "core/tracer.h"
#include "hooks/hook_table.h"
#include "io/port.h"

namespace vecflow::sched {

TxAdapter::TxAdapter(std::vector<TxTarget> ports, std::vector<TxTarget> kernel,
                     PortOutcomes* outcomes, HookTable* hooks, const PortMtuTable* mtus,
                     OffloadFeed* offload)
    : ports_(std::move(ports)),
      kernel_(std::move(kernel)),
      outcomes_(outcomes),
      hooks_(hooks),
      mtus_(mtus),
      offload_(offload) {
  // Every id a reload may give a port has its targets and buffers now: attach() allocates
  // nothing and moves nothing the worker reads.
  ports_.resize(kMaxPorts);
  kernel_.resize(kMaxPorts);
  tx_.resize(kMaxPorts);
  to_kernel_.resize(kMaxPorts);
  for (uint16_t i = 0; i < kMaxPorts; ++i) {
    if (ports_[i].port) tx_ports_.set(i);
    if (kernel_[i].port) kernel_ports_.set(i);
  }
}

void TxAdapter::attach(PortId id, TxTarget port, TxTarget kernel) noexcept {
  const uint16_t i = to_index(id);
  if (i >= kMaxPorts) return;
  ports_[i] = port;
  kernel_[i] = kernel;
  if (port.port) tx_ports_.set(i);
  if (kernel.port) kernel_ports_.set(i);
  removed_ports_.reset(i);
}

void TxAdapter::detach(PortId id) noexcept {
  const uint16_t i = to_index(id);
  if (i >= kMaxPorts) return;
  removed_ports_.set(i);
  tx_ports_.reset(i);
  kernel_ports_.reset(i);
}

void TxAdapter::finish(std::span<rte_event> events) noexcept {
  // Vectors go back to their pool in bulk, a mempool call per burst rather than per vector.
  std::array<void*, kMaxEventBurst> vectors;
  unsigned nvectors = 0;
  rte_mempool* pool = nullptr;
  for (rte_event& ev : events) {
    if (is_vector(ev)) {
      rte_event_vector* v = ev.vec;
      for (uint16_t i = 0; i < v->nb_elem; ++i)
        packet(vector_mbufs(v)[v->elem_offset + i]);
      rte_mempool* mp = rte_mempool_from_obj(v);
      if (mp != pool || nvectors == vectors.size()) {
        if (nvectors) rte_mempool_put_bulk(pool, vectors.data(), nvectors);
        pool = mp;
        nvectors = 0;
      }
      vectors[nvectors++] = v;
    } else if (is_packet(ev)) {
      packet(ev.mbuf);
    }
  }
  if (nvectors) rte_mempool_put_bulk(pool, vectors.data(), nvectors);
  free_dropped();
}

void TxAdapter::take(std::span<rte_mbuf*> pkts) noexcept {
  // A pipeline run's packets nearly all leave through one port: sent as they lie when at
  // least a burst of them do, in a row, with nothing waiting for that port before them.
  if (pkts.size() >= kTxBurst) pkts = pkts.subspan(send_run(pkts));
  Buffer* const tx = tx_.data();
  // The fill of the buffer being filled is kept in a register and written back when another
  // buffer is taken: through memory (b.n loaded and stored per packet, its stores possibly
  // aliasing the uint16_t ingress ports) each packet waited for the last one's store.
  Buffer* b = nullptr;
  // The port of `b`; wider than a port id, so that no packet's out_port matches it while `b`
  // is no buffer.
  constexpr uint32_t kNoBuffer = UINT32_MAX;
  uint32_t to = kNoBuffer;
  uint16_t n = 0;
  uint16_t gated = 0;
  uint64_t bytes = 0;
  uint16_t first_in = 0;  // the ingress of b->pkts[0]
  bool mixed = false;
  uint32_t limit = 0;  // the MTU of port `to`
  const auto put_back = [&]() noexcept {
    b->n = n;
    b->gated |= gated;
    b->bytes = bytes;
    b->mixed = mixed;
  };
  for (rte_mbuf* m : pkts) {
    const PacketMeta& pm = meta(m);
    // The common case: transmitted, not a copy (the other flags, a conntrack mark or a trace,
    // change nothing here), through the port of the packet before, or another this adapter
    // sends on.
    const uint16_t out = pm.out_port;
    if (pm.verdict == Verdict::Transmit && !(pm.flags & kMetaFlagCopy) &&
        (out == to || (out < kMaxPorts && tx_ports_.test(out)))) [[likely]] {
      if (out != to) {
        if (b != nullptr) put_back();
        b = &tx[out];
        to = out;
        n = b->n;
        gated = 0;
        bytes = b->bytes;
        mixed = b->mixed;
        first_in = n ? b->ingress[0] : m->port;
        limit = mtu(out);
      }
      if (m->pkt_len - m->l2_len > limit) [[unlikely]] {
        put_back();  // oversize() may fill the same buffer
        b = nullptr;
        to = kNoBuffer;
        oversize(m, out, limit);
        continue;
      }
      if (n == 0) {
        tx_dirty_.set(out);
        first_in = m->port;
      }
      b->pkts[n] = m;
      b->ingress[n] = m->port;
      bytes += m->pkt_len;
      mixed |= m->port != first_in;
      gated |= pm.offload_gate;
      if (++n == kTxBurst) {
        put_back();
        send(out, false);
        n = 0;
        gated = 0;
        bytes = 0;
        mixed = false;
      }
      continue;
    }
    if (b != nullptr) {  // packet() may fill the same buffers
      put_back();
      b = nullptr;
      to = kNoBuffer;
    }
    packet(m);
  }
  if (b != nullptr) put_back();
  free_dropped();
}

void TxAdapter::drop(std::span<rte_event> events, DropReason reason) noexcept {
  for (rte_event& ev : events) {
    for (rte_mbuf* m : packets(ev))
      drop_packet(m, reason);
    if (is_vector(ev)) free_vector(ev.vec);
  }
  free_dropped();
}

void TxAdapter::packet(rte_mbuf* m) noexcept {
  const PacketMeta& pm = meta(m);
  switch (pm.verdict) {
    case Verdict::Transmit:
      if (pm.out_port < kMaxPorts && tx_ports_.test(pm.out_port)) {
        if (const uint32_t limit = mtu(pm.out_port); m->pkt_len - m->l2_len > limit) {
          oversize(m, pm.out_port, limit);
        } else {
          buffer(pm.out_port, false, m, pm.flags);
        }
        return;
      }
      // A port a reload removed while packets for it were on their way: its link is gone.
      if (pm.out_port < kMaxPorts && removed_ports_.test(pm.out_port)) {
        drop_packet(m, DropReason::LINK_DOWN);
        return;
      }
      break;
    case Verdict::Kernel:
      if (m->port < kMaxPorts && kernel_ports_.test(m->port)) {
        buffer(m->port, true, m, pm.flags);
      } else {
        drop_packet(m, DropReason::NO_KERNEL_PATH);
      }
      return;
    case Verdict::Drop:
      drop_packet(m, pm.drop_reason < kDropReasonCount ? static_cast<DropReason>(pm.drop_reason)
                                                       : DropReason::BAD_VERDICT);
      return;
    case Verdict::Continue:
    case Verdict::Held:  // a stage's, never handed on
      break;
  }
  drop_packet(m, DropReason::BAD_VERDICT);
}

uint32_t TxAdapter::mtu(uint16_t out) const noexcept {
  return mtus_ ? mtus_->get(out) : PortMtuTable::kUnknown;
}

void TxAdapter::oversize(rte_mbuf* m, uint16_t out, uint32_t mtu) noexcept {
  std::array<rte_mbuf*, kMaxFragments> frags;
  const unsigned n = RTE_ETH_IS_IPV4_HDR(m->packet_type) ? ipv4_fragment(m, mtu, frags.data()) : 0;
  if (n == 0) {
    drop_packet(m, DropReason::PACKET_TOO_BIG);
    free_dropped();
    return;
  }
  stats_.fragmented.add();
  stats_.fragments.add(n);
  for (unsigned i = 1; i < n; ++i)
    meta(frags[i]).flags |= kMetaFlagCopy;
  rte_pktmbuf_free(m);
  for (unsigned i = 0; i < n; ++i)
    buffer(out, false, frags[i], meta(frags[i]).flags);
}

void TxAdapter::buffer(uint16_t dest, bool kernel, rte_mbuf* m, uint8_t flags) noexcept {
  Buffer& b = kernel ? to_kernel_[dest] : tx_[dest];
  if (b.n == 0) (kernel ? kernel_dirty_ : tx_dirty_).set(dest);
  const uint16_t in = (flags & kMetaFlagCopy) ? kNoCharge : m->port;
  if (b.n > 0 && in != b.ingress[0]) b.mixed = true;
  b.pkts[b.n] = m;
  b.ingress[b.n] = in;
  b.bytes += m->pkt_len;
  if (!(flags & kMetaFlagCopy)) b.gated |= meta(m).offload_gate;
  if (++b.n == kTxBurst) send(dest, kernel);
}

bool TxAdapter::link_down(const TxTarget& t, std::span<rte_mbuf*> pkts) noexcept {
  // A port whose link is down would hold the burst in its ring (AF_XDP) or refuse it; either
  // way it cannot leave, and the operator should read why.
  if (t.port->cached_link() != LinkState::Down) return false;
  for (rte_mbuf* m : pkts)
    drop_packet(m, DropReason::LINK_DOWN);
  free_dropped();
  return true;
}

uint16_t TxAdapter::offer(const TxTarget& t, bool kernel, rte_mbuf** pkts, uint16_t n) noexcept {
  // Kernel verdicts enter the kernel through the ingress port's exception path, not its wire.
  auto once = [&](rte_mbuf** p, uint16_t k) noexcept {
    return kernel ? t.port->to_kernel(t.queue, p, k) : t.port->tx_burst(t.queue, p, k);
  };
  uint16_t sent = once(pkts, n);
  stats_.bursts.add();
  for (uint32_t r = 0; sent < n && r < kTxRetries; ++r) {
    stats_.retries.add();
    sent += once(pkts + sent, static_cast<uint16_t>(n - sent));
  }
  return sent;
}

void TxAdapter::refused(std::span<rte_mbuf*> pkts) noexcept {
  if (pkts.empty()) return;
  stats_.tx_full.add(pkts.size());
  for (rte_mbuf* m : pkts)
    drop_packet(m, DropReason::TX_FULL);
  free_dropped();
}

void TxAdapter::send(uint16_t dest, bool kernel) noexcept {
  Buffer& b = kernel ? to_kernel_[dest] : tx_[dest];
  const TxTarget& t = kernel ? kernel_[dest] : ports_[dest];
  const auto clear = [&]() noexcept {
    b.n = 0;
    b.gated = 0;
    b.bytes = 0;
    b.mixed = false;
    (kernel ? kernel_dirty_ : tx_dirty_).reset(dest);
  };
  if (!kernel && link_down(t, {b.pkts.data(), b.n})) {
    clear();
    return;
  }
  if (hooks_ && !kernel) hooks_->run_tx(t.port->id(), QueueId{t.queue}, {b.pkts.data(), b.n});
  std::array<Gated, kTxBurst> gates;
  const uint16_t ngated = b.gated ? gated(b, gates) : 0;
  // A port may free what it takes at once: a mixed buffer's lengths are read before.
  std::array<uint32_t, kTxBurst> lengths;
  if (b.mixed) [[unlikely]]
    for (uint16_t i = 0; i < b.n; ++i)
      lengths[i] = b.pkts[i]->pkt_len;
  const uint16_t sent = offer(t, kernel, b.pkts.data(), b.n);
  charge(b, sent, lengths.data(), kernel);
  // What the port took is settled; what it refused is, as it is dropped.
  for (uint16_t i = 0; i < ngated; ++i)
    if (gates[i].index < sent)
      offload_->settle(b.ingress[gates[i].index], gates[i].gate, gates[i].seq);
  refused({b.pkts.data() + sent, size_t(b.n - sent)});
  clear();
}

size_t TxAdapter::send_run(std::span<rte_mbuf*> pkts) noexcept {
  const PacketMeta& first = meta(pkts[0]);
  const uint16_t out = first.out_port;
  if (first.verdict != Verdict::Transmit || out >= kMaxPorts || !tx_ports_.test(out) ||
      tx_[out].n != 0)
    return 0;
  // The run: packets as take()'s common case wants them, all from one ingress port, none to
  // be settled with the offload feed, none over the MTU.
  const uint16_t in = pkts[0]->port;
  const uint32_t limit = mtu(out);
  const size_t most = std::min<size_t>(pkts.size(), kMaxRun);
  uint64_t bytes = 0;
  size_t k = 0;
  for (; k < most; ++k) {
    const rte_mbuf* m = pkts[k];
    const PacketMeta& pm = meta(m);
    if (pm.verdict != Verdict::Transmit || pm.out_port != out || m->port != in ||
        (pm.flags & kMetaFlagCopy) || pm.offload_gate || m->pkt_len - m->l2_len > limit)
      break;
    bytes += m->pkt_len;
  }
  if (k < kTxBurst) return 0;
  const TxTarget& t = ports_[out];
  const std::span<rte_mbuf*> run = pkts.first(k);
  if (link_down(t, run)) return k;
  if (hooks_) hooks_->run_tx(t.port->id(), QueueId{t.queue}, run);
  const uint16_t sent = offer(t, false, run.data(), static_cast<uint16_t>(k));
  for (size_t i = sent; i < k; ++i)
    bytes -= run[i]->pkt_len;
  PortOutcomes& o = outcomes_[in];
  o.tx_packets.add(sent);
  o.tx_bytes.add(bytes);
  refused(run.subspan(sent));
  return k;
}

void TxAdapter::charge(const Buffer& b, uint16_t sent, const uint32_t* lengths,
                       bool kernel) noexcept {
  const auto add = [&](uint16_t in, uint64_t n, uint64_t bytes) noexcept {
    if (in == kNoCharge || n == 0) return;
    PortOutcomes& o = outcomes_[in];
    if (kernel) {
      o.kernel_packets.add(n);
    } else {
      o.tx_packets.add(n);
      o.tx_bytes.add(bytes);
    }
  };
  if (!b.mixed) {
    // One ingress: the buffer's bytes less those of what was refused (still ours to read).
    uint64_t bytes = b.bytes;
    for (uint16_t i = sent; i < b.n; ++i)
      bytes -= b.pkts[i]->pkt_len;
    add(b.ingress[0], sent, bytes);
    return;
  }
  // Charged per run of packets from one ingress port: one counter update per run.
  for (uint16_t i = 0; i < sent;) {
    const uint16_t in = b.ingress[i];
    uint64_t n = 0, bytes = 0;
    for (; i < sent && b.ingress[i] == in; ++i) {
      ++n;
      bytes += lengths[i];
    }
    add(in, n, bytes);
  }
}

void TxAdapter::flush() noexcept {
  for (uint16_t p; (p = tx_dirty_.first()) != kNoPort;)
    send(p, false);
  for (uint16_t p; (p = kernel_dirty_.first()) != kNoPort;)
    send(p, true);
}

uint16_t TxAdapter::gated(const Buffer& b, std::array<Gated, kTxBurst>& out) const noexcept {
  uint16_t n = 0;
  if (offload_ == nullptr) return 0;
  for (uint16_t i = 0; i < b.n; ++i) {
    const PacketMeta& pm = meta(b.pkts[i]);
    if (pm.offload_gate && b.ingress[i] != kNoCharge)
      out[n++] = {i, pm.offload_gate, pm.offload_seq};
  }
  return n;
}

void TxAdapter::drop_packet(rte_mbuf* m, DropReason reason) noexcept {
  const PacketMeta& pm = meta(m);
  if (pm.flags & kMetaFlagCopy) {
    stats_.copies_dropped.add();
  } else {
    outcomes_[m->port].drops.add(reason);
    if (pm.offload_gate && offload_) [[unlikely]]
      offload_->settle(m->port, pm.offload_gate, pm.offload_seq);
  }
  if (pm.flags & kMetaFlagTrace) [[unlikely]] {
    trace::Record r;
    r.step = trace::Step::TxDrop;
    r.port = pm.verdict == Verdict::Kernel ? m->port : pm.out_port;
    r.verdict = static_cast<uint8_t>(pm.verdict);
    r.reason = static_cast<uint16_t>(reason);
    trace::tracer().add(m, r);
  }
  dropped_[ndropped_++] = m;
  if (ndropped_ == dropped_.size()) free_dropped();
}

void TxAdapter::free_dropped() noexcept {
  if (ndropped_ == 0) return;
  rte_pktmbuf_free_bulk(dropped_.data(), ndropped_);
  ndropped_ = 0;
}

}  // namespace vecflow::sched
