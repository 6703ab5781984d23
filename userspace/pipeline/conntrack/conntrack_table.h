// The connection table of the conntrack stage: a fixed array of sessions, reserved and touched
// when the stage is built, looked up by the packets' flow hash.
//
// Ownership without locks. The scheduler keeps each event flow id atomic (one worker at a
// time), and the rx adapter's flow id is the flow bucket, the low bits of the flow hash
// (sched/rx_adapter.h: at most kMaxFlowBuckets, 1024 = 2^10). With the symmetric flow hash
// both directions of a connection carry the same hash. The table is laid out so that every
// bucket of it, and every place a connection may sit, lies in one flow bucket: the table's
// bucket index keeps the hash's low 10 bits (the class), and the second choice differs from
// the first only above them. So only the worker that holds a packet's flow bucket ever writes
// the table buckets that packet can reach: no lock, no atomic read-modify-write on the data
// path but the global session count. When the scheduler migrates a flow bucket to another
// worker the state needs no moving: ownership follows the flow bucket, and the scheduler's
// hand-off orders the old owner's writes before the new owner's reads, as it does for the
// packets themselves. (Hand-written rather than rte_hash: rte_hash's multi-writer mode takes
// a lock on insert and has no notion of expiry.)
//
// Readers from elsewhere (the control thread listing sessions; a worker looking up the
// connection an ICMP error is about, which sits in another flow bucket) read a session under
// its sequence count (rte_seqcount) and retry when its owner wrote meanwhile.
//
// Layout: 8-way buckets in one cache line, each way a 32-bit word (15 bits of the flow hash above
// the ones that chose the bucket, and the row of its session) and a 32-bit expiry time, so a lookup
// reads one line before it compares a key, and the sweep reads only those. Two choices per hash: a
// connection goes to the first of two buckets of its class while it has room to spare, else to the
// less full (insert() says why). The sessions (128 bytes each) sit apart from the buckets, by
// class: row r of class c is session r * 1024 + c, and each class hands out its most recently freed
// row first, so a large table that holds few sessions keeps them together (a thousand in a table
// for a million: within 256 KB, not spread over its 285 MB). The buckets of a million sessions take
// 16 MB, whose pages stay in the TLB. Measured against buckets that each held their 8 sessions
// beside them, 1M flows through conntrack(+NAT)+ACL+route+neighbour: the stage's cycles a packet
// 233 -> 229 and 270 -> 253; at 1024 flows no change. The table holds 2^k buckets, at least
// max_sessions / 7 of them and never fewer than 2048 (two per class), and as many sessions as
// bucket ways.
//
// Expiry without a global scan: a lookup that finds its session expired removes it; each
// process() call also sweeps a few buckets of the class of its first packet (a cursor per
// class, written by the class's owner only). A class without traffic keeps its expired
// sessions until its next packet; they count against max_sessions until then, and readers
// skip them.
#pragma once

#include <netinet/in.h>

#include <array>
#include <atomic>
#include <bit>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <rte_prefetch.h>
#include <rte_seqcount.h>

