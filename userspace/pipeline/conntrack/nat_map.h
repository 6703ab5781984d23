// The shared half of NAT44 (the conntrack stage's `nat:`, pipeline/conntrack/conntrack_stage.h):
// the pools' port slots, the destination NAT rules, and the flow hash a translated connection's
// packets carry on every port.
//
// Why the receive path must know about NAT. The conntrack table is owned per flow bucket
// (pipeline/conntrack/conntrack_table.h): both directions of a connection must carry the same flow
// hash. Translation breaks that: a reply to a source-NATed connection is addressed to the pool
// (server -> pool:p), its original left the client (client:c -> server). So apply() runs on
// every received burst, after classification, and hashes the packets a translation touches as
// their connection's untranslated packets hash:
//   - a packet to a pool address and port mapped to an internal endpoint is hashed as if sent
//     to that endpoint (server -> client:c);
//   - an endpoint that is a destination NAT rule's target (`to`, `to_port`) is hashed as the
//     rule's public endpoint (`dst`, `dst_port`), in either position: a connection through the
//     rule and a direct one to the target hash alike in both directions.
// Nothing is rewritten in the packet there: only m->hash.rss, which the rx adapter turns into
// the flow bucket. Ports without NAT pay nothing (no rewrite is installed).
//
// Port slots. One 64-bit word per (pool address, protocol, external port): the internal
// address, port and zone it maps, and how many sessions use it (8 bits: a mapping takes at
// most 255 sessions, and an endpoint's 256th connection at once gets a mapping of its own, as
// a CGNAT's sessions-per-mapping limit does; the zone took the other 8). Sessions of any flow
// bucket, on any worker, take and drop references with one compare-and-swap; the word is 0
// when free. Endpoint-independent mapping (RFC 4787 REQ-1): the mapping of an internal
// endpoint is found by probing the slots from a start its hash picks (kProbes slots at most,
// the rule's range if smaller); a new one is claimed in the first free slot of the same
// probe sequence, after which the sequence is scanned again and, should another worker have
// claimed a slot for the same endpoint meanwhile, the one nearer the start is kept by both.
// Two first connections of one endpoint whose claims and rescans interleave exactly may still
// leave with two mappings (each keeps its own for its lifetime); every later connection takes
// the one nearer the start. A rule whose probe window is full refuses the connection
// (nat_no_port), counted.
//
// Filtering is address- and port-dependent (RFC 4787 REQ-8 allows it; Linux masquerade does
// the same): a packet to a mapped pool port is translated only for a session its internal
// endpoint opened; anything else to the pool goes on untranslated to the later stages.
//
// IPv4 only (NAT44); TCP, UDP and ICMP echo (its identifier is the port). Fragments are not
// reassembled: a later fragment is translated as its first fragment was
// (pipeline/conntrack/fragment_table.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include <netinet/in.h>

#include "core/flow.h"

namespace vecflow {

// Which slot array a protocol uses.
enum class NatProto : uint8_t { Tcp, Udp, Icmp };
inline constexpr size_t kNatProtoCount = 3;
// Inline: every packet of a NAT port asks, twice.
inline std::optional<NatProto> nat_proto(uint8_t ip_proto) noexcept {
  switch (ip_proto) {
    case IPPROTO_TCP:
      return NatProto::Tcp;
    case IPPROTO_UDP:
      return NatProto::Udp;
    case IPPROTO_ICMP:
      return NatProto::Icmp;
    default:
      return std::nullopt;
  }
}

// An IPv4 endpoint as it sits in the header: address and port in network order. An internal
// endpoint of source NAT also names its VRF's conntrack zone (ConnKey): two tenants' 10.0.0.5:
// 4000 are two endpoints, each with its mapping, and a reply to either's pool port is de-NATed
// into its own VRF. 0 elsewhere (the default VRF; destination NAT's endpoints).
struct NatEndpoint {
  uint32_t addr = 0;
  uint16_t port = 0;
  uint8_t zone = 0;
  bool operator==(const NatEndpoint&) const = default;
};

// A destination NAT rule, resolved: packets entering through `in` to `dst`:`dst_port` are
// sent to `to`:`to_port` (network order).
struct DnatRule {
  uint16_t in = 0xffff;  // ingress PortId; kNoPort: any
  NatProto proto = NatProto::Tcp;
  NatEndpoint pub;     // dst, dst_port
  NatEndpoint target;  // to, to_port
};

class NatMap final : public FlowHashRewrite {
 public:
  static constexpr unsigned kProbes = 64;
  static constexpr unsigned kMaxPools = 255;

  static constexpr unsigned kMaxDnatRules = 255;

  // `pools`: the first SNAT addresses (network order), indexed as the rules name them.
  NatMap(const std::vector<uint32_t>& pools, const std::vector<DnatRule>& dnat);

