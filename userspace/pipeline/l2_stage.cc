#include "pipeline/l2_stage.h"

#include <cstring>
#include <set>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <rte_ether.h>

#include "core/packet.h"
#include "core/vlan.h"
#include "pipeline/packet_view.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

L2Stage::L2Stage(const config::StageConfig& cfg, StageContext& ctx)
    : PerPacketStage(cfg.type, cfg.name, ctx.lcore_slots), rewrite_(ctx.ports.size()) {
  for (size_t i = 0; i < ctx.ports.size(); ++i) {
    if (ctx.ports[i].mac != MacAddress{}) rewrite_[i].src = ctx.ports[i].mac;
  }
  for (const auto& p : cfg.params.get<L2Config>().ports) {
    Rewrite& w = rewrite_[ctx.port_index(p.port)];
    if (p.src_mac) w.src = p.src_mac;
    w.dst = p.dst_mac;
    w.vlan_push = p.vlan_push.value_or(0);
    w.vlan_pop = p.vlan_pop;
  }
}

void L2Stage::set_port(PortId id, const PortInfo& info) {
  if (to_index(id) >= rewrite_.size()) return;
  Rewrite& w = rewrite_[to_index(id)];
  w = Rewrite{};
  if (info.mac != MacAddress{}) w.src = info.mac;
}

Result<std::unique_ptr<L2Stage>> L2Stage::create(const config::StageConfig& cfg,
                                                 StageContext& ctx) {
  return std::unique_ptr<L2Stage>(new L2Stage(cfg, ctx));
}

void L2Stage::process_packet(rte_mbuf* m, VectorState&, StageEnv&) noexcept {
  const uint16_t out = meta(m).out_port;
  if (out >= rewrite_.size()) return;  // kNoPort: not placed
  const Rewrite& w = rewrite_[out];
  if (w.vlan_pop) vlan_pop(m);
  rte_ether_hdr* eth = pkt::eth(m);
  if (w.src) std::memcpy(eth->src_addr.addr_bytes, w.src->bytes.data(), RTE_ETHER_ADDR_LEN);
  if (w.dst) std::memcpy(eth->dst_addr.addr_bytes, w.dst->bytes.data(), RTE_ETHER_ADDR_LEN);
  if (w.vlan_push != 0 && !vlan_push(m, w.vlan_push)) set_drop(m, DropReason::NOMBUF);
}

namespace {

using Json = nlohmann::ordered_json;

Result<std::unique_ptr<Stage>> make_l2_stage(const config::StageConfig& cfg, StageContext& ctx) {
  auto s = L2Stage::create(cfg, ctx);
  if (!s) return std::unexpected(s.error());
  return std::unique_ptr<Stage>(std::move(*s));
}

L2Config read_l2(config::Ctx& ctx, config::MapReader& m) {
  L2Config s;
  config::for_each_item(
      ctx, m.child("ports"), m.key_path("ports"),
      [&](const YAML::Node& item, const std::string& ip) {
        config::MapReader r(ctx, item, ip, {"port", "src_mac", "dst_mac", "vlan_push", "vlan_pop"});
        if (!r.ok()) return;
        L2PortRewrite w;
        if (r.require("port")) r.get("port", w.port);
        r.get_mac("src_mac", w.src_mac);
        r.get_mac("dst_mac", w.dst_mac);
        uint16_t vlan = 0;
        if (r.get("vlan_push", vlan, 1, 4094)) w.vlan_push = vlan;
        r.get("vlan_pop", w.vlan_pop);
        s.ports.push_back(std::move(w));
      });
  return s;
}

void check_l2(config::StageCheck& c, const L2Config& l2) {
  std::set<std::string> seen;
  for (size_t li = 0; li < l2.ports.size(); ++li) {
    YAML::Node ln = c.node({"ports", li, "port"});
    std::string lp = c.path(fmt::format(".ports[{}].port", li));
    if (c.port_exists(l2.ports[li].port, ln, lp) && !seen.insert(l2.ports[li].port).second) {
      c.error(ln, lp, fmt::format("port '{}' listed twice", l2.ports[li].port));
    }
  }
}

Json l2_json(const L2Config& p) {
  Json ports = Json::array();
  for (const auto& r : p.ports) {
    ports.push_back({{"port", r.port},
                     {"src_mac", r.src_mac ? Json(r.src_mac->to_string()) : Json(nullptr)},
                     {"dst_mac", r.dst_mac ? Json(r.dst_mac->to_string()) : Json(nullptr)},
                     {"vlan_push", r.vlan_push ? Json(*r.vlan_push) : Json(nullptr)},
                     {"vlan_pop", r.vlan_pop}});
  }
  return {{"ports", std::move(ports)}};
}

}  // namespace

StageModule l2_stage_module() {
  return StageModule{config::stage_type<L2Config>("l2", {"ports"}, read_l2, l2_json, check_l2),
                     make_l2_stage,
                     nullptr,
                     {}};
}

}  // namespace vecflow
