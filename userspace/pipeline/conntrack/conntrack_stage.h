// The `conntrack` stage: tracks connections (TCP, UDP, ICMP echo and any other protocol over
// IPv4 and IPv6) and marks every IP packet for the stages after it (CtMark, core/packet.h):
//
//   new          the first packet of a connection, or one of its originator before any reply
//   established  a packet of a connection that has seen traffic both ways
//   related      an ICMP error about a tracked connection (the header it quotes)
//   invalid      fits no state: a TCP segment outside the window or with impossible flags, a
//                reset or SYN/ACK for no connection, an echo reply nobody asked for, an ICMP
//                error about no known connection
//
// An acl stage after it matches marks (`ct: [established, related]`); with `invalid: drop` the
// stage drops invalid packets itself (ct_invalid). A new connection that finds the table full
// is dropped (ct_table_full), never silently: existing sessions keep working.
//
// TCP follows a simplified state machine (syn_sent, syn_recv, established, fin_wait, time_wait,
// close) with the window checks Linux uses; a connection first seen mid-stream is picked up as
// established and its windows are not checked (as Linux with nf_conntrack_tcp_loose). Fragments
// are not reassembled (pipeline/conntrack/fragment_table.h): an IPv4 or IPv6 first fragment is
// tracked as its connection and the later fragments take what it became; those of a datagram whose
// first fragment was not seen are tracked by their addresses and protocol. Timeouts by state
// (ConnTimeouts) run from a session's last packet.
//
// NAT44 (`nat:`): source NAT of the connections a rule takes (entering through `in_port`,
// from `src`) to a pool address with endpoint-independent mapping over a port range, and
// destination NAT (port forwarding). The translation is per connection and lives in its
// session, as Linux's nf_nat and OVS's ct(nat) keep theirs in the conntrack entry: a session is
// keyed by the connection after destination NAT and before source NAT, and the stage
// translates each packet of a translated session (addresses, ports or the echo identifier;
// IPv4, TCP and UDP checksums updated incrementally). The stages after it see translated
// packets: destination NAT happens before routing, as it must, and so does source NAT (rules
// pick connections by ingress port and source, not by egress). A pool of several addresses
// is paired (RFC 4787 REQ-2): an internal address leaves from the one its hash picks, and
// from the next ones only while that one has no free port. Masquerade leaves from the
// address the port's kernel interface has when the connection opens (KernelSync): a session
// keeps the address it started with; while the port has none, new connections are refused
// as nat_no_port. Shared port state and the receive-side flow hash: pipeline/conntrack/nat_map.h. A
// new connection that finds no free port in its rule's range is dropped as nat_no_port.
//
// VRFs (pipeline/vrf.h): a connection is tracked in the zone of the VRF its originator sent it
// in, so two tenants' identical connections are two sessions, each with its NAT mapping. A
// reply to a pool port finds the zone with the mapping (a tenant's connection out through a
// shared uplink comes back de-NATed into the tenant's session), and a reply of a forwarded
// server, not found in its own zone, is looked up in the zone of the rule's ingress port. A
// packet whose session is of another VRF than its ingress port's carries that VRF
// (PacketMeta::vrf): the route stage routes it there. A connection across a route leak without
// NAT is two sessions, one per VRF (its replies look new in the other's zone).
//
// Scheduling: the stage must run on an atomic queue (its own or the group it is fused to),
// with flow-bucketed vectors and the symmetric software or XDP flow hash; the configuration
// check enforces it. That is what makes its table lock-free (pipeline/conntrack/conntrack_table.h).
#pragma once

#include <netinet/in.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "config/config.h"
#include "core/counter.h"
#include "core/offload_feed.h"
#include "pipeline/conntrack/conntrack_table.h"
#include "pipeline/conntrack/fragment_hash.h"
#include "pipeline/conntrack/fragment_table.h"
#include "pipeline/conntrack/nat_map.h"
#include "pipeline/rcu_ptr.h"
#include "pipeline/stage.h"
#include "pipeline/vrf.h"

