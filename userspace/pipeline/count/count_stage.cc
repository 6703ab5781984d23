#include "pipeline/count/count_stage.h"

#include <algorithm>
#include <map>

#include <nlohmann/json.hpp>

#include <rte_errno.h>
#include <rte_hash.h>
#include <rte_hash_crc.h>

#include "core/packet.h"
#include "pipeline/count/count_commands.h"
#include "pipeline/packet_view.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

CountStage::CountStage(const config::StageConfig& cfg, StageContext& ctx)
    : PerPacketStage(cfg.type, cfg.name, ctx.lcore_slots), by_(cfg.params.get<CountConfig>().by) {}

CountStage::~CountStage() = default;

Result<std::unique_ptr<CountStage>> CountStage::create(const config::StageConfig& cfg,
                                                       StageContext& ctx) {
  const auto& p = cfg.params.get<CountConfig>();
  std::unique_ptr<CountStage> s(new CountStage(cfg, ctx));
  for (unsigned l = 0; l < ctx.lcore_slots; ++l) {
    if (p.by == CountBy::Rule) {
      s->rule_slots_ = ctx.steer_rules + 1;
      s->rules_.emplace_back(new RuleSlot[s->rule_slots_]);
      continue;
    }
    auto t = std::make_unique<FlowTable>();
    std::string name = dpdk_name("flows");
    rte_hash_parameters hp{};
    hp.name = name.c_str();
    // rte_hash refuses fewer entries than one bucket holds (8); the flow limit is `used`.
    constexpr uint32_t kMinHashEntries = 8;
    const uint32_t entries = std::max(p.max_flows, kMinHashEntries);
    hp.entries = entries;
    hp.key_len = sizeof(FlowKey);
    hp.hash_func = rte_hash_crc;
    hp.socket_id = SOCKET_ID_ANY;
    // One writer (the lcore) and no reader of the hash itself (the control plane reads the
    // slots), so no concurrency flags; the extendable table lets all max_flows keys fit.
    hp.extra_flag = RTE_HASH_EXTRA_FLAGS_EXT_TABLE;
    t->hash.reset(rte_hash_create(&hp));
    if (!t->hash) return fail("cannot create a flow table: {}", rte_strerror(rte_errno));
    t->slots.reset(new FlowSlot[entries]);
    t->slots_size = entries;
    t->capacity = p.max_flows;
    s->flows_.push_back(std::move(t));
  }
  return s;
}

void CountStage::process_packet(rte_mbuf* m, VectorState& vs, StageEnv&) noexcept {
  if (by_ == CountBy::Rule) {
    // Rule ids index steering.rules; kNoRule (and anything past the rules) takes the last slot.
    const uint32_t rule = std::min(meta(m).steer_rule, rule_slots_ - 1);
    RuleSlot& r = rules_[vs.slot][rule];
    r.packets.add();
    r.bytes.add(m->pkt_len);
    return;
  }
  FlowTable& t = *flows_[vs.slot];
  if (!pkt::is_ipv4(m) && !pkt::is_ipv6(m)) {
    t.untracked.add();
    return;
  }
  const FlowKey key = pkt::flow_key(m);
  const hash_sig_t sig = rte_hash_hash(t.hash.get(), &key);
  int pos = rte_hash_lookup_with_hash(t.hash.get(), &key, sig);
  if (pos < 0) {
    if (t.used.load(std::memory_order_relaxed) >= t.capacity) {
      t.untracked.add();
      return;
    }
    pos = rte_hash_add_key_with_hash(t.hash.get(), &key, sig);
    if (pos < 0) {
      t.untracked.add();
      return;
    }
    FlowSlot& fresh = t.slots[pos];
    fresh.key = key;
    fresh.valid.store(true, std::memory_order_release);
    t.used.store(t.used.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
  FlowSlot& slot = t.slots[pos];
  slot.packets.add();
  slot.bytes.add(m->pkt_len);
}

std::vector<FlowCount> CountStage::top_flows(size_t n, FlowOrder order) const {
  auto less = [](const FlowKey& a, const FlowKey& b) {
    return std::memcmp(&a, &b, sizeof(FlowKey)) < 0;
  };
  std::map<FlowKey, FlowCount, decltype(less)> merged(less);
  for (const auto& t : flows_) {
    for (uint32_t i = 0; i < t->slots_size; ++i) {
      const FlowSlot& s = t->slots[i];
      if (!s.valid.load(std::memory_order_acquire)) continue;
      FlowCount& c = merged[s.key];
      c.key = s.key;
      c.packets += s.packets.load();
      c.bytes += s.bytes.load();
    }
  }
  std::vector<FlowCount> out;
  out.reserve(merged.size());
  for (auto& [k, c] : merged)
    out.push_back(c);
  const bool by_bytes = order == FlowOrder::Bytes;
  auto before = [by_bytes, &less](const FlowCount& a, const FlowCount& b) {
    uint64_t a1 = by_bytes ? a.bytes : a.packets, b1 = by_bytes ? b.bytes : b.packets;
    uint64_t a2 = by_bytes ? a.packets : a.bytes, b2 = by_bytes ? b.packets : b.bytes;
    if (a1 != b1) return a1 > b1;
    if (a2 != b2) return a2 > b2;
    return less(a.key, b.key);
  };
  n = std::min(n, out.size());
  std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), out.end(), before);
  out.resize(n);
  return out;
}

size_t CountStage::tracked() const noexcept {
  size_t n = 0;
  for (const auto& t : flows_)
    n += t->used.load(std::memory_order_relaxed);
  return n;
}

uint64_t CountStage::untracked() const noexcept {
  uint64_t n = 0;
  for (const auto& t : flows_)
    n += t->untracked.load();
  return n;
}

std::vector<RuleCount> CountStage::rules() const {
  std::vector<RuleCount> out;
  if (rules_.empty()) return out;
  for (uint32_t r = 0; r < rule_slots_; ++r) {
    RuleCount c{r + 1 == rule_slots_ ? kNoRule : r, 0, 0};
    for (const auto& l : rules_) {
      c.packets += l[r].packets.load();
      c.bytes += l[r].bytes.load();
    }
    if (c.packets) out.push_back(c);
  }
  return out;
}

namespace {

using Json = nlohmann::ordered_json;

Result<std::unique_ptr<Stage>> make_count_stage(const config::StageConfig& cfg, StageContext& ctx) {
  auto s = CountStage::create(cfg, ctx);
  if (!s) return std::unexpected(s.error());
  return std::unique_ptr<Stage>(std::move(*s));
}

CountConfig read_count(config::Ctx&, config::MapReader& m) {
  CountConfig s;
  m.get_enum<CountBy>("by", s.by, {{"flow", CountBy::Flow}, {"rule", CountBy::Rule}});
  m.get("max_flows", s.max_flows, 1, 16u << 20);
  return s;
}

Json count_json(const CountConfig& p) {
  return {{"by", p.by == CountBy::Flow ? "flow" : "rule"}, {"max_flows", p.max_flows}};
}

}  // namespace

StageModule count_stage_module() {
  return StageModule{
      config::stage_type<CountConfig>("count", {"by", "max_flows"}, read_count, count_json),
      make_count_stage,
      nullptr,
      {},
      control::add_count_commands};
}

}  // namespace vecflow