namespace vecflow {

enum class ConnState : uint8_t {
  TcpSynSent,
  TcpSynRecv,
  TcpEstablished,
  TcpFinWait,   // one side sent FIN
  TcpTimeWait,  // both sides sent FIN
  TcpClose,     // reset
  UdpUnreplied,
  UdpAssured,  // a reply was seen
  IcmpUnreplied,
  IcmpReplied,
  OtherUnreplied,
  OtherReplied,
};
inline constexpr size_t kConnStateCount = 12;
// "syn_sent", "established", "udp_unreplied" ...: the names `vecflowctl sessions` and the
// metrics use.
std::string_view conn_state_name(ConnState s) noexcept;

// Seconds a session lives after its last packet, by state.
struct ConnTimeouts {
  uint32_t tcp_syn_sent = 120;
  uint32_t tcp_syn_recv = 60;
  uint32_t tcp_established = 432000;  // 5 days, as Linux
  uint32_t tcp_fin_wait = 120;
  uint32_t tcp_time_wait = 120;
  uint32_t tcp_close = 10;
  uint32_t udp_unreplied = 30;
  uint32_t udp_assured = 120;
  uint32_t icmp = 30;
  uint32_t other_unreplied = 60;
  uint32_t other_replied = 600;
  uint32_t of(ConnState s) const noexcept;
  bool operator==(const ConnTimeouts&) const = default;
};
// The longest timeout a session may have: times are kept in 32-bit ticks.
inline constexpr uint32_t kMaxConnTimeout = 30 * 86400;

// Whether a connection of protocol `proto` is keyed by its ports (TCP, UDP, SCTP).
inline bool has_l4_ports(uint8_t proto) noexcept {
  return proto == IPPROTO_TCP || proto == IPPROTO_UDP || proto == IPPROTO_SCTP;
}

// A connection as its originator sent it. IPv4 addresses use the first 4 bytes, the rest
// zero. Ports in network order; an ICMP echo's identifier stands in both; 0 for protocols
// without ports. `zone`: the VRF the originator sent it in (pipeline/vrf.h), so that the same
// addresses in two VRFs are two connections (Linux's conntrack zones); both directions carry
// the originator's, a reply de-NATed into a VRF included (NatMap keeps it with the mapping).
//
// The data path builds, changes, copies and compares a key as five 64-bit words: a key is
// compared right after it is built, and a word loaded from several narrower stores (a 4-byte
// address, 2-byte ports) waits for them to reach the cache instead of taking its data from
// the store buffer (a failed store-to-load forward; perf put 40 % of track()'s samples on
// one such load).
struct ConnKey {
  std::array<uint8_t, 16> src{};
  std::array<uint8_t, 16> dst{};
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint8_t proto = 0;
  uint8_t version = 0;
  uint8_t zone = 0;
  uint8_t pad = 0;

  // Ports 0, set_ports() gives them. Addresses in network order.
  static ConnKey v4(uint32_t src, uint32_t dst, uint8_t proto, uint8_t zone = 0) noexcept {
    return words({addr4(src), 0, addr4(dst), 0, tail(0, 0, proto, 4, zone)});
  }
  static ConnKey v6(const uint8_t* src, const uint8_t* dst, uint8_t proto,
                    uint8_t zone = 0) noexcept {
    std::array<uint64_t, 5> w;
    std::memcpy(&w[0], src, 16);
    std::memcpy(&w[2], dst, 16);
    w[4] = tail(0, 0, proto, 6, zone);
    return words(w);
  }
  void set_ports(uint16_t src_port_be, uint16_t dst_port_be) noexcept {
    set_tail(src_port_be, dst_port_be, zone);
  }
  // The ports and the zone (a reply NAT maps back into another VRF).
  void set_tail(uint16_t src_port_be, uint16_t dst_port_be, uint8_t z) noexcept {
    const uint64_t t = tail(src_port_be, dst_port_be, proto, version, z);
    std::memcpy(reinterpret_cast<uint8_t*>(this) + 32, &t, 8);
  }
  void set_dst_v4(uint32_t addr) noexcept {
    const uint64_t w = addr4(addr);
    std::memcpy(reinterpret_cast<uint8_t*>(this) + 16, &w, 8);
  }
  uint64_t word(unsigned i) const noexcept {
    uint64_t w;
    std::memcpy(&w, reinterpret_cast<const uint8_t*>(this) + 8 * i, 8);
    return w;
  }
  bool operator==(const ConnKey& o) const noexcept {
    return ((word(0) ^ o.word(0)) | (word(1) ^ o.word(1)) | (word(2) ^ o.word(2)) |
            (word(3) ^ o.word(3)) | (word(4) ^ o.word(4))) == 0;
  }
  ConnKey reversed() const noexcept {
    return words({word(2), word(3), word(0), word(1), reversed_tail()});
  }
  // Whether this key is `o.reversed()`, compared without building that key (a lookup asks it
  // of the sessions whose signature matches when none holds `o`).
  bool is_reverse_of(const ConnKey& o) const noexcept {
    return ((word(0) ^ o.word(2)) | (word(1) ^ o.word(3)) | (word(2) ^ o.word(0)) |
            (word(3) ^ o.word(1)) | (word(4) ^ o.reversed_tail())) == 0;
  }

