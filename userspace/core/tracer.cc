#include "core/tracer.h"

#include <algorithm>
#include <cstring>
#include <map>

namespace vecflow::trace {

Tracer::Tracer() : slots_(std::make_unique<Slot[]>(kMaxRecords)) {}

Tracer& tracer() noexcept {
  static Tracer t;
  return t;
}

void Tracer::arm(uint32_t count, const rte_bpf* filter) noexcept {
  // Nothing marks while this runs: the caller installs the rx hooks only afterwards.
  const uint32_t generation = (generation_.load(std::memory_order_relaxed) + 1) & 0x3f;
  // Records of the trace 64 generations ago that carried this number are still in the ring
  // unless overwritten: forget them, so they are not read as this trace's. No lcore writes
  // any (no packet of that trace can still be in flight).
  for (uint32_t i = 0; i < kMaxRecords; ++i) {
    const uint32_t id = slots_[i].id.load(std::memory_order_relaxed);
    if (((id & 0xffff) >> kNumberBits) == generation)
      slots_[i].id.store(0, std::memory_order_relaxed);
  }
  generation_.store(generation, std::memory_order_relaxed);
  first_slot_.store(next_slot_.load(std::memory_order_relaxed), std::memory_order_relaxed);
  filter_.store(filter, std::memory_order_relaxed);
  taken_.store(0, std::memory_order_relaxed);
  armed_tsc_ = rte_rdtsc();
  asked_.store(std::min(count, kMaxPackets), std::memory_order_release);
}

void Tracer::stop_marking() noexcept {
  asked_.store(taken(), std::memory_order_release);
}

uint32_t Tracer::taken() const noexcept {
  return std::min(taken_.load(std::memory_order_relaxed), asked_.load(std::memory_order_relaxed));
}

uint64_t Tracer::lost() const noexcept {
  const uint32_t written =
      next_slot_.load(std::memory_order_relaxed) - first_slot_.load(std::memory_order_relaxed);
  return written > kMaxRecords ? written - kMaxRecords : 0;
}

bool Tracer::mark(std::span<rte_mbuf* const> pkts, uint16_t port, uint16_t queue) noexcept {
  const uint32_t asked = asked_.load(std::memory_order_acquire);
  if (taken_.load(std::memory_order_relaxed) >= asked) return false;
  const rte_bpf* filter = filter_.load(std::memory_order_relaxed);
  const uint32_t generation = generation_.load(std::memory_order_relaxed);
  bool any = false;
  for (rte_mbuf* m : pkts) {
    // A cBPF program returns the bytes to keep; 0 rejects the packet.
    if (filter && rte_bpf_exec(filter, m) == 0) continue;
    // Several rx lcores may offer packets at once: each takes its numbers with one add, and
    // numbers past `asked` are not used.
    const uint32_t n = taken_.fetch_add(1, std::memory_order_relaxed) + 1;
    if (n > asked) break;
    PacketMeta& pm = meta(m);
    pm.flags |= kMetaFlagTrace;
    pm.trace_id = trace_id(generation, n);
    Record r;
    r.step = Step::Rx;
    r.port = port;
    r.queue = queue;
    r.value = m->hash.rss;
    r.extra = pm.steer_rule;
    r.length = rte_pktmbuf_pkt_len(m);
    r.bytes = static_cast<uint16_t>(std::min<uint32_t>(rte_pktmbuf_data_len(m), kFrameBytes));
    std::memcpy(r.data.data(), rte_pktmbuf_mtod(m, const uint8_t*), r.bytes);
    add(m, r);
    any = true;
  }
  return any;
}

void Tracer::append(uint16_t id, const Record& r) noexcept {
  Slot& s = slots_[next_slot_.fetch_add(1, std::memory_order_relaxed) % kMaxRecords];
  s.id.store(0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  s.rec = r;
  s.id.store(kWritten | id, std::memory_order_release);
}

std::vector<PacketTrace> Tracer::read() const {
  const uint32_t generation = generation_.load(std::memory_order_relaxed);
  std::map<uint32_t, PacketTrace> by_number;
  for (uint32_t i = 0; i < kMaxRecords; ++i) {
    const Slot& s = slots_[i];
    const uint32_t id = s.id.load(std::memory_order_acquire);
    if (id == 0 || ((id & 0xffff) >> kNumberBits) != generation) continue;
    Record r = s.rec;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (s.id.load(std::memory_order_relaxed) != id) continue;  // rewritten while copied
    const uint32_t number = id & ((1u << kNumberBits) - 1);
    PacketTrace& p = by_number[number];
    p.number = number;
    p.steps.push_back(r);
  }
  std::vector<PacketTrace> out;
  out.reserve(by_number.size());
  for (auto& [n, p] : by_number) {
    std::stable_sort(p.steps.begin(), p.steps.end(),
                     [](const Record& a, const Record& b) { return a.tsc < b.tsc; });
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace vecflow::trace