  // ---- control thread ----
  // The index of pool address `addr`, added (its port words zeroed, then published) when new;
  // -1 when kMaxPools addresses are taken. Pools are never removed: a reload that drops a
  // rule leaves its address here, so the replies of the sessions that still use it are hashed
  // and translated until those sessions expire.
  int add_pool(uint32_t addr);
  // Puts `rules` in force for new connections (a reload). A rule keeps its index for good
  // (sessions name it): a rule seen before takes its old index, a new one the next; a rule
  // left out stops taking new connections, but its sessions keep translating until they
  // expire (as Linux keeps a NAT binding in its conntrack entry). False, and nothing changed,
  // when the new rules would pass kMaxDnatRules since start.
  bool set_dnat(const std::vector<DnatRule>& rules);

  // ---- any worker ----
  // The external port (network order) of `internal` in pool `pool` within [lo, hi] (host
  // order), one reference taken: its mapping, or a new one. nullopt: no free port in its
  // probe window.
  std::optional<uint16_t> acquire(unsigned pool, NatProto p, NatEndpoint internal, uint16_t lo,
                                  uint16_t hi) noexcept;
  // Drops a reference acquire() took; the port is free when the last goes.
  void release(unsigned pool, NatProto p, uint16_t ext_port) noexcept;
  // The internal endpoint pool `pool`'s `ext_port` maps (network order), if any.
  std::optional<NatEndpoint> internal(unsigned pool, NatProto p, uint16_t ext_port) const noexcept;
  // The pool index of a destination address (network order), or -1. Every received packet
  // of a NAT port asks, so it is an open-addressed index rather than a scan of the pools.
  int pool_of(uint32_t addr) const noexcept {
    for (uint32_t i = index_slot(addr);; i = (i + 1) & (kIndexSize - 1)) {
      const uint16_t v = index_[i].load(std::memory_order_acquire);
      if (v == 0) return -1;
      if (pools_[v - 1] == addr) return v - 1;
    }
  }
  uint32_t pool_address(unsigned pool) const noexcept { return pools_[pool]; }
  // The rule in force for a packet entering through `in` to `dst`, or -1.
  int dnat_match(uint16_t in, NatProto p, NatEndpoint dst) const noexcept;
  // The rule whose target is `e` (one in force first, then one retired), or -1.
  int dnat_target(NatProto p, NatEndpoint e) const noexcept;
  // Whether `addr` (network order) is the target address of a rule for `p`, whatever port.
  bool dnat_target_address(NatProto p, uint32_t addr) const noexcept;
  const DnatRule& dnat_rule(unsigned i) const noexcept { return dnat_[i]; }
  bool has_dnat() const noexcept { return ndnat_.load(std::memory_order_acquire) != 0; }

  // The rule whose public endpoint is `e` (whatever its ingress port; one in force first), or
  // -1.
  int dnat_public(NatProto p, NatEndpoint e) const noexcept;
  // Replaces a rule's target endpoint, in either position, by its public endpoint: the
  // endpoints a connection's flow hash is computed from. Returns whether one was replaced.
  bool to_public(NatProto p, NatEndpoint& src, NatEndpoint& dst) const noexcept;

  // The receive-side hash (see above), on each classified packet of a burst. A first IPv4
  // fragment is hashed as its connection, and its later fragments as it
  // (pipeline/conntrack/fragment_hash.h).
  void apply(rte_mbuf** pkts, uint16_t n) const noexcept override;
  bool translates() const noexcept override { return true; }

  // ---- control thread ----
  // Ports mapped in `pool` for `p` (a scan of its 65536 slots).
  uint32_t ports_in_use(unsigned pool, NatProto p) const noexcept;
  size_t pools() const noexcept { return npools_.load(std::memory_order_acquire); }

 private:
  // apply() on one packet: the hash of the connection a translation touches.
  void rehash(rte_mbuf* m) const noexcept;
  using Slots = std::array<std::atomic<uint64_t>, 65536>;
  using PoolSlots = std::array<Slots, kNatProtoCount>;
  Slots& slots(unsigned pool, NatProto p) const noexcept { return (*slots_[pool])[size_t(p)]; }

  // Pool index + 1 by address hash, 0 where free; at most half full, so a miss ends early.
  static constexpr uint32_t kIndexSize = 512;
  static uint32_t index_slot(uint32_t addr) noexcept { return (addr * 0x9e3779b1u) >> (32 - 9); }
  static_assert(kIndexSize == 1u << 9 && kIndexSize >= 2 * kMaxPools);

  // Written by the control thread before index_ and npools_ publish them; read by every lcore.
  std::array<uint32_t, kMaxPools> pools_{};
  std::array<std::atomic<uint16_t>, kIndexSize> index_{};
  std::array<std::unique_ptr<PoolSlots>, kMaxPools> slots_;
  std::atomic<uint32_t> npools_{0};

  // Destination NAT rules, append-only (their indexes live in sessions), each with whether
  // it is in force. Readers include the ports' receive path, which no grace period covers, so
  // nothing here is freed or moved while the map lives: a reload only appends and flips
  // flags. A packet racing a reload may see some flags old and some new, which only decides
  // whether its new connection takes the old rules or the new.
  template <typename Match>
  int find_dnat(Match match) const noexcept;
  std::array<DnatRule, kMaxDnatRules> dnat_{};
  std::array<std::atomic<bool>, kMaxDnatRules> in_force_{};
  std::atomic<uint32_t> ndnat_{0};
};

}  // namespace vecflow