 private:
  static uint64_t addr4(uint32_t addr) noexcept {
    uint8_t t[8] = {};
    std::memcpy(t, &addr, 4);
    uint64_t w;
    std::memcpy(&w, t, 8);
    return w;
  }
  // The last word: ports, protocol, version, zone (the bytes as the fields lay them out).
  static uint64_t tail(uint16_t sp, uint16_t dp, uint8_t proto, uint8_t version,
                       uint8_t zone) noexcept {
    uint8_t t[8] = {0, 0, 0, 0, proto, version, zone, 0};
    std::memcpy(t, &sp, 2);
    std::memcpy(t + 2, &dp, 2);
    uint64_t w;
    std::memcpy(&w, t, 8);
    return w;
  }
  // The last word with the ports swapped.
  uint64_t reversed_tail() const noexcept {
    uint8_t t[8];
    const uint64_t w4 = word(4);
    std::memcpy(t, &w4, 8);
    uint16_t sp, dp;
    std::memcpy(&sp, t, 2);
    std::memcpy(&dp, t + 2, 2);
    return tail(dp, sp, t[4], t[5], t[6]);
  }
  static ConnKey words(const std::array<uint64_t, 5>& w) noexcept {
    ConnKey k;
    std::memcpy(static_cast<void*>(&k), w.data(), 40);
    return k;
  }
};
static_assert(sizeof(ConnKey) == 40);

// One direction's TCP sequence space as the window check tracks it (after Guido van Rooij's
// "Real Stateful TCP Packet Filtering in IP Filter", as Linux does): the highest sequence
// number it sent (end), the highest the other side allowed it (maxend: ack + window) and the
// largest window it announced.
struct TcpWindow {
  uint32_t end = 0;
  uint32_t maxend = 0;
  uint32_t maxwin = 0;
};

inline constexpr uint8_t kConnSeenReply = 0x01;
inline constexpr uint8_t kConnLiberal = 0x02;     // picked up mid-stream: no window checks
inline constexpr uint8_t kConnFinOrig = 0x04;     // the originator sent FIN
inline constexpr uint8_t kConnFinReply = 0x08;    // the responder sent FIN
inline constexpr uint8_t kConnWscaleOrig = 0x10;  // window scale option in the SYN
inline constexpr uint8_t kConnWscaleReply = 0x20;
inline constexpr uint8_t kConnSnat = 0x40;  // source NAT: nat_pool, nat_port
inline constexpr uint8_t kConnDnat = 0x80;  // destination NAT: nat_rule

struct alignas(64) ConnEntry {
  rte_seqcount_t seq;  // odd while its owner writes
  // In use: its bucket << 3 | way (ConnTable); free: the next free row of its class, plus 1.
  uint32_t slot;
  ConnKey key;
  ConnState state;
  uint8_t flags;
  std::array<uint8_t, 2> wscale;  // by direction
  // NAT44 (pipeline/conntrack/nat_map.h). The key is the connection as the originator sent it after
  // destination NAT and before source NAT, so both directions find it with the pool and the
  // public side translated back.
  uint16_t nat_port;  // kConnSnat: the external source port (network order)
  uint8_t nat_pool;   // kConnSnat: the pool address's index
  uint8_t nat_rule;   // kConnDnat: the rule's index
  uint64_t created;   // TSC
  // second line: what every packet updates
  std::array<uint64_t, 2> packets;  // [0] originator -> responder, [1] the reply direction
  std::array<uint64_t, 2> bytes;
  std::array<TcpWindow, 2> tcp;
  uint64_t last_seen;  // TSC
};
static_assert(sizeof(ConnEntry) == 128);

// A consistent copy of a session, for readers other than its owner.
struct ConnSnapshot {
  ConnKey key;
  ConnState state{};
  uint8_t flags = 0;
  uint64_t created = 0;
  uint64_t last_seen = 0;
  std::array<uint64_t, 2> packets{};
  std::array<uint64_t, 2> bytes{};
  int64_t expires_in_ticks = 0;
  // Flow offload kept it alive (ConnTable::keep): XDP forwarded packets of it, which
  // `packets` and `bytes` (user space's) do not count.
  bool offloaded = false;
  uint16_t nat_port = 0;
  uint8_t nat_pool = 0;
  uint8_t nat_rule = 0;
};

class ConnTable {
 public:
  static constexpr unsigned kWays = 8;
  static constexpr unsigned kClassBits = 10;  // sched::kMaxFlowBuckets == 1 << kClassBits
  static constexpr uint32_t kClasses = 1u << kClassBits;
  // The most sessions a table holds: their rows (kWays per bucket of a class) fit kRowBits.
  static constexpr uint32_t kMaxSessions = 1u << 26;
  // TSC cycles per tick: ~1.7 ms at 2.5 GHz; 2^31 ticks last 42 days there.
  static constexpr unsigned kTickShift = 22;