namespace vecflow {

namespace tcp {
struct Segment;
}

// `nat.snat[i]`: connections entering through `in_port` from `src` leave from an address of
// `to`, or from the address of port `masquerade`'s kernel interface, with a source port of
// `ports`.
struct SnatRuleConfig {
  std::string in_port;
  std::optional<IpPrefix> src;  // any IPv4 source when absent
  std::vector<IpPrefix> to;     // the pool: addresses (/32) and every address of prefixes
  std::string masquerade;       // or this port's address, followed as it changes
  config::PortRange ports{1024, 65535};
};

// `nat.dnat[i]`: connections entering through `in_port` to `dst`:`dst_port` go to
// `to`:`to_port`.
struct DnatRuleConfig {
  std::string in_port;
  uint8_t proto = IPPROTO_TCP;
  IpAddress dst;
  uint16_t dst_port = 0;
  IpAddress to;
  uint16_t to_port = 0;
  bool operator==(const DnatRuleConfig&) const = default;
};

// The keys of a `stage: conntrack` entry (configs/reference.yaml).
struct ConntrackConfig {
  uint32_t max_sessions = 65536;
  bool drop_invalid = false;  // invalid: drop (else mark)
  ConnTimeouts timeouts;
  std::vector<SnatRuleConfig> snat;
  std::vector<DnatRuleConfig> dnat;
  bool nat() const noexcept { return !snat.empty() || !dnat.empty(); }
  // Whether a source NAT rule leaves from a port's kernel address (then the stage follows it).
  bool masquerades() const noexcept {
    return std::any_of(snat.begin(), snat.end(),
                       [](const SnatRuleConfig& r) { return !r.masquerade.empty(); });
  }
};

// The addresses of a source NAT pool (network order): each address of each prefix, each once,
// at most NatMap::kMaxPools + 1 of them (the check refuses more).
std::vector<uint32_t> nat_pool_addresses(const std::vector<IpPrefix>& to);

struct ConntrackCounters {
  std::array<uint64_t, kCtMarkCount> marks{};  // packets by CtMark
  uint64_t created = 0;
  uint64_t expired = 0;
  uint64_t table_full = 0;   // new connections refused
  uint64_t nat_no_port = 0;  // new connections refused: their rule's ports were all in use
  // Later fragments (IPv4, IPv6): of a datagram whose first fragment's outcome was known, and
  // of one not known (tracked by their addresses, or dropped as nat_fragment).
  uint64_t fragments_known = 0;
  uint64_t fragments_unknown = 0;
};

// `vecflowctl sessions` filters.
struct SessionFilter {
  std::optional<IpAddress> address;  // either end
  std::optional<uint16_t> port;      // either end, host order
  std::optional<ConnState> state;
  std::optional<uint8_t> zone;  // its VRF's id (zone_names())
};

class ConntrackStage final : public Stage, public PortAddressFollower, public OffloadSessions {
 public:
  static Result<std::unique_ptr<ConntrackStage>> create(const config::StageConfig& cfg,
                                                        StageContext& ctx);
  ~ConntrackStage() override;

  void process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept override;
  // "new", "established" ...
  size_t describe(rte_mbuf* m, std::span<char> out) const noexcept override;
  // Flow offload: a connection's flow is offloaded once it is established (TCP after the
  // handshake, UDP after a reply) with its translation fixed; until then, and for anything
  // else it tracks (ICMP, fragments, IPv4 options), its packets are kept in user space.
  bool offloadable() const noexcept override { return true; }
  // Keeps an offloaded flow's session alive for the protocol's established timeout.
  void keep_alive(uint32_t session, uint8_t l4_proto) noexcept override;

