#include "pipeline/conntrack_table.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>

#include <sys/mman.h>

namespace vecflow {

std::string_view conn_state_name(ConnState s) noexcept {
  switch (s) {
    case ConnState::TcpSynSent:
      return "syn_sent";
    case ConnState::TcpSynRecv:
      return "syn_recv";
    case ConnState::TcpEstablished:
      return "established";
    case ConnState::TcpFinWait:
      return "fin_wait";
    case ConnState::TcpTimeWait:
      return "time_wait";
    case ConnState::TcpClose:
      return "close";
    case ConnState::UdpUnreplied:
      return "udp_unreplied";
    case ConnState::UdpAssured:
      return "udp_assured";
    case ConnState::IcmpUnreplied:
      return "icmp_unreplied";
    case ConnState::IcmpReplied:
      return "icmp_replied";
    case ConnState::OtherUnreplied:
      return "other_unreplied";
    case ConnState::OtherReplied:
      return "other_replied";
  }
  return "?";
}

uint32_t ConnTimeouts::of(ConnState s) const noexcept {
  switch (s) {
    case ConnState::TcpSynSent:
      return tcp_syn_sent;
    case ConnState::TcpSynRecv:
      return tcp_syn_recv;
    case ConnState::TcpEstablished:
      return tcp_established;
    case ConnState::TcpFinWait:
      return tcp_fin_wait;
    case ConnState::TcpTimeWait:
      return tcp_time_wait;
    case ConnState::TcpClose:
      return tcp_close;
    case ConnState::UdpUnreplied:
      return udp_unreplied;
    case ConnState::UdpAssured:
      return udp_assured;
    case ConnState::IcmpUnreplied:
    case ConnState::IcmpReplied:
      return icmp;
    case ConnState::OtherUnreplied:
      return other_unreplied;
    case ConnState::OtherReplied:
      return other_replied;
  }
  return other_unreplied;
}

ConnKey ConnKey::reversed() const noexcept {
  ConnKey r = *this;
  std::swap(r.src, r.dst);
  std::swap(r.src_port, r.dst_port);
  return r;
}

namespace {
// Two-choice 8-way buckets stay below a few per mille of refused inserts up to ~90 % full;
// max_sessions / 7 buckets keep the table at most 7/8 full before the count refuses.
uint32_t buckets_for(uint32_t max_sessions) noexcept {
  const uint64_t want =
      std::max<uint64_t>(2 * ConnTable::kClasses, (uint64_t{max_sessions} + 6) / 7);
  return static_cast<uint32_t>(std::bit_ceil(want));
}
}  // namespace

size_t ConnTable::memory_for(uint32_t max_sessions) noexcept {
  return size_t(buckets_for(max_sessions)) * sizeof(Group);
}

ConnTable::ConnTable(uint32_t max_sessions) : max_(max_sessions) {
  nbuckets_ = buckets_for(max_sessions);
  mask_ = nbuckets_ - 1;
  constexpr size_t kHuge = size_t{2} << 20;
  map_bytes_ = (memory_bytes() + kHuge - 1) / kHuge * kHuge;
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) throw std::bad_alloc();
  // Transparent huge pages where the kernel has them (its "madvise" mode takes this hint, and
  // "always" needs none); plain pages otherwise, correct but slower.
  (void)madvise(map_, map_bytes_, MADV_HUGEPAGE);
  // Zeroed by the kernel; written once here, so the memory is the process's from the start.
  groups_ = static_cast<Group*>(map_);
  for (uint32_t b = 0; b < nbuckets_; ++b) {
    Group* g = new (&groups_[b]) Group;
    for (unsigned w = 0; w < kWays; ++w) {
      g->bucket.sig[w].store(0, std::memory_order_relaxed);
      g->bucket.expires[w].store(0, std::memory_order_relaxed);
      std::memset(static_cast<void*>(&g->entries[w]), 0, sizeof(ConnEntry));
      rte_seqcount_init(&g->entries[w].seq);
    }
  }
  cursor_.reset(new uint32_t[kClasses]());
}