  // Reserves the buckets and sessions for `max_sessions` and touches them; std::bad_alloc when
  // the memory cannot be mapped, std::length_error above kMaxSessions (the file refuses those).
  explicit ConnTable(uint32_t max_sessions);
  // The bytes a table for `max_sessions` reserves (buckets and sessions).
  static size_t memory_for(uint32_t max_sessions) noexcept;
  ~ConnTable();
  ConnTable(const ConnTable&) = delete;
  ConnTable& operator=(const ConnTable&) = delete;

  static uint32_t tick(uint64_t tsc) noexcept { return static_cast<uint32_t>(tsc >> kTickShift); }

  // ---- the owner of `hash`'s flow bucket ----
  // The live session of `k` or of its reverse; `reply` tells which. An expired one is
  // removed (and counted in `expired`) and nullptr returned.
  ConnEntry* find(uint32_t hash, const ConnKey& k, uint32_t now, bool& reply,
                  uint64_t& expired) noexcept;
  // find() in the first bucket, for a live session only: nullptr, with nothing changed, where
  // find() would look further or remove an expired session.
  ConnEntry* find_first_live(uint32_t hash, const ConnKey& k, uint32_t now, bool& reply) noexcept {
    uint64_t none = 0;
    return search<false>(first(hash), sig_of(hash), k, now, reply, none).entry;
  }
  // A new session for `k` with zeroed counters, state and flags; nullptr when max_sessions
  // are in use or both of its buckets are full.
  ConnEntry* insert(uint32_t hash, const ConnKey& k, uint64_t tsc) noexcept;
  void set_expiry(ConnEntry* e, uint32_t expires) noexcept {
    buckets_[e->slot >> 3].expires[e->slot & 7].store(expires, std::memory_order_relaxed);
  }
  void remove(ConnEntry* e) noexcept;
  // A session's index (its row and class), what keep() takes.
  uint32_t index_of(const ConnEntry* e) const noexcept {
    return static_cast<uint32_t>(e - sessions_);
  }
  // Any thread: session `index` stays alive until tick `until` at least, whatever its own
  // expiry says (flow offload: XDP forwards its packets, which no longer reach the owner). A
  // session that replaces it in its row starts unkept; one kept while the row changed hands
  // lives at most until `until`.
  void keep(uint32_t index, uint32_t until) noexcept {
    if (index >= nbuckets_ * size_t{kWays}) return;
    kept_[index].store(until, std::memory_order_relaxed);
    if (!keeping_.load(std::memory_order_relaxed)) keeping_.store(true, std::memory_order_release);
  }
  // Sweeps `buckets` buckets of `hash`'s class for expired sessions; returns how many went.
  unsigned sweep(uint32_t hash, uint32_t now, unsigned buckets) noexcept;
  // Brings in the buckets the next sweep(hash, ..., buckets) reads: with a large table they
  // are rarely in cache, and a sweep that waits for them costs more than the packets of a
  // call together (two memory accesses per call).
  void prefetch_sweep(uint32_t hash, unsigned buckets) const noexcept;
  // Two steps ahead of find(): the first brings in the hash's buckets; the second, once they
  // are in, the session whose signature matches.
  void prefetch_buckets(uint32_t hash) const noexcept { rte_prefetch0(&buckets_[first(hash)]); }
  void prefetch_session(uint32_t hash) const noexcept {
    const uint32_t b = first(hash);
    if (const unsigned m = ways_holding(bucket(b), sig_of(hash))) {
      const ConnEntry* e =
          session(b, bucket(b).way[unsigned(std::countr_zero(m))].load(std::memory_order_relaxed));
      rte_prefetch0(e);
      rte_prefetch0(reinterpret_cast<const uint8_t*>(e) + 64);
    } else {
      rte_prefetch0(&bucket(second(hash)));
    }
  }