  // ---- control plane ----
  ConntrackCounters counters() const noexcept;
  // Live sessions by state.
  std::array<uint64_t, kConnStateCount> sessions_by_state() const;
  // Calls `fn` with each live session the filter takes (the control thread; a scan of the
  // whole table, each session read under its sequence count).
  void for_each_session(const SessionFilter& f,
                        const std::function<void(const ConnSnapshot&)>& fn) const;
  // All of them, for tests and small tables.
  std::vector<ConnSnapshot> sessions(const SessionFilter& f) const;
  const ConnTable& table() const noexcept { return *table_; }
  // The NAT's shared state, nullptr without `nat:`.
  const NatMap* nat() const noexcept { return nat_.get(); }
  // What every port runs over its received bursts for this stage: the NAT's hash (which
  // covers fragments), or the fragments' alone (pipeline/conntrack/fragment_hash.h).
  const FlowHashRewrite* flow_hash_rewrite() const noexcept override {
    return nat_ ? static_cast<const FlowHashRewrite*>(nat_.get()) : &fragment_rewrite_;
  }
  const ConntrackConfig& config() const noexcept { return cfg_; }
  // A reload of `nat`: the source and destination NAT rules are swapped in for new
  // connections (pools and forwarding rules are added, never removed: sessions keep their
  // mappings until they expire); adding NAT to a stage without it is refused (a restart), and
  // the stage keeps its rules. Control thread.
  Result<void> replace_nat(const ConntrackConfig& next, const StageContext& ctx);
  // Masquerade rules take their ports' new IPv4 addresses (KernelSync, control thread).
  void set_port_addresses(std::vector<PortAddresses> addresses) override;
  // The port's name for the next rules and zones built (a reload's NAT and VRF sections).
  void set_port(PortId id, const PortInfo& info) override;
  // A reload of `vrfs` (VRF ids kept, pipeline/vrf.h): the ports' zones from now on. Sessions
  // keep theirs. Control thread.
  Result<void> replace_vrfs(const std::vector<config::VrfConfig>& vrfs);
  // The VRF list in force (its places are the zones' ids), and the zones' names by id ("" for
  // a retired place).
  std::vector<config::VrfConfig> vrfs() const;
  std::vector<std::string> zone_names() const;
  uint64_t tsc_hz() const noexcept { return tsc_hz_; }

 private:
  ConntrackStage(const config::StageConfig& cfg, StageContext& ctx);

