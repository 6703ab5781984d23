#include "pipeline/conntrack/conntrack_table.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <new>
#include <stdexcept>

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

namespace {
// Two-choice 8-way buckets refuse about 5 per mille of inserts 7/8 full (insert());
// max_sessions / 7 buckets keep the table at most 7/8 full before the count refuses.
constexpr uint32_t buckets_for(uint32_t max_sessions) noexcept {
  const uint64_t want =
      std::max<uint64_t>(2 * ConnTable::kClasses, (uint64_t{max_sessions} + 6) / 7);
  return static_cast<uint32_t>(std::bit_ceil(want));
}
constexpr size_t kHugePage = size_t{2} << 20;
// The sessions start on their own huge page.
size_t buckets_bytes(uint32_t nbuckets) noexcept {
  return (size_t{nbuckets} * 64 + kHugePage - 1) / kHugePage * kHugePage;
}
}  // namespace

size_t ConnTable::memory_for(uint32_t max_sessions) noexcept {
  const uint32_t n = buckets_for(max_sessions);
  return buckets_bytes(n) + size_t{n} * kWays * sizeof(ConnEntry);
}

ConnTable::ConnTable(uint32_t max_sessions) : max_(max_sessions) {
  static_assert(buckets_for(kMaxSessions) / kClasses * kWays <= kRowMask + 1,
                "a class's rows fit a way's word");
  if (max_sessions > kMaxSessions) throw std::length_error("ConnTable: too many sessions");
  nbuckets_ = buckets_for(max_sessions);
  mask_ = nbuckets_ - 1;
  map_bytes_ = (memory_bytes() + kHugePage - 1) / kHugePage * kHugePage;
  map_ = mmap(nullptr, map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map_ == MAP_FAILED) throw std::bad_alloc();
  // Transparent huge pages where the kernel has them (its "madvise" mode takes this hint, and
  // "always" needs none); plain pages otherwise, correct but slower.
  (void)madvise(map_, map_bytes_, MADV_HUGEPAGE);
  // Zeroed by the kernel; written once here, so the memory is the process's from the start.
  buckets_ = static_cast<Bucket*>(map_);
  for (uint32_t b = 0; b < nbuckets_; ++b) {
    Bucket* bk = new (&buckets_[b]) Bucket;
    for (unsigned w = 0; w < kWays; ++w) {
      bk->way[w].store(0, std::memory_order_relaxed);
      bk->expires[w].store(0, std::memory_order_relaxed);
    }
  }
  sessions_ = reinterpret_cast<ConnEntry*>(static_cast<uint8_t*>(map_) + buckets_bytes(nbuckets_));
  for (size_t i = 0; i < size_t{nbuckets_} * kWays; ++i) {
    std::memset(static_cast<void*>(&sessions_[i]), 0, sizeof(ConnEntry));
    rte_seqcount_init(&sessions_[i].seq);
  }
  cursor_.reset(new uint32_t[kClasses]());
  free_head_.reset(new uint32_t[kClasses]());
  fresh_.reset(new uint32_t[kClasses]());
  kept_.reset(new std::atomic<uint32_t>[size_t{nbuckets_} * kWays]());
}

ConnTable::~ConnTable() {
  munmap(map_, map_bytes_);
}

size_t ConnTable::memory_bytes() const noexcept {
  return buckets_bytes(nbuckets_) + size_t{nbuckets_} * kWays * sizeof(ConnEntry);
}

uint32_t ConnTable::take_row(uint32_t cls) noexcept {
  const uint32_t head = free_head_[cls];
  if (head == 0) return fresh_[cls]++;
  free_head_[cls] = sessions_[size_t(head - 1) << kClassBits | cls].slot;
  return head - 1;
}

void ConnTable::give_row(uint32_t cls, uint32_t row, ConnEntry* e) noexcept {
  rte_seqcount_write_begin(&e->seq);
  e->slot = free_head_[cls];
  rte_seqcount_write_end(&e->seq);
  free_head_[cls] = row + 1;
}

ConnEntry* ConnTable::find(uint32_t hash, const ConnKey& k, uint32_t now, bool& reply,
                           uint64_t& expired_count) noexcept {
  const uint32_t sig = sig_of(hash);
  const Found f = search<true>(first(hash), sig, k, now, reply, expired_count);
  if (f.matched) return f.entry;
  return search<true>(second(hash), sig, k, now, reply, expired_count).entry;
}