  // ---- any thread ----
  // The live session of `k` or its reverse, copied consistently.
  bool lookup(uint32_t hash, const ConnKey& k, uint32_t now, ConnSnapshot& out,
              bool& reply) const noexcept;
  // Every live session, copied consistently (the control thread).
  void for_each(uint32_t now, const std::function<void(const ConnSnapshot&)>& fn) const;

  // Called with each session the table removes (expired, or replaced) that has a flag of
  // `flags` set, on the thread that removes it: the NAT's references are dropped there.
  using RemoveHook = void (*)(void* ctx, const ConnEntry& e) noexcept;
  void set_remove_hook(uint8_t flags, RemoveHook fn, void* ctx) noexcept {
    hook_flags_ = flags;
    hook_ = fn;
    hook_ctx_ = ctx;
  }

  uint32_t max_sessions() const noexcept { return max_; }
  uint32_t capacity() const noexcept { return nbuckets_ * kWays; }
  size_t memory_bytes() const noexcept;
  // Sessions in the table, the expired ones not yet removed included.
  uint32_t in_use() const noexcept { return count_.load(std::memory_order_relaxed); }

 private:
  // A way's word: the signature (hash bits 17..31, never 0) above the session's row. 0: free.
  static constexpr unsigned kRowBits = 17;
  static constexpr uint32_t kRowMask = (1u << kRowBits) - 1;
  struct alignas(64) Bucket {
    std::array<std::atomic<uint32_t>, kWays> way;
    std::array<std::atomic<uint32_t>, kWays> expires;  // tick
  };
  static_assert(sizeof(Bucket) == 64);