  struct alignas(64) LcoreState {
    std::array<Counter, kCtMarkCount> marks;
    Counter created;
    Counter expired;
    Counter table_full;
    Counter nat_no_port;
    Counter fragments_known;
    Counter fragments_unknown;
  };
  // What track() found: the packet's mark and session, or why a new connection was refused.
  struct Tracked {
    explicit Tracked(CtMark c, ConnEntry* e = nullptr, bool r = false) noexcept
        : mark(c), entry(e), reply(r) {}
    static Tracked refuse(DropReason why) noexcept {
      Tracked t(CtMark::Invalid);
      t.refused = why;
      return t;
    }
    CtMark mark = CtMark::Invalid;
    ConnEntry* entry = nullptr;  // nullptr for related, invalid-without-session, refused
    bool reply = false;
    std::optional<DropReason> refused;  // CT_TABLE_FULL, NAT_NO_PORT, NAT_FRAGMENT
  };
  // What the NAT made of a packet's key before the lookup (nat_key).
  struct NatPre {
    int dnat_rule = -1;  // an original to a rule's public endpoint
    int pool = -1;       // a packet to a mapped pool port, its key translated back
  };
  // The session the previous packet of a process() call found (or opened), by what decided
  // the lookup: the key as received, hash, ingress port and shape; kept only when the next
  // packet carries the same flow hash. The next packet alike takes it without a lookup, so a
  // run of a flow's packets in a vector is looked up once. Only the
  // packet just before is remembered, so nothing ran between the two lookups that could have
  // changed the answer; sessions never move in the table, and one found live at the call's
  // tick stays live until the call ends.
  struct LastLookup {
    ConnEntry* entry = nullptr;
    uint32_t hash = 0;
    uint16_t port = 0;  // the ingress port (destination NAT rules match it)
    uint8_t shape = 0;  // fragment, ICMP echo: they change how the key is looked up
    bool reply = false;
    ConnKey key;  // as received, before nat_key
  };
  // The most common packets on a path of their own: a UDP datagram or a TCP ACK of an
  // established connection, IPv4, not a fragment, whose live session is in its first bucket.
  // Marks, counts and translates it as track() and process() would; false for any other
  // packet, which track() then takes (the sessions it may have read are left as they were).
  // Measured at 1024 flows (UDP, source NAT, one lcore): the stage's cycles a packet 80 -> 57;
  // track() builds a Tracked, copies the key for the next packet, and keeps every case apart.
  // `slot` and `offering` for flow offload (vouch()).
  bool track_established(rte_mbuf* m, uint64_t tsc, uint32_t now,
                         std::array<uint64_t, kCtMarkCount>& marks, unsigned slot,
                         bool offering) noexcept;
  // Flow offload, before the packet is translated (it still has the tuple XDP will look up):
  // vouches for the flow of packet `m` of session `e` (its origin and session noted in the
  // feed, kMetaFlagTracked; a TCP session stops having its windows checked, as Linux's
  // flowtable makes such connections liberal, so that the FIN or RST that comes back to user
  // space still closes it), or keeps it in user space (kMetaFlagKeep).
  void vouch(rte_mbuf* m, ConnEntry* e, unsigned slot, uint64_t tsc) noexcept;
  // A datagram of session `e` (not TCP): its counters, reply state and expiry. Its mark.
  CtMark count_datagram(ConnEntry* e, bool reply, const rte_mbuf* m, uint64_t tsc,
                        uint32_t now) noexcept;
  // The session of `k` (nullptr: none), `reply` whether the packet goes against it, `pre` what
  // the NAT made of the key; `k` as the session is keyed.
  ConnEntry* find(const rte_mbuf* m, ConnKey& k, bool fragment, bool echo, uint32_t now,
                  LcoreState& st, LastLookup& last, bool run_follows, NatPre& pre,
                  bool& reply) noexcept;
  // The session of a forwarded server's reply `k` not found in its own zone: looked up in the
  // zone of the ingress port of the rule that forwards to it (a port forwarding into another
  // VRF). nullptr, and `k` as it was, when there is none.
  ConnEntry* find_forwarded(ConnKey& k, uint32_t hash, uint32_t now, bool& reply,
                            uint64_t& expired) noexcept;
  Tracked tcp_segment(const rte_mbuf* m, ConnEntry* e, const tcp::Segment& g, bool reply,
                      uint64_t tsc, uint32_t now) noexcept;
  // `run_follows`: the next packet has this one's flow hash (worth remembering the lookup).
  Tracked track(rte_mbuf* m, uint64_t tsc, uint32_t now, LcoreState& st, LastLookup& last,
                bool run_follows) noexcept;
  // NAT, before the lookup: translates `k` back to what the session is keyed by.
  // `echo`: an ICMP echo, whose identifier stands in both ports.
  NatPre nat_key(const rte_mbuf* m, ConnKey& k, bool echo) const noexcept;
  // NAT, on a new session: binds its translation. False: no port (the session is removed).
  bool nat_open(ConnEntry* e, const rte_mbuf* m, const NatPre& pre) noexcept;
  // NAT, on an IPv4 fragment: whether its source is one the NAT rewrites (a source NAT rule
  // takes it, or it is a forwarded server answering).
  bool fragment_source_translated(const rte_mbuf* m, const ConnKey& k) const noexcept;
  // A later IPv4 fragment whose first fragment was seen: its addresses as the first fragment
  // left with (changed only by NAT).
  static void translate_fragment(rte_mbuf* m, const FragmentTable::Outcome& o) noexcept;
  // NAT, on each packet of a translated session.
  void nat_apply(rte_mbuf* m, const ConnEntry& e, bool reply) const noexcept;
  static void nat_release(void* self, const ConnEntry& e) noexcept;
  // An ICMP error: related to the session it quotes, or invalid. With NAT, the error and its
  // quote are translated for the sender of the quoted packet.
  CtMark related(rte_mbuf* m, uint8_t* l4, uint32_t now) const noexcept;
  void nat_related(rte_mbuf* m, uint8_t* l4, uint8_t* in, uint8_t* il4, const uint8_t* end,
                   const ConnSnapshot& s, bool reply) const noexcept;
  uint32_t expiry(ConnState s, uint32_t now) const noexcept { return now + ticks_[size_t(s)]; }
  // Without VRFs a constant: the port's zone, loaded, held up the key every lookup compares
  // (conntrack+acl+route+neighbour at 1024 flows: the stage 65 -> 74 cycles a packet).
  uint8_t zone_of(uint16_t port) const noexcept {
    if (!zoned_.load(std::memory_order_relaxed)) return kDefaultVrfId;
    return zones_[port].load(std::memory_order_relaxed);
  }
  // A packet of session zone `zone` arrived in another, its port's `own`: it is routed in the
  // session's VRF.
  static void route_in_zone(rte_mbuf* m, uint8_t zone, uint8_t own) noexcept {
    if (zone != own) [[unlikely]]
      meta(m).vrf = static_cast<uint16_t>(zone + 1);
  }

