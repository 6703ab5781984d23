// A packet capture as the data path sees it: where to put copies of the packets of one port
// and direction that an operator asked to capture (`vecflowctl capture start`).
//
// The control plane (control/capture.h) creates the sink: a ring, a pool of capture buffers and
// an optional compiled filter, and drains the ring into a pcapng file on the control thread.
// The part that owns the rx/tx hook points (hooks/) calls offer() with each burst of a tapped
// port, on any worker. offer() copies (never holds) the packets, so the data path keeps
// ownership of the originals; when the ring or the pool is full, the copy is not made and is
// counted as lost: a capture never slows or drops forwarded traffic.
//
// The sink is read-only to the data path after it is attached; it is freed by the control plane
// only after the tap has detached it (a quiescent point: no worker is inside offer()).
#pragma once

#include <atomic>
#include <cstdint>

#include <rte_bpf.h>
#include <rte_cycles.h>
#include <rte_mbuf.h>
#include <rte_ring.h>

#include "core/ids.h"

namespace vecflow {

enum CaptureDirection : uint8_t { kCaptureRx = 1, kCaptureTx = 2 };

// Stored in the private area of every capture buffer (rte_mbuf_to_priv).
struct CaptureRecord {
  uint64_t tsc;       // when the data path saw the packet
  uint32_t wire_len;  // length of the original packet; the copy may be shorter (snaplen)
  uint16_t queue;
  uint8_t direction;  // kCaptureRx or kCaptureTx
  uint8_t pad;
};

class CaptureSink {
 public:
  // `ring` must allow several producers; `pool` has at least sizeof(CaptureRecord) of private
  // area per mbuf; `filter` may be null (capture everything). The sink does not own them.
  CaptureSink(PortId port, uint8_t directions, uint32_t snaplen, rte_ring* ring, rte_mempool* pool,
              const rte_bpf* filter) noexcept
      : port_(port),
        directions_(directions),
        snaplen_(snaplen),
        ring_(ring),
        pool_(pool),
        filter_(filter) {}

  PortId port() const noexcept { return port_; }
  bool wants(CaptureDirection dir) const noexcept { return (directions_ & dir) != 0; }

  // Data path, any worker: copies the packets of `pkts` that pass the filter.
  void offer(rte_mbuf* const* pkts, uint16_t n, CaptureDirection dir, uint16_t queue) noexcept {
    if (!wants(dir)) return;
    uint64_t now = rte_rdtsc();
    for (uint16_t i = 0; i < n; ++i) {
      rte_mbuf* m = pkts[i];
      offered_.fetch_add(1, std::memory_order_relaxed);
      // A cBPF program returns the bytes to keep; 0 rejects the packet.
      if (filter_ && rte_bpf_exec(filter_, m) == 0) continue;
      rte_mbuf* copy = rte_pktmbuf_copy(m, pool_, 0, snaplen_);
      if (!copy) {
        lost_.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      auto* rec = static_cast<CaptureRecord*>(rte_mbuf_to_priv(copy));
      *rec = CaptureRecord{now, rte_pktmbuf_pkt_len(m), queue, dir, 0};
      if (rte_ring_mp_enqueue(ring_, copy) != 0) {
        rte_pktmbuf_free(copy);
        lost_.fetch_add(1, std::memory_order_relaxed);
      }
    }
  }

  // Packets the tap offered (before the filter), and copies lost to a full ring or pool.
  uint64_t offered() const noexcept { return offered_.load(std::memory_order_relaxed); }
  uint64_t lost() const noexcept { return lost_.load(std::memory_order_relaxed); }

 private:
  PortId port_;
  uint8_t directions_;
  uint32_t snaplen_;
  rte_ring* ring_;
  rte_mempool* pool_;
  const rte_bpf* filter_;
  // Several workers may offer at once: atomic adds, paid only by captured traffic.
  std::atomic<uint64_t> offered_{0};
  std::atomic<uint64_t> lost_{0};
};

}  // namespace vecflow
