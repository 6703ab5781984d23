#include "pipeline/icmp_responder.h"

#include <algorithm>
#include <cstring>

#include <rte_cycles.h>
#include <rte_hash_crc.h>
#include <rte_ip.h>

#include "pipeline/kernel_sync.h"
#include "pipeline/packet_view.h"

namespace vecflow {

IcmpResponder::IcmpResponder(StageContext& ctx)
    : ports_(ctx.ports),
      qsbr_(ctx.qsbr),
      kernel_(ctx.kernel),
      tsc_hz_(rte_get_tsc_hz()),
      interval_(tsc_hz_ / 1000 * ctx.icmp.ratelimit_ms),
      bucket_(interval_ * ctx.icmp.burst),
      per_second_(ctx.icmp.per_second),
      lcores_(new LcoreState[ctx.lcore_slots]),
      slots_(ctx.lcore_slots),
      addresses_(std::make_unique<AddressSet>()) {}

IcmpResponder::~IcmpResponder() {
  if (kernel_ != nullptr) kernel_->forget(this);
}

Result<std::unique_ptr<IcmpResponder>> IcmpResponder::create(StageContext& ctx) {
  if (ctx.qsbr == nullptr) return fail("ICMP errors need the pipeline's grace-period domain");
  std::unique_ptr<IcmpResponder> r(new IcmpResponder(ctx));
  if (r->kernel_ != nullptr) {
    if (auto f = r->kernel_->follow_addresses(r.get()); !f) return std::unexpected(f.error());
  }
  return r;
}

void IcmpResponder::set_port(PortId id, const PortInfo& info) {
  if (to_index(id) < ports_.size()) ports_[to_index(id)] = info;
}

void IcmpResponder::set_port_addresses(std::vector<PortAddresses> addresses) {
  std::lock_guard lock(mutex_);
  auto set = std::make_unique<AddressSet>();
  set->by_port = std::move(addresses);
  addresses_.replace(std::move(set), *qsbr_);
}

bool IcmpResponder::allows(LcoreState& st, Kind kind, const rte_mbuf* m, bool v6,
                           uint64_t now) noexcept {
  const unsigned k = static_cast<unsigned>(kind);
  if (now - st.window[k] >= tsc_hz_) {
    st.window[k] = now;
    st.in_window[k] = 0;
  }
  if (per_second_ != 0 && st.in_window[k] >= per_second_) return false;
  // Path MTU discovery: too big has no per-destination limit.
  if (kind == Kind::TooBig || interval_ == 0) return true;

  // The error goes to the packet's source.
  uint64_t key;
  if (v6) {
    // Copied first: rte_hash_crc reads 8-byte words, and behind a VLAN tag the address is only
    // 2-byte aligned.
    alignas(8) uint8_t src[16];
    std::memcpy(src, pkt::ipv6(m)->src_addr, 16);
    key = rte_hash_crc(src, 16, 6);
  } else {
    key = rte_hash_crc_4byte(pkt::ipv4(m)->src_addr, 4);
  }
  key = key << 1 | 1;  // never 0, the empty slot's key
  DestBucket& b = st.dests[(key >> 1) & (kDestinations - 1)];
  if (b.key != key) {  // a destination not seen lately starts with a full bucket
    b.key = key;
    b.tokens = bucket_;
  } else {
    b.tokens = std::min(bucket_, b.tokens + (now - b.last));
  }
  b.last = now;
  if (b.tokens < interval_) return false;
  b.tokens -= interval_;
  return true;
}

uint64_t IcmpResponder::sent() const noexcept {
  uint64_t n = 0;
  for (unsigned i = 0; i < slots_; ++i)
    n += lcores_[i].sent.load();
  return n;
}

uint64_t IcmpResponder::limited() const noexcept {
  uint64_t n = 0;
  for (unsigned i = 0; i < slots_; ++i)
    n += lcores_[i].limited.load();
  return n;
}

}  // namespace vecflow