ConnEntry* ConnTable::insert(uint32_t hash, const ConnKey& k, uint64_t tsc) noexcept {
  if (count_.load(std::memory_order_relaxed) >= max_) return nullptr;
  const uint32_t now = tick(tsc);
  // The first bucket while fewer than kFirstKeeps of its ways are taken, else the less full of
  // the two; a free way, or one whose session expired. A lookup, and the prefetch ahead of it,
  // then find most sessions in their first bucket: half full, 9 % of the sessions sit in their
  // second bucket, where the less full of the two alone put 31 % (a simulation of uniform
  // hashes), whose sessions the prefetch reached too late (at 1M sessions 80 % of find()'s
  // samples waited on one). 1M flows through conntrack+acl+route+neighbour, side by side: the
  // stage's cycles a packet 237 -> 155, the rate +22 %. The price: 7/8 full, 5.5 per mille of
  // inserts find both buckets full where the less full alone left 3.3.
  constexpr int kFirstKeeps = 5;
  int best_b = -1, best_w = -1, best_free = -1;
  for (uint32_t b : {first(hash), second(hash)}) {
    Bucket& bk = bucket(b);
    int free_ways = 0, way = -1;
    for (unsigned w = 0; w < kWays; ++w) {
      const uint32_t word = bk.way[w].load(std::memory_order_relaxed);
      if (word != 0 && lapsed(bk, b, w, word, now)) {
        remove(session(b, word));
      } else if (word != 0) {
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
    if (best_b >= 0 && int{kWays} - free_ways < kFirstKeeps) break;
  }
  if (best_b < 0) return nullptr;
  count_.fetch_add(1, std::memory_order_relaxed);
  const uint32_t b = static_cast<uint32_t>(best_b);
  const uint32_t row = take_row(b & (kClasses - 1));
  const uint32_t word = sig_of(hash) | row;
  ConnEntry* e = session(b, word);
  rte_seqcount_write_begin(&e->seq);
  e->slot = b << 3 | static_cast<uint32_t>(best_w);
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
  if (keeping_.load(std::memory_order_relaxed))
    kept_[index_of(e)].store(0, std::memory_order_relaxed);
  Bucket& bk = bucket(b);
  bk.expires[best_w].store(now, std::memory_order_relaxed);
  bk.way[best_w].store(word, std::memory_order_release);
  return e;
}

void ConnTable::remove(ConnEntry* e) noexcept {
  if (e->flags & hook_flags_) hook_(hook_ctx_, *e);
  const uint32_t b = e->slot >> 3;
  bucket(b).way[e->slot & 7].store(0, std::memory_order_release);
  const size_t index = static_cast<size_t>(e - sessions_);
  give_row(b & (kClasses - 1), static_cast<uint32_t>(index >> kClassBits), e);
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
      const uint32_t word = bk.way[w].load(std::memory_order_relaxed);
      if (word != 0 && lapsed(bk, b, w, word, now)) {
        remove(session(b, word));
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
  for (;;) {
    const uint32_t word = bk.way[w].load(std::memory_order_acquire);
    if (word == 0) return false;
    const ConnEntry* e = session(b, word);
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
    const uint32_t slot = e->slot;
    const uint32_t exp = bk.expires[w].load(std::memory_order_relaxed);
    if (rte_seqcount_read_retry(&e->seq, sn)) continue;
    // The session this way names, not a freed or another way's one read meanwhile.
    if (slot != (b << 3 | w) || bk.way[w].load(std::memory_order_acquire) != word) continue;
    // Kept alive for an offloaded flow: its expiry is the later of the two.
    const uint32_t until = kept_[index_of(e)].load(std::memory_order_relaxed);
    const uint32_t ends = until != 0 && static_cast<int32_t>(until - exp) > 0 ? until : exp;
    if (expired(ends, now)) return false;
    out.expires_in_ticks = static_cast<int32_t>(ends - now);
    out.offloaded = until != 0;
    return true;
  }
}

bool ConnTable::lookup(uint32_t hash, const ConnKey& k, uint32_t now, ConnSnapshot& out,
                       bool& reply) const noexcept {
  const uint32_t sig = sig_of(hash);
  const ConnKey rk = k.reversed();
  for (uint32_t b : {first(hash), second(hash)}) {
    for (unsigned m = ways_holding(bucket(b), sig); m != 0; m &= m - 1) {
      if (!read(b, static_cast<unsigned>(std::countr_zero(m)), now, out)) continue;
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