ConnTable::~ConnTable() {
  munmap(map_, map_bytes_);
}

void ConnTable::prefetch_session(uint32_t hash) const noexcept {
  const uint32_t sig = sig_of(hash);
  const uint32_t b = first(hash);
  for (unsigned w = 0; w < kWays; ++w) {
    if (bucket(b).sig[w].load(std::memory_order_relaxed) == sig) {
      const ConnEntry* e = at(b, w);
      rte_prefetch0(e);
      rte_prefetch0(reinterpret_cast<const uint8_t*>(e) + 64);
      return;
    }
  }
  rte_prefetch0(&bucket(second(hash)));
}

size_t ConnTable::memory_bytes() const noexcept {
  return size_t(nbuckets_) * sizeof(Group);
}

ConnEntry* ConnTable::find(uint32_t hash, const ConnKey& k, uint32_t now, bool& reply,
                           uint64_t& expired_count) noexcept {
  const uint32_t sig = sig_of(hash);
  const uint32_t choices[2] = {first(hash), second(hash)};
  for (uint32_t b : choices) {
    Bucket& bk = bucket(b);
    for (unsigned w = 0; w < kWays; ++w) {
      if (bk.sig[w].load(std::memory_order_relaxed) != sig) continue;
      ConnEntry* e = at(b, w);
      const bool fwd = e->key == k;
      if (!fwd && !(e->key == k.reversed())) continue;
      if (expired(bk.expires[w].load(std::memory_order_relaxed), now)) {
        remove(e);
        ++expired_count;
        return nullptr;
      }
      reply = !fwd;
      return e;
    }
  }
  return nullptr;
}

ConnEntry* ConnTable::insert(uint32_t hash, const ConnKey& k, uint64_t tsc) noexcept {
  if (count_.load(std::memory_order_relaxed) >= max_) return nullptr;
  const uint32_t sig = sig_of(hash);
  const uint32_t now = tick(tsc);
  // The less full of the two buckets; a free way, or one whose session expired.
  int best_b = -1, best_w = -1, best_free = -1;
  for (uint32_t b : {first(hash), second(hash)}) {
    Bucket& bk = bucket(b);
    int free_ways = 0, way = -1;
    for (unsigned w = 0; w < kWays; ++w) {
      const uint32_t s = bk.sig[w].load(std::memory_order_relaxed);
      if (s != 0 && expired(bk.expires[w].load(std::memory_order_relaxed), now)) {
        remove(at(b, w));
      } else if (s != 0) {
        continue;
      }
      ++free_ways;
      if (way < 0) way = static_cast<int>(w);
    }
    if (free_ways > best_free && way >= 0) {
      best_free = free_ways;
      best_b = static_cast<int>(b);
      best_w = way;
    }
  }
  if (best_b < 0) return nullptr;
  count_.fetch_add(1, std::memory_order_relaxed);
  ConnEntry* e = at(static_cast<uint32_t>(best_b), static_cast<unsigned>(best_w));
  rte_seqcount_write_begin(&e->seq);
  e->hash = hash;
  e->key = k;
  e->state = ConnState::OtherUnreplied;
  e->flags = 0;
  e->wscale = {0, 0};
  e->nat_port = 0;
  e->nat_pool = 0;
  e->nat_rule = 0;
  e->created = tsc;
  e->packets = {0, 0};
  e->bytes = {0, 0};
  e->tcp = {};
  e->last_seen = tsc;
  rte_seqcount_write_end(&e->seq);
  Bucket& bk = bucket(best_b);
  bk.expires[best_w].store(now, std::memory_order_relaxed);
  bk.sig[best_w].store(sig, std::memory_order_release);
  return e;
}

void ConnTable::set_expiry(ConnEntry* e, uint32_t expires) noexcept {
  const auto [b, w] = place(e);
  bucket(b).expires[w].store(expires, std::memory_order_relaxed);
}