  static uint32_t sig_of(uint32_t hash) noexcept {
    const uint32_t s = hash >> kRowBits;
    return (s != 0 ? s : 1) << kRowBits;
  }
  static bool holds(uint32_t word, uint32_t sig) noexcept { return (word & ~kRowMask) == sig; }
  // The ways of `b` holding `sig`, one bit each. With SSE2, both halves of the bucket compared
  // at once: a lookup runs this on every packet, and the eight compares and branches of a loop
  // over the ways cost it more than the rest of its search at a few thousand sessions. The
  // vector loads read the words as relaxed atomic loads do (aligned, element by element); a
  // bucket's writer is the lcore that owns its class, the one calling this on the data path,
  // and other readers (lookup()) check what they find under the session's seqcount.
  static unsigned ways_holding(const Bucket& b, uint32_t sig) noexcept {
#if defined(__SSE2__)
    const auto* v = reinterpret_cast<const __m128i*>(b.way.data());
    const __m128i top = _mm_set1_epi32(static_cast<int>(~kRowMask));
    const __m128i want = _mm_set1_epi32(static_cast<int>(sig));
    const __m128i lo = _mm_cmpeq_epi32(_mm_and_si128(_mm_load_si128(v), top), want);
    const __m128i hi = _mm_cmpeq_epi32(_mm_and_si128(_mm_load_si128(v + 1), top), want);
    return static_cast<unsigned>(_mm_movemask_ps(_mm_castsi128_ps(lo)) |
                                 _mm_movemask_ps(_mm_castsi128_ps(hi)) << 4);
#else
    unsigned m = 0;
    for (unsigned w = 0; w < kWays; ++w)
      m |= unsigned{holds(b.way[w].load(std::memory_order_relaxed), sig)} << w;
    return m;
#endif
  }
  uint32_t first(uint32_t hash) const noexcept {
    return hash & mask_;
  }
  // The same class (low kClassBits bits), another bucket: a non-zero offset above the class
  // bits, taken from the hash's high half by a multiply-shift (no division) into
  // [1, buckets per class) (nbuckets_ >= 2 * kClasses, so there is one).
  uint32_t second(uint32_t hash) const noexcept {
    const uint32_t above = nbuckets_ >> kClassBits;
    const uint32_t offset = 1 + (((hash >> 16) * (above - 1)) >> 16);
    return (first(hash) ^ (offset << kClassBits)) & mask_;
  }
  Bucket& bucket(uint32_t b) const noexcept {
    return buckets_[b];
  }
  // The session a way's word names; a bucket's class is its low kClassBits bits.
  ConnEntry* session(uint32_t bucket, uint32_t word) const noexcept {
    return &sessions_[size_t(word & kRowMask) << kClassBits | (bucket & (kClasses - 1))];
  }
  static bool expired(uint32_t expires, uint32_t now) noexcept {
    return static_cast<int32_t>(expires - now) <= 0;
  }
  // Whether the session of way `w` of `bk` (bucket `b`, holding `word`) has run out: its
  // expiry passed and keep() does not hold it (read only then: off the common path).
  bool lapsed(const Bucket& bk, uint32_t b, unsigned w, uint32_t word,
              uint32_t now) const noexcept {
    if (!expired(bk.expires[w].load(std::memory_order_relaxed), now)) return false;
    const uint32_t until = kept_[index_of(session(b, word))].load(std::memory_order_relaxed);
    return until == 0 || expired(until, now);
  }
  // find() in one bucket: `matched` when a way holds `k` or its reverse; `entry` is its
  // session, or nullptr when that had expired (kRemove: it is removed and counted in
  // `expired_count`).
  struct Found {
    bool matched;
    ConnEntry* entry;
  };
  // The ways are asked for `k` first, then for its reverse, so that the reversed key's words
  // are formed only when the key was not found as it is (the compiler hoisted them out of a
  // single loop and spilled them on every packet). A table never holds both a key and its
  // reverse: insert() follows a find() that looked for both.
  template <bool kRemove>
  Found search(uint32_t b, uint32_t sig, const ConnKey& k, uint32_t now, bool& reply,
               uint64_t& expired_count) noexcept {
    Bucket& bk = bucket(b);
    const unsigned holding = ways_holding(bk, sig);
    const auto found = [&](unsigned w, ConnEntry* e, bool reverse) noexcept -> Found {
      if (lapsed(bk, b, w, bk.way[w].load(std::memory_order_relaxed), now)) {
        if (kRemove) {
          remove(e);
          ++expired_count;
        }
        return {true, nullptr};
      }
      reply = reverse;
      return {true, e};
    };
    for (unsigned m = holding; m != 0; m &= m - 1) {
      const unsigned w = static_cast<unsigned>(std::countr_zero(m));
      ConnEntry* e = session(b, bk.way[w].load(std::memory_order_relaxed));
      if (e->key == k) return found(w, e, false);
    }
    for (unsigned m = holding; m != 0; m &= m - 1) {
      const unsigned w = static_cast<unsigned>(std::countr_zero(m));
      ConnEntry* e = session(b, bk.way[w].load(std::memory_order_relaxed));
      if (e->key.is_reverse_of(k)) return found(w, e, true);
    }
    return {false, nullptr};
  }
  // A free row of `cls` (there is one while a way of the class is free); gives one back.
  uint32_t take_row(uint32_t cls) noexcept;
  void give_row(uint32_t cls, uint32_t row, ConnEntry* e) noexcept;
  bool read(uint32_t bucket, unsigned way, uint32_t now, ConnSnapshot& out) const noexcept;

  uint32_t max_;
  uint32_t nbuckets_;
  uint32_t mask_;
  // One mapping for buckets and sessions, in 2 MB pages where the kernel gives them: a table of
  // a million sessions is 256 MB, and on 4 KB pages every lookup missed the TLB (the engine
  // benchmark: 377 cycles a packet at 1024 flows).
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  Bucket* buckets_;
  ConnEntry* sessions_;
  // By class, written by the class's owner only: the sweep's cursor; the head of the free
  // rows (a row + 1, 0: none; linked through the free sessions' slot) and the rows never used.
  std::unique_ptr<uint32_t[]> cursor_;
  std::unique_ptr<uint32_t[]> free_head_;
  std::unique_ptr<uint32_t[]> fresh_;
  // By session index: keep()'s tick, 0 when none; `keeping_` once keep() was called, so that
  // insert() clears a row's tick (a cache miss on a large table) only where one may be set.
  std::unique_ptr<std::atomic<uint32_t>[]> kept_;
  std::atomic<bool> keeping_{false};
  uint8_t hook_flags_ = 0;
  RemoveHook hook_ = nullptr;
  void* hook_ctx_ = nullptr;
  alignas(64) std::atomic<uint32_t> count_{0};
};

}  // namespace vecflow
