// The `acl` stage: permits, denies or rejects IPv4/IPv6 packets by 5-tuple (AclTable), counting
// every packet under the rule that decided it (or the default action). Denied packets are
// dropped (acl_deny); rejected ones are dropped (acl_reject) and answered with ICMP
// administratively prohibited, as nftables' `reject with icmp admin-prohibited`, within the
// limits of icmp_responder.h; permitted ones go on. Frames that are not IP pass untouched: ARP must
// reach the kernel, and the route stage decides what else happens to them.
//
// The rule set is replaced while traffic runs (replace_rules): a new table is compiled, swapped
// in under RCU, and rules kept from the old set keep their counts.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/config.h"
#include "pipeline/acl/acl_table.h"
#include "pipeline/icmp_responder.h"
#include "pipeline/rcu_ptr.h"
#include "pipeline/stage.h"

namespace vecflow {

// One line of `vecflowctl acl`.
struct AclRuleReport {
  std::string name;  // "default" for the default action
  AclAction action = AclAction::Permit;
  config::FiveTupleMatch match;  // empty for the default action
  std::optional<std::string> in_port;
  std::vector<CtMark> ct;
  AclRuleCount count;
};

class AclStage final : public Stage {
 public:
  bool reads_flow_hash() const noexcept override { return false; }
  bool offloadable() const noexcept override { return true; }
  // Packets classified per rte_acl_classify call.
  static constexpr unsigned kClassifyBatch = 64;

  static Result<std::unique_ptr<AclStage>> create(const config::StageConfig& cfg,
                                                  StageContext& ctx);

  void process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept override;
  // The port's name for in_port in the next rule set built, and its MAC for rejects.
  void set_port(PortId id, const PortInfo& info) override;
  // The rule that decided the packet ("deny block-ssh", "permit default").
  size_t describe(rte_mbuf* m, std::span<char> out) const noexcept override;

  // ---- control plane ----
  // Compiles and swaps in a new rule set; on failure the one in force stays.
  Result<void> replace_rules(const AclConfig& acl);
  // The rules in force with their counters, the default action last.
  std::vector<AclRuleReport> rules() const;
  // The table in force (tests, benchmarks). Valid until the next replace_rules().
  const AclTable& table() const noexcept { return *table_.load(); }
  // Who answers `reject`, from which address, how often (tests give it addresses directly).
  IcmpResponder& icmp_responder() noexcept { return *icmp_responder_; }

 private:
  AclStage(const config::StageConfig& cfg, StageContext& ctx);

  Qsbr* qsbr_;
  OffloadFeed* offload_;
  unsigned slots_;
  std::unique_ptr<IcmpResponder> icmp_responder_;
  std::vector<std::string> ports_;  // names by PortId, for in_port
  RcuPtr<AclTable> table_;
  mutable std::mutex mutex_;  // control plane only
};

struct StageModule;
// The acl stage type: its configuration, factory and live reload of its rules.
StageModule acl_stage_module();

}  // namespace vecflow
