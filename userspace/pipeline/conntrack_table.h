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
// Layout: 8-way buckets of 32-bit signatures (the flow hash) and expiry times in one cache
// line, so a lookup reads one line before it compares a key, and the sweep reads only those.
// Two choices per hash: a connection goes to the less full of two buckets of its class. A
// session is 128 bytes; the table holds 2^k buckets, at least max_sessions / 7 of them, and
// never fewer than 2048 (two per class).
//
// Expiry without a global scan: a lookup that finds its session expired removes it; each
// process() call also sweeps a few buckets of the class of its first packet (a cursor per
// class, written by the class's owner only). A class without traffic keeps its expired
// sessions until its next packet; they count against max_sessions until then, and readers
// skip them.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string_view>
#include <utility>

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

// A connection as its originator sent it. IPv4 addresses use the first 4 bytes, the rest
// zero. Ports in network order; an ICMP echo's identifier stands in both; 0 for protocols
// without ports.
struct ConnKey {
  std::array<uint8_t, 16> src{};
  std::array<uint8_t, 16> dst{};
  uint16_t src_port = 0;
  uint16_t dst_port = 0;
  uint8_t proto = 0;
  uint8_t version = 0;
  uint16_t pad = 0;
  // Five 64-bit words compared, no call to memcmp: a lookup compares a key or two per packet.
  bool operator==(const ConnKey& o) const noexcept {
    uint64_t a[5], b[5];
    std::memcpy(a, this, sizeof(a));
    std::memcpy(b, &o, sizeof(b));
    return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])) == 0;
  }
  ConnKey reversed() const noexcept;
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
  uint32_t hash;
  ConnKey key;
  ConnState state;
  uint8_t flags;
  std::array<uint8_t, 2> wscale;  // by direction
  // NAT44 (pipeline/nat_map.h). The key is the connection as the originator sent it after
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
  uint16_t nat_port = 0;
  uint8_t nat_pool = 0;
  uint8_t nat_rule = 0;
};

class ConnTable {
 public:
  static constexpr unsigned kWays = 8;
  static constexpr unsigned kClassBits = 10;  // sched::kMaxFlowBuckets == 1 << kClassBits
  static constexpr uint32_t kClasses = 1u << kClassBits;
  // TSC cycles per tick: ~1.7 ms at 2.5 GHz; 2^31 ticks last 42 days there.
  static constexpr unsigned kTickShift = 22;

  // Reserves the buckets and sessions for `max_sessions` and touches them; std::bad_alloc when
  // the memory cannot be mapped.
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
  // A new session for `k` with zeroed counters, state and flags; nullptr when max_sessions
  // are in use or both of its buckets are full.
  ConnEntry* insert(uint32_t hash, const ConnKey& k, uint64_t tsc) noexcept;
  void set_expiry(ConnEntry* e, uint32_t expires) noexcept;
  void remove(ConnEntry* e) noexcept;
  // Sweeps `buckets` buckets of `hash`'s class for expired sessions; returns how many went.
  unsigned sweep(uint32_t hash, uint32_t now, unsigned buckets) noexcept;
  // Brings in the buckets the next sweep(hash, ..., buckets) reads: with a large table they
  // are rarely in cache, and a sweep that waits for them costs more than the packets of a
  // call together (two memory accesses per call).
  void prefetch_sweep(uint32_t hash, unsigned buckets) const noexcept;
  // Two steps ahead of find(): the first brings in the hash's buckets; the second, once they
  // are in, the session whose signature matches.
  void prefetch_buckets(uint32_t hash) const noexcept { rte_prefetch0(&bucket(first(hash))); }
  void prefetch_session(uint32_t hash) const noexcept;

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
  struct alignas(64) Bucket {
    std::array<std::atomic<uint32_t>, kWays> sig;      // the flow hash, 0: free
    std::array<std::atomic<uint32_t>, kWays> expires;  // tick
  };
  static_assert(sizeof(Bucket) == 64);
  // A bucket followed by its sessions: a lookup's signature line and the session it finds
  // share a page (most of the time: 1088 bytes a group), which halves the TLB misses of a
  // lookup in a table far larger than the TLB covers (a million sessions: 272 MB; in a VM
  // whose host backs it with small pages, each miss is a nested page walk).
  struct Group {
    Bucket bucket;
    ConnEntry entries[kWays];
  };
  static_assert(sizeof(Group) == 64 + kWays * sizeof(ConnEntry));

  static uint32_t sig_of(uint32_t hash) noexcept { return hash != 0 ? hash : 1; }
  uint32_t first(uint32_t hash) const noexcept { return hash & mask_; }
  // The same class (low kClassBits bits), another bucket: a non-zero offset above the class
  // bits, taken from the hash's high half by a multiply-shift (no division) into
  // [1, buckets per class) (nbuckets_ >= 2 * kClasses, so there is one).
  uint32_t second(uint32_t hash) const noexcept {
    const uint32_t above = nbuckets_ >> kClassBits;
    const uint32_t offset = 1 + (((hash >> 16) * (above - 1)) >> 16);
    return (first(hash) ^ (offset << kClassBits)) & mask_;
  }
  ConnEntry* at(uint32_t bucket, unsigned way) const noexcept {
    return &groups_[bucket].entries[way];
  }
  Bucket& bucket(uint32_t b) const noexcept { return groups_[b].bucket; }
  // The bucket and way of a session.
  std::pair<uint32_t, unsigned> place(const ConnEntry* e) const noexcept {
    const size_t off = static_cast<size_t>(reinterpret_cast<const uint8_t*>(e) -
                                           reinterpret_cast<const uint8_t*>(groups_));
    const uint32_t b = static_cast<uint32_t>(off / sizeof(Group));
    return {b, static_cast<unsigned>(e - groups_[b].entries)};
  }
  static bool expired(uint32_t expires, uint32_t now) noexcept {
    return static_cast<int32_t>(expires - now) <= 0;
  }
  bool read(uint32_t bucket, unsigned way, uint32_t now, ConnSnapshot& out) const noexcept;

  uint32_t max_;
  uint32_t nbuckets_;
  uint32_t mask_;
  // One mapping for buckets and sessions, in 2 MB pages where the kernel gives them: a table of
  // a million sessions is 256 MB, and on 4 KB pages every lookup missed the TLB (the engine
  // benchmark: 377 cycles a packet at 1024 flows).
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  Group* groups_;
  std::unique_ptr<uint32_t[]> cursor_;  // by class
  uint8_t hook_flags_ = 0;
  RemoveHook hook_ = nullptr;
  void* hook_ctx_ = nullptr;
  alignas(64) std::atomic<uint32_t> count_{0};
};

}  // namespace vecflow
