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
// are not reassembled: each is tracked by its addresses and protocol only. Timeouts by state
// (ConnTimeouts) run from a session's last packet.
//
// Scheduling: the stage must run on an atomic queue (its own or the group it is fused to),
// with flow-bucketed vectors and the symmetric software or XDP flow hash; the configuration
// check enforces it. That is what makes its table lock-free (pipeline/conntrack_table.h).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "config/config.h"
#include "core/counter.h"
#include "pipeline/conntrack_table.h"
#include "pipeline/stage.h"

namespace vecflow {

// The keys of a `stage: conntrack` entry (configs/reference.yaml).
struct ConntrackConfig {
  uint32_t max_sessions = 65536;
  bool drop_invalid = false;  // invalid: drop (else mark)
  ConnTimeouts timeouts;
};

struct ConntrackCounters {
  std::array<uint64_t, kCtMarkCount> marks{};  // packets by CtMark
  uint64_t created = 0;
  uint64_t expired = 0;
  uint64_t table_full = 0;  // new connections refused
};

// `vecflowctl sessions` filters.
struct SessionFilter {
  std::optional<IpAddress> address;  // either end
  std::optional<uint16_t> port;      // either end, host order
  std::optional<ConnState> state;
};

class ConntrackStage final : public Stage {
 public:
  static Result<std::unique_ptr<ConntrackStage>> create(const config::StageConfig& cfg,
                                                        StageContext& ctx);

  void process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept override;
  // "new", "established" ...
  size_t describe(rte_mbuf* m, std::span<char> out) const noexcept override;

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
  uint64_t tsc_hz() const noexcept { return tsc_hz_; }

 private:
  ConntrackStage(const config::StageConfig& cfg, StageContext& ctx);

  struct alignas(64) LcoreState {
    std::array<Counter, kCtMarkCount> marks;
    Counter created;
    Counter expired;
    Counter table_full;
  };
  // A packet's mark, its session created or updated; nullopt: refused (table full).
  std::optional<CtMark> track(rte_mbuf* m, uint64_t tsc, uint32_t now, LcoreState& st) noexcept;
  CtMark related(const rte_mbuf* m, const uint8_t* l4, uint32_t now) const noexcept;
  uint32_t expiry(ConnState s, uint32_t now) const noexcept { return now + ticks_[size_t(s)]; }

  ConntrackConfig cfg_;
  uint64_t tsc_hz_;
  std::array<uint32_t, kConnStateCount> ticks_{};  // timeouts in table ticks
  std::unique_ptr<ConnTable> table_;
  std::unique_ptr<LcoreState[]> lcores_;
  unsigned slots_;
};

std::string_view ct_mark_name(CtMark c) noexcept;
std::optional<CtMark> ct_mark_from_name(std::string_view name) noexcept;

struct StageModule;
// The conntrack stage type: its configuration and factory.
StageModule conntrack_stage_module();

}  // namespace vecflow