void ConnTable::remove(ConnEntry* e) noexcept {
  if (e->flags & hook_flags_) hook_(hook_ctx_, *e);
  const auto [b, w] = place(e);
  bucket(b).sig[w].store(0, std::memory_order_release);
  count_.fetch_sub(1, std::memory_order_relaxed);
}

unsigned ConnTable::sweep(uint32_t hash, uint32_t now, unsigned buckets) noexcept {
  const uint32_t cls = hash & (kClasses - 1);
  const uint32_t per_class = nbuckets_ >> kClassBits;
  uint32_t& cur = cursor_[cls];
  unsigned gone = 0;
  for (unsigned i = 0; i < buckets; ++i) {
    cur = cur + 1 < per_class ? cur + 1 : 0;
    const uint32_t b = (cur << kClassBits) | cls;
    Bucket& bk = bucket(b);
    for (unsigned w = 0; w < kWays; ++w) {
      if (bk.sig[w].load(std::memory_order_relaxed) != 0 &&
          expired(bk.expires[w].load(std::memory_order_relaxed), now)) {
        remove(at(b, w));
        ++gone;
      }
    }
  }
  return gone;
}

void ConnTable::prefetch_sweep(uint32_t hash, unsigned buckets) const noexcept {
  const uint32_t cls = hash & (kClasses - 1);
  const uint32_t per_class = nbuckets_ >> kClassBits;
  uint32_t cur = cursor_[cls];
  for (unsigned i = 0; i < buckets; ++i) {
    cur = cur + 1 < per_class ? cur + 1 : 0;
    rte_prefetch0(&bucket((cur << kClassBits) | cls));
  }
}

bool ConnTable::read(uint32_t b, unsigned w, uint32_t now, ConnSnapshot& out) const noexcept {
  const Bucket& bk = bucket(b);
  const ConnEntry* e = at(b, w);
  for (;;) {
    const uint32_t sig = bk.sig[w].load(std::memory_order_acquire);
    if (sig == 0) return false;
    const uint32_t sn = rte_seqcount_read_begin(&e->seq);
    out.key = e->key;
    out.state = e->state;
    out.flags = e->flags;
    out.nat_port = e->nat_port;
    out.nat_pool = e->nat_pool;
    out.nat_rule = e->nat_rule;
    out.created = e->created;
    out.last_seen = e->last_seen;
    out.packets = e->packets;
    out.bytes = e->bytes;
    const uint32_t hash = e->hash;
    const uint32_t exp = bk.expires[w].load(std::memory_order_relaxed);
    if (rte_seqcount_read_retry(&e->seq, sn)) continue;
    if (sig_of(hash) != sig || bk.sig[w].load(std::memory_order_acquire) != sig) continue;
    if (expired(exp, now)) return false;
    out.expires_in_ticks = static_cast<int32_t>(exp - now);
    return true;
  }
}

bool ConnTable::lookup(uint32_t hash, const ConnKey& k, uint32_t now, ConnSnapshot& out,
                       bool& reply) const noexcept {
  const uint32_t sig = sig_of(hash);
  const ConnKey rk = k.reversed();
  for (uint32_t b : {first(hash), second(hash)}) {
    for (unsigned w = 0; w < kWays; ++w) {
      if (bucket(b).sig[w].load(std::memory_order_relaxed) != sig) continue;
      if (!read(b, w, now, out)) continue;
      if (out.key == k || out.key == rk) {
        reply = !(out.key == k);
        return true;
      }
    }
  }
  return false;
}

void ConnTable::for_each(uint32_t now, const std::function<void(const ConnSnapshot&)>& fn) const {
  ConnSnapshot s;
  for (uint32_t b = 0; b < nbuckets_; ++b)
    for (unsigned w = 0; w < kWays; ++w)
      if (read(b, w, now, s)) fn(s);
}

}  // namespace vecflow
