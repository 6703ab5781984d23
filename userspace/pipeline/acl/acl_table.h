// An ACL as the data path reads it: the rules compiled by DPDK's rte_acl (a multi-bit trie over
// the 5-tuple, classified a vector at a time with SIMD), one context per IP version, plus
// per-rule, per-lcore counters.
//
// Semantics: the first rule whose every given field matches decides (permit, deny or reject); no
// match takes the default action. A rule with IPv4 prefixes only matches IPv4 packets, one
// with IPv6 prefixes IPv6 packets, one without prefixes both. Port ranges compare the TCP,
// UDP or SCTP ports; a packet without readable ports (another protocol, or a fragment) is
// matched with both ports 0.
//
// Immutable once built, like RouteTable: AclStage swaps whole tables under RCU.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <rte_acl.h>

#include "config/config.h"
#include "core/counter.h"
#include "core/dpdk_util.h"
#include "core/error.h"
#include "core/packet.h"

namespace vecflow {

// An ACL as the file gives it (stage: acl).
// Reject: a deny that answers the sender (ICMP administratively prohibited, acl_stage.h).
enum class AclAction : uint8_t { Permit, Deny, Reject };
// "permit", "deny", "reject": the file's words, also what vecflowctl and traces show.
constexpr std::string_view acl_action_name(AclAction a) noexcept {
  switch (a) {
    case AclAction::Permit:
      return "permit";
    case AclAction::Deny:
      return "deny";
    case AclAction::Reject:
      return "reject";
  }
  return "?";
}

struct AclRule {
  std::string name;
  AclAction action = AclAction::Deny;
  config::FiveTupleMatch match;
  std::optional<std::string> in_port;  // the port the packet came in on
  std::vector<CtMark> ct;              // any of these conntrack marks; empty: any packet
  config::Location where;
};

struct AclConfig {
  AclAction default_action = AclAction::Permit;
  std::vector<AclRule> rules;
  // Whether a rule matches the ingress port or the conntrack mark: the keys then carry them.
  bool uses_context() const noexcept;
};

// The 5-tuple in the layout the rte_acl field definitions describe (wire byte order), built
// per packet on the worker's stack, then the ingress port and the conntrack mark as a bit
// (1 << CtMark), which the field definitions include only when a rule uses them.
struct AclKey4 {
  uint8_t proto;
  uint8_t pad[3];
  uint32_t src;
  uint32_t dst;
  uint16_t src_port;
  uint16_t dst_port;
  uint16_t in_port;
  uint16_t ct;
};
struct AclKey6 {
  uint8_t proto;
  uint8_t pad[3];
  uint8_t src[16];
  uint8_t dst[16];
  uint16_t src_port;
  uint16_t dst_port;
  uint16_t in_port;
  uint16_t ct;
};

struct AclRuleCount {
  uint64_t packets = 0;
  uint64_t bytes = 0;
};

class AclTable {
 public:
  // Result of a classification that matched no rule.
  static constexpr uint32_t kNoMatch = 0;

  // `ports`: the port names by PortId, for the rules' in_port.
  static Result<std::unique_ptr<AclTable>> build(const AclConfig& acl, unsigned lcore_slots,
                                                 const std::vector<std::string>& ports = {});

  // ---- data path ----
  // For each key, 0 (no match) or 1 + the index of the deciding rule.
  void classify4(const uint8_t** keys, uint32_t* results, uint32_t n) const noexcept {
    if (ctx4_) {
      rte_acl_classify(ctx4_.get(), keys, results, n, 1);
    } else {
      for (uint32_t i = 0; i < n; ++i)
        results[i] = kNoMatch;
    }
  }
  void classify6(const uint8_t** keys, uint32_t* results, uint32_t n) const noexcept {
    if (ctx6_) {
      rte_acl_classify(ctx6_.get(), keys, results, n, 1);
    } else {
      for (uint32_t i = 0; i < n; ++i)
        results[i] = kNoMatch;
    }
  }
  // What a classification result does to the packet.
  AclAction action(uint32_t result) const noexcept { return actions_[result]; }
  bool permits(uint32_t result) const noexcept { return action(result) == AclAction::Permit; }
  // Counts a packet under its result (rule or default) on lcore `slot`.
  void count(unsigned slot, uint32_t result, uint32_t bytes) noexcept {
    Slot& s = slots()[size_t(slot) * stride_ + result];
    s.packets.add();
    s.bytes.add(bytes);
  }

  // ---- control plane ----
  const AclConfig& config() const noexcept { return acl_; }
  // Counts of result i (0: default action, 1 + k: rule k), summed over lcores, plus what was
  // carried over from the table this one replaced.
  AclRuleCount total(uint32_t result) const noexcept;
  // Carries the totals of `old`'s rules over to the identical rules (same name and fields) of
  // this table, so that replacing an ACL does not reset the counters of rules it keeps.
  void carry_over(const AclTable& old);

 private:
  struct Slot {
    Counter packets;
    Counter bytes;
  };
  // Counters are allocated in cache lines, and each lcore's run starts on a line of its own.
  struct alignas(64) Line {
    Slot slot[4];
  };
  static_assert(sizeof(Line) == 4 * sizeof(Slot));
  AclTable() = default;
  Slot* slots() const noexcept { return reinterpret_cast<Slot*>(lines_.get()); }

  AclConfig acl_;
  DpdkPtr<rte_acl_ctx> ctx4_;
  DpdkPtr<rte_acl_ctx> ctx6_;
  std::vector<AclAction> actions_;  // by result
  size_t stride_ = 0;               // counters per lcore: rules + 1, rounded up to a line
  unsigned lcores_ = 0;
  std::unique_ptr<Line[]> lines_;
  std::vector<AclRuleCount> base_;  // by result: carried over
};

// Whether two rules are the same rule (name, action and match): counters carry over.
bool same_acl_rule(const AclRule& a, const AclRule& b) noexcept;

}  // namespace vecflow
