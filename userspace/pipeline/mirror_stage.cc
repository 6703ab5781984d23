#include "pipeline/mirror_stage.h"

#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <rte_errno.h>
#include <rte_mbuf.h>
#include <rte_mempool.h>

#include "core/dpdk_util.h"
#include "core/packet.h"
#include "pipeline/stage_registry.h"

namespace vecflow {

MirrorStage::MirrorStage(const config::StageConfig& cfg, StageContext& ctx)
    : Stage(cfg.type, cfg.name, ctx.lcore_slots),
      match_(cfg.params.get<MirrorConfig>().match),
      snaplen_(cfg.params.get<MirrorConfig>().snaplen),
      lcores_(new LcoreState[ctx.lcore_slots]),
      slots_(ctx.lcore_slots) {}

MirrorStage::~MirrorStage() {
  if (pool_ != nullptr) rte_mempool_free(pool_);
}

Result<std::unique_ptr<MirrorStage>> MirrorStage::create(const config::StageConfig& cfg,
                                                         StageContext& ctx) {
  const auto& p = cfg.params.get<MirrorConfig>();
  std::unique_ptr<MirrorStage> s(new MirrorStage(cfg, ctx));
  if (!p.pcapng.empty()) {
    // The loader kept the name inside capture_dir; a relative name is relative to it.
    std::filesystem::path path(p.pcapng);
    if (path.is_relative()) path = std::filesystem::path(ctx.capture_dir) / path;
    std::error_code ec;
    std::filesystem::create_directories(path.parent_path(), ec);
    if (ec) return fail("cannot create {}: {}", path.parent_path().string(), ec.message());
    CaptureOptions o;
    o.path = path.string();
    for (size_t i = 0; i < ctx.ports.size(); ++i) {
      if (!ctx.ports[i].name.empty())
        o.interfaces.emplace_back(static_cast<PortId>(i), ctx.ports[i].name);
    }
    o.snaplen = p.snaplen;
    o.ring_name = dpdk_name("capring");
    o.pool_name = dpdk_name("cappool");
    o.ring_size = kCaptureRing;
    o.pool_size = kCaptureRing * 2 - 1;  // and the per-lcore caches
    o.pool_cache = 64;
    auto c = PcapngCapture::open(std::move(o));
    if (!c) return std::unexpected(c.error());
    s->capture_ = std::move(*c);
  } else {
    s->port_ = ctx.port_index(p.port);
    std::string name = dpdk_name("mirror");
    s->pool_ = rte_pktmbuf_pool_create(name.c_str(), kCopyPool, 64, 0, RTE_MBUF_DEFAULT_BUF_SIZE,
                                       SOCKET_ID_ANY);
    if (s->pool_ == nullptr)
      return fail("cannot create the mirror's buffer pool: {}", rte_strerror(rte_errno));
  }
  return s;
}

void MirrorStage::process(std::span<rte_mbuf*> pkts, StageEnv& env) noexcept {
  LcoreState& st = lcores_[env.slot()];
  rte_mbuf* taken[64];
  unsigned n = 0;
  uint64_t matched = 0;
  auto flush = [&] {
    if (n == 0) return;
    size_t made = capture_->capture({taken, n}, kCaptureUnknown);
    st.copies.add(made);
    st.lost.add(n - made);
    n = 0;
  };
  for (rte_mbuf* m : pkts) {
    if (!match_.matches(m)) continue;
    ++matched;
    if (capture_) {
      taken[n++] = m;
      if (n == 64) flush();
      continue;
    }
    rte_mbuf* c = rte_pktmbuf_copy(m, pool_, 0, snaplen_);
    if (c == nullptr) {
      st.lost.add();
      continue;
    }
    PacketMeta& pm = meta(c);
    pm.verdict = Verdict::Transmit;
    pm.out_port = port_;
    pm.nexthop = kNoNextHop;
    pm.flags |= kMetaFlagCopy;
    st.copies.add();
    env.emit_copy(c);
  }
  if (capture_) flush();
  st.matched.add(matched);
}

void MirrorStage::set_port(PortId id, const PortInfo& info) {
  if (capture_ && !info.name.empty()) capture_->add_interface(id, info.name);
}

MirrorCounters MirrorStage::counters() const noexcept {
  MirrorCounters c;
  for (unsigned i = 0; i < slots_; ++i) {
    c.matched += lcores_[i].matched.load();
    c.copies += lcores_[i].copies.load();
    c.lost += lcores_[i].lost.load();
  }
  return c;
}

namespace {

using Json = nlohmann::ordered_json;

Result<std::unique_ptr<Stage>> make_mirror_stage(const config::StageConfig& cfg,
                                                 StageContext& ctx) {
  auto s = MirrorStage::create(cfg, ctx);
  if (!s) return std::unexpected(s.error());
  return std::unique_ptr<Stage>(std::move(*s));
}

MirrorConfig read_mirror(config::Ctx& ctx, config::MapReader& m) {
  MirrorConfig s;
  if (m.has("match")) {
    config::MapReader mm(ctx, m.child("match"), m.key_path("match"),
                         {"src", "dst", "proto", "src_port", "dst_port"});
    config::read_five_tuple(mm, s.match);
  }
  if (m.require("to")) {
    config::MapReader to(ctx, m.child("to"), m.key_path("to"), {"pcapng", "port"});
    bool a = to.get("pcapng", s.pcapng);
    bool b = to.get("port", s.port);
    if (to.ok() && a == b)
      ctx.error(m.child("to"), m.key_path("to"), "needs exactly one of 'pcapng' or 'port'");
  }
  m.get("snaplen", s.snaplen, 64, 65535);
  return s;
}

void check_mirror(config::StageCheck& c, const MirrorConfig& mi) {
  if (!mi.port.empty()) c.port_exists(mi.port, c.node({"to", "port"}), c.path(".to.port"));
  if (!mi.pcapng.empty()) {
    // Captures are written only below control.capture_dir: an appliance file must not be
    // able to make vecflowd write anywhere else as root.
    const std::string& f = mi.pcapng;
    const std::string& dir = c.config().control.capture_dir;
    bool escapes = f.find("..") != std::string::npos || (f[0] == '/' && f.rfind(dir + "/", 0) != 0);
    if (escapes) {
      c.error(c.node({"to", "pcapng"}), c.path(".to.pcapng"),
              fmt::format("'{}' is outside control.capture_dir ({}); give a file name relative "
                          "to it",
                          f, dir));
    }
  }
}

Json mirror_json(const MirrorConfig& p) {
  Json to = p.pcapng.empty() ? Json{{"port", p.port}} : Json{{"pcapng", p.pcapng}};
  return {
      {"match", config::five_tuple_json(p.match)}, {"to", std::move(to)}, {"snaplen", p.snaplen}};
}

}  // namespace

StageModule mirror_stage_module() {
  return StageModule{config::stage_type<MirrorConfig>("mirror", {"match", "to", "snaplen"},
                                                      read_mirror, mirror_json, check_mirror),
                     make_mirror_stage,
                     nullptr,
                     {}};
}

}  // namespace vecflow
