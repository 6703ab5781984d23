// Who sends the ICMP errors of a stage, and how often: the source address (the ingress port's
// kernel address, followed through KernelSync), the source MAC (the port's), and the rate
// limits, in one place for every stage that answers (route: time exceeded, unreachable, too
// big; acl: administratively prohibited).
//
// Rate limits, as Linux's (net/ipv4/icmp.c, net/ipv6/icmp.c), with its defaults unless the
// file's `icmp:` section says otherwise (config::IcmpSection):
//   - per destination of the error (the offending packet's source): a token bucket of one
//     error a second with a burst of six (icmp_ratelimit 1000 ms, XRLIM_BURST_FACTOR 6), so
//     that one host's flood or a routing loop cannot draw more than a trickle;
//   - per kind and lcore, 1000 errors a second at most, so that a flood from many sources
//     cannot make the box an ICMP source (icmp_msgs_per_sec);
//   - fragmentation needed and packet too big are exempt from the per-destination limit
//     (Linux exempts them from all: path MTU discovery must never stall), kept under their own
//     per-lcore cap.
// A packet whose answer the limits withhold is dropped as icmp_limited (the stage counts its
// cause: ttl_expired, no_route, ...), and counted as `limited`; the limits are asked before
// the builder's own rules, so over the limit a packet that would get no answer anyway (an
// ICMP error, a later fragment) counts as icmp_limited too.
//
// Per-destination state is a direct-mapped table per lcore (kDestinations entries, keyed by
// the address's hash): fixed memory, no allocation on the packet path; a destination that
// collides takes the slot over with a fresh bucket, as Linux's inetpeer cache evicts. Threads:
// answer() on the lcore of `slot`; set_port_addresses() on the control thread (RCU).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <rte_mbuf.h>

#include "core/counter.h"
#include "core/drop_reason.h"
#include "core/packet.h"
#include "pipeline/rcu_ptr.h"
#include "pipeline/stage.h"

namespace vecflow {

class IcmpResponder final : public PortAddressFollower {
 public:
  enum class Kind : uint8_t { Expired, Unreachable, TooBig, Prohibited };
  static constexpr unsigned kKinds = 4;
  static constexpr unsigned kDestinations = 1024;  // per lcore, a power of two

  // Follows the ports' addresses where the pipeline has a KernelSync (else it answers nothing:
  // without an address there is no source for an error).
  static Result<std::unique_ptr<IcmpResponder>> create(StageContext& ctx);
  ~IcmpResponder();

  // Makes `m` the answer of `kind` (build4(m, src_be, mac) / build6(m, src, mac), the builders
  // of icmp_error.h) and hands it to `env` as answered under `reason`, or drops it as
  // icmp_limited when a limit withholds the answer; returns false, leaving `m` for the caller
  // to drop under `reason`, when no answer is due (no address on the ingress port, or the
  // builder's own rules: never about an ICMP error, a later fragment, a multicast source).
  template <typename Build4, typename Build6>
  bool answer(rte_mbuf* m, bool v6, Kind kind, DropReason reason, StageEnv& env, Build4 build4,
              Build6 build6) noexcept;

  void set_port_addresses(std::vector<PortAddresses> addresses) override;
  // Stage::set_port: the MAC errors leave a new port with.
  void set_port(PortId id, const PortInfo& info);

  uint64_t sent() const noexcept;
  uint64_t limited() const noexcept;

 private:
  struct AddressSet {
    std::vector<PortAddresses> by_port;
  };
  // One destination's tokens, in TSC ticks: an error costs one interval.
  struct DestBucket {
    uint64_t key = 0;  // hash of version and address; 0: empty
    uint64_t last = 0;
    uint64_t tokens = 0;
  };
  struct alignas(64) LcoreState {
    Counter sent, limited;
    uint64_t window[kKinds] = {};  // TSC start of each kind's current second
    uint32_t in_window[kKinds] = {};
    DestBucket dests[kDestinations];
  };

  explicit IcmpResponder(StageContext& ctx);
  // Whether the per-kind cap and the destination's bucket allow one more error now.
  bool allows(LcoreState& st, Kind kind, const rte_mbuf* m, bool v6, uint64_t now) noexcept;

  std::vector<PortInfo> ports_;
  Qsbr* qsbr_;
  KernelSync* kernel_;
  uint64_t tsc_hz_;
  uint64_t interval_;    // TSC ticks of the per-destination interval; 0: no such limit
  uint64_t bucket_;      // TSC ticks a full bucket holds (burst x interval)
  uint32_t per_second_;  // per kind and lcore; 0: no limit
  std::unique_ptr<LcoreState[]> lcores_;
  unsigned slots_;
  RcuPtr<AddressSet> addresses_;
  std::mutex mutex_;  // control plane only
};

template <typename Build4, typename Build6>
bool IcmpResponder::answer(rte_mbuf* m, bool v6, Kind kind, DropReason reason, StageEnv& env,
                           Build4 build4, Build6 build6) noexcept {
  const AddressSet* addrs = addresses_.load();
  if (m->port >= addrs->by_port.size()) return false;
  const PortAddresses& a = addrs->by_port[m->port];
  if (!(v6 ? a.v6.has_value() : a.v4.has_value())) return false;
  LcoreState& st = lcores_[env.slot()];
  if (!allows(st, kind, m, v6, env.now())) {
    st.limited.add();
    set_drop(m, DropReason::ICMP_LIMITED);
    return true;
  }
  const MacAddress& mac = ports_[m->port].mac;
  bool built;
  if (v6) {
    built = build6(m, a.v6->bytes.data(), mac);
  } else {
    uint32_t src_be;
    std::memcpy(&src_be, a.v4->bytes.data(), 4);
    built = build4(m, src_be, mac);
  }
  if (!built) return false;
  ++st.in_window[static_cast<unsigned>(kind)];
  st.sent.add();
  env.answered(m, reason);
  return true;
}

}  // namespace vecflow