  ConntrackConfig cfg_;
  uint64_t tsc_hz_;
  std::array<uint32_t, kConnStateCount> ticks_{};  // timeouts in table ticks
  std::unique_ptr<ConnTable> table_;
  OffloadFeed* offload_;
  std::unique_ptr<NatMap> nat_;
  // What each first fragment became, for its later fragments.
  std::unique_ptr<FragmentTable> fragments_;
  FragmentHashRewrite fragment_rewrite_;
  uint32_t fragment_ticks_ = 1;  // how long a first fragment's outcome is kept
  struct SnatRule {
    uint16_t in_port;
    uint32_t src, mask;          // network order
    std::vector<uint8_t> pools;  // NatMap pool indexes; none: a masquerade port without address
    uint16_t lo, hi;             // host order
  };
  // nullptr without nat; replaced by a reload of nat.snat and when a masquerade port's
  // address changes, both under nat_mutex_.
  std::unique_ptr<RcuPtr<std::vector<SnatRule>>> snat_;
  mutable std::mutex nat_mutex_;
  // The zone of each port's packets, by PortId (any 16-bit port id: a packet's m->port indexes
  // it without a check); replaced by a reload of `vrfs`.
  std::unique_ptr<std::atomic<uint8_t>[]> zones_;
  std::atomic<bool> zoned_{false};       // a port is in a VRF
  std::vector<config::VrfConfig> vrfs_;  // under nat_mutex_
  std::vector<uint32_t> port_v4_;        // by PortId, network order, 0: none (KernelSync)
  std::vector<PortInfo> ports_;
  KernelSync* kernel_ = nullptr;
  bool follows_addresses_ = false;
  Result<std::vector<SnatRule>> snat_rules(const std::vector<SnatRuleConfig>& rules);
  std::vector<DnatRule> dnat_rules(const std::vector<DnatRuleConfig>& rules) const;
  // Checks the ports masquerade rules name and follows their addresses from then on.
  Result<void> masquerade_ports(const ConntrackConfig& cfg);
  std::unique_ptr<LcoreState[]> lcores_;
  unsigned slots_;
  Qsbr* qsbr_;
};

struct StageModule;
// The conntrack stage type: its configuration and factory.
StageModule conntrack_stage_module();

}  // namespace vecflow
