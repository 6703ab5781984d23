// The data-path parts in the control plane, over real objects: a DPDK net_ring port, the
// builtin scheduler with an rx adapter, a worker and a tx adapter on an lcore, and a pipeline
// built from an appliance file. Known traffic goes through each; the replies of `ports`,
// `sched`, `pipeline`, `routes`, `acl`, `neighbours`, `flows` (and `errors`, `status`, /metrics)
// must carry exactly its counts, and vecflowctl must print them as tables with the right
// columns. The pipeline's tables reload in place; structural changes are refused with reasons.
#include <gtest/gtest.h>

#include <rte_ether.h>
#include <rte_ip.h>
#include <map>

#include <cstring>

#include <string>
#include <vector>

#include "api/registry.h"
#include "config/config.h"
#include "control/builtin_commands.h"
#include "control/parts/pipeline_part.h"
#include "control/parts/pipeline_reload_part.h"
#include "control/parts/ports_part.h"
#include "control/parts/sched_part.h"
#include "control/parts/vrf_reload_part.h"
#include "core/packet.h"
#include "io/packet_pool.h"
#include "io/port_factory.h"
#include "pipeline/stage_registry.h"
#include "render.h"
#include "sched/rx_adapter.h"
#include "sched/tx_adapter.h"
#include "sched/worker.h"
#include "support/appliances.h"
#include "support/eal_env.h"
#include "support/frame_builder.h"
#include "unit/pipeline/fixture.h"
#include "unit/sched/sched_support.h"

namespace vecflow::control {
namespace {

using test::Bytes;
using test::FrameBuilder;
using test::ip4;

// Runs a command as vecflowctl does (asking for the view); fails the test on an error reply.
Json run(const Registry& registry, const RateWindow& rates, const std::string& command,
         Json args = nullptr) {
  Request r;
  r.command = command;
  r.args = std::move(args);
  r.view = true;
  Json reply = registry.dispatch(r, Peer{}, rates);
  EXPECT_TRUE(reply["ok"].get<bool>()) << command << ": " << reply.dump();
  return reply;
}

// The error code of a reply ("" when the command succeeded).
std::string error_of(const Registry& registry, const std::string& command, Json args) {
  Request r;
  r.command = command;
  r.args = std::move(args);
  RateWindow rates;
  Json reply = registry.dispatch(r, Peer{}, rates);
  return reply["ok"].get<bool>() ? "" : reply["error"]["code"].get<std::string>();
}

// vecflowctl's human output of a reply.
std::string human(const Json& reply) {
  return vecflowctl::render(reply["result"], reply["view"], true);
}

// The column headers of the table titled `title` in vecflowctl's output ("" for an untitled
// one, which must then be the first block). Columns are separated by two spaces or more.
std::vector<std::string> columns_of(const std::string& text, const std::string& title) {
  size_t at = 0;
  if (!title.empty()) {
    at = text.find(title + ":\n");
    if (at == std::string::npos) return {};
    at += title.size() + 2;
  }
  std::string line = text.substr(at, text.find('\n', at) - at);
  std::vector<std::string> out;
  size_t i = 0;
  while (i < line.size()) {
    size_t end = line.find("  ", i);
    if (end == std::string::npos) end = line.size();
    out.push_back(line.substr(i, end - i));
    i = line.find_first_not_of(' ', end);
    if (i == std::string::npos) break;
  }
  return out;
}

using Columns = std::vector<std::string>;

const Json* row_with(const Json& rows, const std::string& key, const Json& value) {
  for (const auto& r : rows) {
    if (r.contains(key) && r[key] == value) return &r;
  }
  return nullptr;
}

// The per-second rate of a reply times the sampling interval gives back the count of the
// interval: rates come from the right counters.
void expect_rate(const Json& rate, double interval_s, double count) {
  ASSERT_TRUE(rate.is_number()) << rate.dump();
  EXPECT_NEAR(rate.get<double>() * interval_s, count, 1e-6 * count + 1e-9);
}

// ---- ports ----------------------------------------------------------------------------------

class PortsPart : public ::testing::Test {
 protected:
  void SetUp() override {
    VECFLOW_REQUIRE_EAL();
    // DPDK names (pool, vdev) are unique per test.
    static unsigned seq = 0;
    unsigned n = seq++;
    PacketPoolOptions o;
    o.name = fmt::format("vpt_pool{}", n);
    o.mbufs = 1024;
    o.cache = 0;
    auto p = PacketPool::create(o);
    ASSERT_TRUE(p) << p.error().message;
    pool_ = std::move(*p);
    // net_ring without arguments loops each tx queue back to the rx queue of the same index.
    auto cfg = config::load_config_text(
        fmt::format("ports:\n  - {{name: ring, type: dpdk, devargs: net_ring_vpt{}}}\n", n),
        "t.yaml", builtin_stage_types());
    ASSERT_TRUE(cfg) << cfg.error().front().to_string();
    PortEnvironment env = port_environment(*cfg);
    env.pool = pool_.get();
    auto port = create_port(cfg->ports[0], PortId{0}, env);
    ASSERT_TRUE(port) << port.error().message;
    port_ = std::move(*port);
    ASSERT_TRUE(port_->start());
  }
  void TearDown() override {
    if (port_) port_->stop();
  }

  rte_mbuf* mbuf(const Bytes& frame) {
    rte_mbuf* m = rte_pktmbuf_alloc(pool_->mempool());
    EXPECT_NE(m, nullptr);
    std::memcpy(rte_pktmbuf_append(m, static_cast<uint16_t>(frame.size())), frame.data(),
                frame.size());
    return m;
  }

  std::unique_ptr<PacketPool> pool_;
  std::unique_ptr<Port> port_;
};

TEST_F(PortsPart, CountsRatesDropsAndModesOfEveryQueue) {
  Registry registry;
  register_ports(registry, {port_.get()});
  register_errors(registry);
  RateWindow rates;
  rates.push(registry.collect());

  // 20 good frames and one cut inside its IPv4 header: sent, looped back, received.
  constexpr uint32_t kGood = 20;
  Bytes good = FrameBuilder().ipv4(ip4(10, 0, 0, 1), ip4(10, 0, 0, 2), 17).udp(1, 2).build();
  Bytes bad = FrameBuilder().ipv4(ip4(1, 1, 1, 1), ip4(2, 2, 2, 2), 6).tcp(1, 2).build(30);
  std::vector<rte_mbuf*> out;
  for (uint32_t i = 0; i < kGood; ++i)
    out.push_back(mbuf(good));
  out.push_back(mbuf(bad));
  ASSERT_EQ(port_->tx_burst(0, out.data(), static_cast<uint16_t>(out.size())), out.size());
  rte_mbuf* in[64];
  uint16_t got = port_->rx_burst(0, in, 64);
  ASSERT_EQ(got, kGood) << "the cut frame is dropped by the port";
  rte_pktmbuf_free_bulk(in, got);
  rates.push(registry.collect());
  const double dt = rates.interval_s();

  Json reply = run(registry, rates, "ports");
  const Json& res = reply["result"];
  ASSERT_EQ(res["ports"].size(), 1u);
  const Json& p = res["ports"][0];
  EXPECT_EQ(p["port"], "ring");
  EXPECT_EQ(p["kind"], "dpdk");
  EXPECT_EQ(p["link"], "up");
  EXPECT_EQ(p["mode"], "zero-copy");
  EXPECT_EQ(p["rx_packets"], kGood);
  EXPECT_EQ(p["rx_bytes"], kGood * good.size());
  EXPECT_EQ(p["tx_packets"], kGood + 1);
  EXPECT_EQ(p["tx_bytes"], kGood * good.size() + bad.size());
  EXPECT_EQ(p["rx_dropped"], 1u);
  EXPECT_EQ(p["kernel_packets"], 0u);
  expect_rate(p["rx_pps"], dt, kGood);
  expect_rate(p["rx_bps"], dt, 8.0 * kGood * good.size());
  expect_rate(p["tx_pps"], dt, kGood + 1);

  ASSERT_EQ(res["queues"].size(), 1u);
  const Json& q = res["queues"][0];
  EXPECT_EQ(q["queue"], 0);
  EXPECT_EQ(q["owner"], "vecflow");
  EXPECT_EQ(q["mode"], "zero-copy");
  EXPECT_EQ(q["rx_packets"], kGood);
  EXPECT_EQ(q["tx_packets"], kGood + 1);
  EXPECT_EQ(q["rx_dropped"], 1u);

  const Json* drop = row_with(res["drops"], "reason", "ipv4_truncated");
  ASSERT_NE(drop, nullptr) << res["drops"].dump();
  EXPECT_EQ((*drop)["where"], "queue 0");
  EXPECT_EQ((*drop)["count"], 1u);
  expect_rate((*drop)["pps"], dt, 1);
  const Json* opackets = row_with(res["device_stats"], "name", "tx_good_packets");
  ASSERT_NE(opackets, nullptr) << "net_ring's xstats: " << res["device_stats"].dump();
  EXPECT_EQ((*opackets)["value"], kGood + 1);

  std::string text = human(reply);
  EXPECT_EQ(columns_of(text, "ports"),
            (Columns{"PORT", "KIND", "DEVICE", "LINK", "MTU", "QUEUES", "MODE", "RX", "RX RATE",
                     "RX BITS", "TX", "TX RATE", "TX BITS", "KERNEL", "RX DROPS", "DEVICE DROPS"}));
  EXPECT_EQ(columns_of(text, "queues"),
            (Columns{"PORT", "QUEUE", "DEV QUEUE", "OWNER", "SERVED BY", "MODE", "WAKE", "RX",
                     "RX RATE", "TX", "TX RATE", "KERNEL", "REFUSED", "COPIES", "DROPS"}));
  EXPECT_EQ(columns_of(text, "drops"), (Columns{"PORT", "WHERE", "REASON", "COUNT", "RATE"}));
  EXPECT_NE(text.find("ring  queue 0  ipv4_truncated      1"), std::string::npos) << text;

  // The drop is in `errors` too, under the layer that dropped it, and in /metrics.
  Json errors = run(registry, rates, "errors")["result"];
  const Json* where = row_with(errors["by_port"], "layer", "port");
  ASSERT_NE(where, nullptr) << errors.dump();
  EXPECT_EQ((*where)["reason"], "ipv4_truncated");
  EXPECT_EQ((*where)["count"], 1u);
  std::string metrics = render_prometheus(registry.collect());
  EXPECT_NE(metrics.find(fmt::format(
                "vecflow_port_rx_packets_total{{port=\"ring\",queue=\"0\"}} {}", kGood)),
            std::string::npos);
  EXPECT_NE(metrics.find("vecflow_port_link_up{port=\"ring\"} 1"), std::string::npos);

  // `status` gets the port's link state instead of "not opened".
  Json args = Json::object();
  Snapshot now = registry.collect();
  Json status = registry.status_sections(CommandContext{args, Peer{}, now, rates});
  ASSERT_EQ(status["ports"].size(), 1u);
  EXPECT_EQ(status["ports"][0]["state"], "up");
  EXPECT_EQ(status["ports"][0]["type"], "dpdk");
}

TEST_F(PortsPart, AnUnknownPortIsABadArgumentThatNamesThePorts) {
  Registry registry;
  register_ports(registry, {port_.get()});
  EXPECT_EQ(error_of(registry, "ports", {{"port", "nope"}}), "bad_arguments");
  RateWindow rates;
  Json one = run(registry, rates, "ports", {{"port", "ring"}});
  EXPECT_EQ(one["result"]["ports"].size(), 1u);
}

// `hardware` of a DPDK port: the PMD, its bus, the queues it was given and can have, no XDP.
TEST_F(PortsPart, HardwareNamesTheDriverBusAndQueues) {
  Registry registry;
  register_ports(registry, {port_.get()});
  RateWindow rates;
  const Json reply = run(registry, rates, "hardware");
  ASSERT_EQ(reply["result"]["ports"].size(), 1u);
  const Json& h = reply["result"]["ports"][0];
  EXPECT_EQ(h["port"], "ring");
  EXPECT_EQ(h["kind"], "dpdk");
  EXPECT_EQ(h["driver"], "net_ring");
  EXPECT_EQ(h["bus"], "vdev");
  EXPECT_EQ(h["rx_queues"], 1);
  EXPECT_GE(h["rx_queues_max"].get<int>(), 1);
  EXPECT_EQ(h["xdp_mode"], "");
  EXPECT_NE(human(reply).find("net_ring"), std::string::npos) << human(reply);
  EXPECT_EQ(error_of(registry, "hardware", {{"port", "nope"}}), "bad_arguments");
}

// ---- sched ----------------------------------------------------------------------------------

class Transmit final : public sched::EventHandler {
 public:
  void process(std::span<rte_event> events) noexcept override {
    for (rte_event& ev : events) {
      for (rte_mbuf* m : sched::packets(ev))
        set_transmit(m, PortId{1});
    }
  }
};

// Each port's VRF is an info series of /metrics, following the running file as a reload
// changes it.
TEST(VrfPart, EachPortsVrfIsAnInfoSeries) {
  config::ApplianceConfig running;
  for (const char* name : {"red0", "blue0", "uplink"}) {
    config::PortConfig p;
    p.name = name;
    running.ports.push_back(p);
  }
  config::VrfConfig red;
  red.name = "red";
  red.ports = {"red0"};
  running.vrfs = {red};
  Registry registry;
  register_vrf_metrics(registry, running);
  const auto has = [&](const std::string& series) {
    return render_prometheus(registry.collect()).find(series + " 1\n") != std::string::npos;
  };
  EXPECT_TRUE(has(R"(vecflow_port_vrf_info{port="red0",vrf="red"})"));
  EXPECT_TRUE(has(R"(vecflow_port_vrf_info{port="blue0",vrf="default"})"));
  EXPECT_TRUE(has(R"(vecflow_port_vrf_info{port="uplink",vrf="default"})"));
  running.vrfs.push_back(config::VrfConfig{});
  running.vrfs.back().name = "blue";
  running.vrfs.back().ports = {"blue0"};
  EXPECT_TRUE(has(R"(vecflow_port_vrf_info{port="blue0",vrf="blue"})"));
  EXPECT_FALSE(has(R"(vecflow_port_vrf_info{port="blue0",vrf="default"})"));
}

TEST(SchedPart, VectorsEventsAndBusyShareOfAWorker) {
  VECFLOW_REQUIRE_EAL();
  auto scheduler =
      test::make_scheduler(test::BackendKind::Builtin, {{"first", SchedType::Atomic}}, 1, 1);
  ASSERT_TRUE(scheduler);
  auto pool = sched::VectorPool::create("vpt_vectors", 64, 4, 0);
  ASSERT_TRUE(pool) << pool.error().message;
  OutcomeTable outcomes(2, 2);
  test::RingPort in("in", PortId{0});
  test::RingPort out("out", PortId{1});
  // Vectors of 4; a partial vector closes after 1 ms.
  sched::RxAdapter rx("rx0", scheduler->producer(0), {4, 1000, 0, SchedType::Atomic, pool->get()},
                      outcomes.row(0));
  ASSERT_TRUE(rx.add_queue(in, 0));
  Transmit handler;
  sched::TxAdapter tx({{&in, 0}, {&out, 0}}, {}, outcomes.row(1));
  sched::Worker worker("w0", *scheduler, scheduler->worker(0), handler, tx, std::nullopt);

  test::LcoreThread lcore({test::borrow(rx), test::borrow(worker)});
  Registry registry;
  register_runtime(registry, std::vector<const Lcore*>{&lcore.lcore()});
  register_sched(registry, scheduler.get(), {&rx}, {&worker}, {&tx});
  RateWindow rates;
  rates.push(registry.collect());

  // Flows 1 and 2 send 8 packets each (two full vectors each), flow 3 two (closed when the
  // poll found the queue drained), all in one burst.
  std::vector<rte_mbuf*> burst;
  for (uint32_t seq = 0; seq < 8; ++seq) {
    burst.push_back(test::make_packet(PortId{0}, 1, seq));
    burst.push_back(test::make_packet(PortId{0}, 2, seq));
    if (seq < 2) burst.push_back(test::make_packet(PortId{0}, 3, seq));
  }
  ASSERT_EQ(in.inject(0, burst.data(), static_cast<unsigned>(burst.size())), burst.size());
  uint64_t collected = 0;
  ASSERT_TRUE(test::wait_until([&] {
    rte_mbuf* got[32];
    unsigned n = out.collect(0, got, 32);
    rte_pktmbuf_free_bulk(got, n);
    collected += n;
    return collected == burst.size();
  }));
  rates.push(registry.collect());
  lcore.stop();
  worker.park();

  Json reply = run(registry, rates, "sched");
  const Json& res = reply["result"];
  EXPECT_EQ(res["backend"], "builtin");
  EXPECT_EQ(res["inflight"], 0u);
  ASSERT_EQ(res["queues"].size(), 1u);
  EXPECT_EQ(res["queues"][0]["name"], "first");
  EXPECT_EQ(res["queues"][0]["type"], "atomic");
  EXPECT_EQ(res["queues"][0]["in"], 5u);
  EXPECT_EQ(res["queues"][0]["out"], 5u);

  ASSERT_EQ(res["rx_adapters"].size(), 1u);
  const Json& a = res["rx_adapters"][0];
  EXPECT_EQ(a["adapter"], "rx0");
  EXPECT_EQ(a["lcore"], "0");
  EXPECT_EQ(a["packets"], 18u);
  EXPECT_EQ(a["events"], 5u);
  EXPECT_EQ(a["vectors"], 5u);
  EXPECT_DOUBLE_EQ(a["mean_vector"].get<double>(), 18.0 / 5);
  EXPECT_EQ(a["closed_full"], 4u);
  EXPECT_EQ(a["closed_drained"], 1u);
  EXPECT_EQ(a["closed_timeout"], 0u);
  EXPECT_EQ(a["closed_flush"], 0u);
  // Every packet's wait in its vector, over the interval: all 18 left in the poll that
  // received them, so the mean is far below the vector timeout.
  ASSERT_TRUE(a["wait_mean_us"].is_number()) << a.dump();
  EXPECT_GE(a["wait_mean_us"].get<double>(), 0);
  EXPECT_LT(a["wait_mean_us"].get<double>(), a["vector_timeout_us"].get<double>());
  ASSERT_TRUE(a["wait_p99_us"].is_number()) << a.dump();
  EXPECT_LE(a["wait_p99_us"].get<double>(), a["vector_timeout_us"].get<double>());
  EXPECT_EQ(a["flow_buckets"], sched::kDefaultFlowBuckets);
  EXPECT_EQ(a["refused"], 0u);
  expect_rate(a["pps"], rates.interval_s(), 18);

  ASSERT_EQ(res["workers"].size(), 1u);
  const Json& w = res["workers"][0];
  EXPECT_EQ(w["worker"], "w0");
  EXPECT_EQ(w["lcore"], "0");
  EXPECT_EQ(w["events"], 5u);
  EXPECT_EQ(w["finished"], 5u);
  EXPECT_EQ(w["forwarded"], 0u);
  EXPECT_EQ(w["refused"], 0u);
  EXPECT_EQ(w["tx_full"], 0u);
  // The worker did work in the interval: its busy share comes from the runtime's counters.
  ASSERT_TRUE(w["busy_pct"].is_number()) << w.dump();
  EXPECT_GT(w["busy_pct"].get<double>(), 0);
  EXPECT_LE(w["busy_pct"].get<double>() + w["idle_pct"].get<double>(), 100.5);
  EXPECT_EQ(w["state"], "running");

  std::string text = human(reply);
  EXPECT_EQ(columns_of(text, "rx adapters"),
            (Columns{"ADAPTER", "LCORE", "BUSY", "PACKETS", "RATE", "BUCKETS", "VECTORS",
                     "MEAN SIZE", "FULL", "DRAINED", "TIMEOUT", "FLUSH", "NO VECTOR", "REFUSED",
                     "HELD", "WAIT MEAN US", "WAIT P99 US"}));
  EXPECT_EQ(columns_of(text, "workers"),
            (Columns{"WORKER", "LCORE", "STATE", "BUSY", "IDLE", "EVENTS", "EVENTS/S", "FORWARDED",
                     "FINISHED", "MIGRATED OUT", "MIGRATED IN", "BACKLOG", "REFUSED", "TX FULL",
                     "FRAGMENTS OUT"}));
  EXPECT_EQ(columns_of(text, "queues"),
            (Columns{"QUEUE", "NAME", "TYPE", "IN", "IN/S", "OUT", "OUT/S"}));
  EXPECT_NE(text.find("backend:"), std::string::npos);

  // One lcore's share: its adapters and workers; the queues stay the whole scheduler's.
  const Json on0 = run(registry, rates, "sched", {{"lcore", 0}})["result"];
  EXPECT_EQ(on0["rx_adapters"].size(), 1u);
  EXPECT_EQ(on0["workers"].size(), 1u);
  const Json on1 = run(registry, rates, "sched", {{"lcore", 1}})["result"];
  EXPECT_TRUE(on1["rx_adapters"].empty());
  EXPECT_TRUE(on1["workers"].empty());
  EXPECT_EQ(on1["queues"].size(), 1u);

  Json args = Json::object();
  Snapshot now = registry.collect();
  Json status = registry.status_sections(CommandContext{args, Peer{}, now, rates});
  EXPECT_EQ(status["scheduler"]["backend"], "builtin");
  EXPECT_EQ(status["scheduler"]["workers"], 1u);
}

// ---- pipeline, routes, acl, neighbours ------------------------------------------------------

const std::string kAppliance = test::router_appliance();

class PipelinePart : public ::testing::Test {
 protected:
  void SetUp() override {
    VECFLOW_REQUIRE_EAL();
    auto cfg = config::load_config_text(kAppliance, "test.yaml", builtin_stage_types());
    ASSERT_TRUE(cfg) << cfg.error().front().to_string();
    ASSERT_TRUE(h.build(cfg->pipeline));
    register_pipeline(registry, *h.pipeline);
  }

  static rte_mbuf* frame(const std::string& dst, uint8_t proto, uint16_t dport) {
    test::FrameSpec s;
    s.src = "192.0.2.2";
    s.dst = dst;
    s.proto = proto;
    s.dport = dport;
    s.port = test::kWan;
    return test::make_frame(s);
  }
  // Five packets: to the lan host, by the default route, telnet (denied), to the box itself
  // (kernel), to an unknown connected host (unresolved: dropped).
  void send() {
    h.run({frame("198.51.100.9", IPPROTO_UDP, 53), frame("203.0.113.7", IPPROTO_UDP, 53),
           frame("198.51.100.9", IPPROTO_TCP, 23), frame("192.0.2.1", IPPROTO_TCP, 22),
           frame("198.51.100.77", IPPROTO_UDP, 53)});
  }

  test::Harness h;
  Registry registry;
  RateWindow rates;
};

TEST_F(PipelinePart, StagesShowCallsPacketsAndCyclesPerPacket) {
  rates.push(registry.collect());
  send();
  rates.push(registry.collect());
  Json reply = run(registry, rates, "pipeline");
  const Json& stages = reply["result"]["stages"];
  ASSERT_EQ(stages.size(), 3u);
  EXPECT_EQ(stages[0]["stage"], "acl");
  EXPECT_EQ(stages[0]["queue"], "acl");
  EXPECT_EQ(stages[0]["sched"], "parallel");
  EXPECT_EQ(stages[0]["calls"], 1u);
  EXPECT_EQ(stages[0]["packets"], 5u);
  EXPECT_DOUBLE_EQ(stages[0]["packets_per_call"].get<double>(), 5.0);
  EXPECT_EQ(stages[1]["stage"], "route");
  EXPECT_EQ(stages[1]["queue"], "route+neighbour");
  EXPECT_EQ(stages[1]["packets"], 4u) << "the denied packet stopped at the ACL";
  EXPECT_EQ(stages[2]["stage"], "neighbour");
  EXPECT_EQ(stages[2]["group"], 1u);
  EXPECT_EQ(stages[2]["packets"], 3u) << "the kernel-bound packet left at the route stage";
  for (const auto& st : stages) {
    uint64_t cycles = st["cycles"];
    EXPECT_GT(cycles, 0u);
    EXPECT_DOUBLE_EQ(st["cycles_per_packet"].get<double>(),
                     static_cast<double>(cycles) / st["packets"].get<double>());
    expect_rate(st["pps"], rates.interval_s(), st["packets"].get<double>());
  }
  EXPECT_EQ(columns_of(human(reply), ""),
            (Columns{"STAGE", "TYPE", "QUEUE", "SCHED", "CALLS", "PACKETS", "PKTS/CALL",
                     "CYCLES/PKT", "NOW CYCLES/PKT", "RATE"}));
}

// Two lcores run the stages: `pipeline` sums them, lists each one's share, and lcore=N shows
// one lcore alone (slot 1 is lcore 3 here, as the runtime maps slots to lcore ids).
TEST(PipelinePerLcore, EachLcoresShareAndTheSum) {
  VECFLOW_REQUIRE_EAL();
  auto cfg = config::load_config_text(kAppliance, "test.yaml", builtin_stage_types());
  ASSERT_TRUE(cfg) << cfg.error().front().to_string();
  test::Harness h(2);
  ASSERT_TRUE(h.build(cfg->pipeline));
  Registry registry;
  RateWindow rates;
  register_pipeline(registry, *h.pipeline, {0, 3});
  auto frame = [](uint16_t sport) {
    test::FrameSpec s;
    s.src = "192.0.2.2";
    s.dst = "198.51.100.9";
    s.sport = sport;
    s.port = test::kWan;
    return test::make_frame(s);
  };
  h.run({frame(1), frame(2)}, 0);
  h.run({frame(3), frame(4), frame(5)}, 1);
  Json all = run(registry, rates, "pipeline")["result"];
  EXPECT_EQ(all["stages"][0]["packets"], 5u);
  EXPECT_EQ(all["stages"][0]["calls"], 2u);
  std::map<std::pair<unsigned, std::string>, uint64_t> share;
  for (const auto& r : all["lcores"])
    share[{r["lcore"].get<unsigned>(), r["stage"].get<std::string>()}] = r["packets"];
  EXPECT_EQ((share[{0, "acl"}]), 2u);
  EXPECT_EQ((share[{3, "acl"}]), 3u);
  EXPECT_EQ((share[{3, "neighbour"}]), 3u);
  Json three = run(registry, rates, "pipeline", {{"lcore", 3}})["result"];
  EXPECT_EQ(three["stages"][0]["packets"], 3u);
  EXPECT_EQ(three["stages"][0]["calls"], 1u);
  EXPECT_TRUE(three["lcores"].empty());
  Request bad;
  bad.command = "pipeline";
  bad.args = {{"lcore", 7}};
  Json refused = registry.dispatch(bad, Peer{}, rates);
  EXPECT_EQ(refused["error"]["code"], "bad_arguments");
  EXPECT_NE(refused["error"]["message"].get<std::string>().find("lcores that do: 0, 3"),
            std::string::npos)
      << refused.dump();
}

TEST_F(PipelinePart, RoutesShowTheTableTheCountsAndALookup) {
  send();
  // And what the route stage's checks drop: a loopback source, a wrong header checksum.
  test::FrameSpec loopback;
  loopback.src = "127.0.0.1";
  loopback.dst = "203.0.113.7";
  rte_mbuf* corrupt = frame("203.0.113.7", IPPROTO_UDP, 53);
  rte_pktmbuf_mtod_offset(corrupt, rte_ipv4_hdr*, corrupt->l2_len)->hdr_checksum ^= 1;
  h.run({test::make_frame(loopback), corrupt});
  Json reply = run(registry, rates, "routes", {{"lookup", "203.0.113.7"}});
  const Json& res = reply["result"];
  ASSERT_EQ(res["stages"].size(), 1u);
  const Json& st = res["stages"][0];
  EXPECT_EQ(st["routes"], 3u);
  EXPECT_EQ(st["forwarded"], 3u);
  EXPECT_EQ(st["to_kernel"], 1u);
  EXPECT_EQ(st["no_route"], 0u);
  EXPECT_EQ(st["martian_source"], 1u);
  EXPECT_EQ(st["martian_destination"], 0u);
  EXPECT_EQ(st["ipv4_bad_checksum"], 1u);
  EXPECT_EQ(st["checks"], (Json{{"ipv4_checksum", true}, {"martians", true}}));
  const Json* lan = row_with(res["routes"], "prefix", "198.51.100.0/24");
  ASSERT_NE(lan, nullptr);
  EXPECT_EQ((*lan)["action"], "forward");
  EXPECT_EQ((*lan)["nexthops"], Json::array({"dev lan"}));
  EXPECT_EQ((*lan)["source"], "config");
  EXPECT_TRUE((*lan)["protocol"].is_null());  // kernel routes name who installed them
  const Json* def = row_with(res["routes"], "prefix", "0.0.0.0/0");
  ASSERT_NE(def, nullptr);
  EXPECT_EQ((*def)["nexthops"], Json::array({"via 192.0.2.254 dev wan"}));
  EXPECT_EQ((*row_with(res["routes"], "prefix", "192.0.2.1/32"))["action"], "kernel");
  ASSERT_EQ(res["lookup"].size(), 1u);
  EXPECT_EQ(res["lookup"][0]["route"]["prefix"], "0.0.0.0/0");

  std::string text = human(reply);
  EXPECT_EQ(columns_of(text, "routes"),
            (Columns{"STAGE", "VRF", "PREFIX", "ACTION", "SOURCE", "PROTOCOL", "NEXT HOPS"}));
  EXPECT_NE(text.find("route  default  0.0.0.0/0        forward  config  -         via 192.0.2.254 "
                      "dev wan"),
            std::string::npos)
      << text;

  // --vrf: the VRF's routes, and the lookup in it; a VRF the stage lacks is an error.
  Json in_default = run(registry, rates, "routes", {{"vrf", "default"}})["result"];
  EXPECT_EQ(in_default["routes"].size(), 3u);
  EXPECT_EQ(in_default["stages"][0]["vrfs"], 1u);
  EXPECT_EQ(error_of(registry, "routes", {{"vrf", "blue"}}), "bad_arguments");
  EXPECT_NE(render_prometheus(registry.collect())
                .find("vecflow_route_entries{stage=\"route\",vrf=\"default\",source=\"config\"} 3"),
            std::string::npos);
  EXPECT_EQ(error_of(registry, "routes", {{"stage", "nope"}}), "bad_arguments");
  EXPECT_EQ(error_of(registry, "routes", {{"lookup", "not-an-ip"}}), "bad_arguments");
}

TEST_F(PipelinePart, AclShowsRulesInOrderWithWhatEachDecided) {
  send();
  Json reply = run(registry, rates, "acl");
  const Json& rules = reply["result"]["rules"];
  ASSERT_EQ(rules.size(), 2u);
  EXPECT_EQ(rules[0]["rule"], "no-telnet");
  EXPECT_EQ(rules[0]["position"], 1);
  EXPECT_EQ(rules[0]["action"], "deny");
  EXPECT_EQ(rules[0]["match"], "tcp dport 23");
  EXPECT_EQ(rules[0]["packets"], 1u);
  EXPECT_EQ(rules[1]["match"], "default");
  EXPECT_EQ(rules[1]["action"], "permit");
  EXPECT_EQ(rules[1]["packets"], 4u);
  EXPECT_EQ(columns_of(human(reply), ""),
            (Columns{"STAGE", "#", "RULE", "ACTION", "MATCH", "PACKETS", "BYTES", "RATE"}));
  std::string metrics = render_prometheus(registry.collect());
  EXPECT_NE(metrics.find("vecflow_acl_rule_packets_total{stage=\"acl\",rule=\"no-telnet\","
                         "action=\"deny\"} 1"),
            std::string::npos);
}

TEST_F(PipelinePart, NeighboursShowStaticEntriesAndWhatTheStageDid) {
  send();
  Json reply = run(registry, rates, "neighbours");
  const Json& res = reply["result"];
  EXPECT_EQ(res["entries_total"], 2u);
  EXPECT_EQ(res["resolved"], 2u);
  const Json* gw = row_with(res["entries"], "ip", "192.0.2.254");
  ASSERT_NE(gw, nullptr);
  EXPECT_EQ((*gw)["port"], "wan");
  EXPECT_EQ((*gw)["mac"], "02:00:00:00:00:fe");
  EXPECT_EQ((*gw)["source"], "static");
  ASSERT_EQ(res["stages"].size(), 1u);
  EXPECT_EQ(res["stages"][0]["resolved"], 2u);
  EXPECT_EQ(res["stages"][0]["unresolved"], 1u);
  EXPECT_EQ(res["stages"][0]["unresolved_policy"], "drop");
  EXPECT_EQ(columns_of(human(reply), "neighbours"),
            (Columns{"PORT", "IP", "MAC", "STATE", "SOURCE"}));
  Json lan = run(registry, rates, "neighbours", {{"port", "lan"}})["result"];
  ASSERT_EQ(lan["entries"].size(), 1u);
  EXPECT_EQ(lan["entries"][0]["ip"], "198.51.100.9");
  EXPECT_EQ(error_of(registry, "neighbours", {{"port", "dmz"}}), "bad_arguments");
}

TEST_F(PipelinePart, FlowsSayHowToEnableThemWhenNoStageCountsFlows) {
  Request r;
  r.command = "flows";
  Json reply = registry.dispatch(r, Peer{}, rates);
  ASSERT_FALSE(reply["ok"].get<bool>());
  EXPECT_EQ(reply["error"]["code"], "failed");
  EXPECT_NE(reply["error"]["message"].get<std::string>().find("stage: count, by: flow"),
            std::string::npos)
      << reply.dump();
}

// ---- flows -------------------------------------------------------------------------------

constexpr const char* kCounting = R"(
ports:
  - {name: wan, type: dpdk, devargs: net_null0}
  - {name: lan, type: dpdk, devargs: net_null1}
pipeline:
  - stage: count
    by: flow
  - stage: route
    fuse: true
    routes:
      - {prefix: 198.51.100.0/24, port: lan}
)";

TEST(FlowsPart, TopFlowsByPacketsAndByBytesWithExactCounts) {
  VECFLOW_REQUIRE_EAL();
  auto cfg = config::load_config_text(kCounting, "test.yaml", builtin_stage_types());
  ASSERT_TRUE(cfg) << cfg.error().front().to_string();
  test::Harness h;
  ASSERT_TRUE(h.build(cfg->pipeline));
  Registry registry;
  RateWindow rates;
  register_pipeline(registry, *h.pipeline);

  auto frame = [](uint16_t sport, uint16_t payload) {
    test::FrameSpec s;
    s.src = "192.0.2.2";
    s.dst = "198.51.100.9";
    s.sport = sport;
    s.dport = 53;
    s.payload = payload;
    s.port = test::kWan;
    return test::make_frame(s);
  };
  // Flow 1001: 5 small packets; flow 1002: 2 large ones; flow 1003: 1 small one.
  std::vector<rte_mbuf*> pkts;
  uint64_t small = 0, large = 0;
  for (int i = 0; i < 5; ++i) {
    pkts.push_back(frame(1001, 18));
    small = pkts.back()->pkt_len;
  }
  for (int i = 0; i < 2; ++i) {
    pkts.push_back(frame(1002, 1000));
    large = pkts.back()->pkt_len;
  }
  pkts.push_back(frame(1003, 18));
  ASSERT_GT(2 * large, 5 * small);
  h.run(pkts);

  Json by_packets = run(registry, rates, "flows", {{"top", 2}})["result"];
  ASSERT_EQ(by_packets["flows"].size(), 2u);
  const Json& first = by_packets["flows"][0];
  EXPECT_EQ(first["rank"], 1u);
  EXPECT_EQ(first["proto"], "udp");
  EXPECT_EQ(first["src"], "192.0.2.2");
  EXPECT_EQ(first["src_port"], 1001);
  EXPECT_EQ(first["dst"], "198.51.100.9");
  EXPECT_EQ(first["dst_port"], 53);
  EXPECT_EQ(first["packets"], 5u);
  EXPECT_EQ(first["bytes"], 5 * small);
  EXPECT_EQ(by_packets["flows"][1]["src_port"], 1002);
  EXPECT_EQ(by_packets["flows"][1]["packets"], 2u);
  EXPECT_EQ(by_packets["flows"][1]["bytes"], 2 * large);
  ASSERT_EQ(by_packets["stages"].size(), 1u);
  EXPECT_EQ(by_packets["stages"][0]["tracked"], 3u);
  EXPECT_EQ(by_packets["stages"][0]["untracked"], 0u);

  Json reply = run(registry, rates, "flows", {{"by", "bytes"}});
  const Json& by_bytes = reply["result"]["flows"];
  ASSERT_EQ(by_bytes.size(), 3u);
  EXPECT_EQ(by_bytes[0]["src_port"], 1002);
  EXPECT_EQ(by_bytes[1]["src_port"], 1001);
  EXPECT_EQ(by_bytes[2]["src_port"], 1003);
  EXPECT_EQ(by_bytes[2]["packets"], 1u);
  EXPECT_EQ(columns_of(human(reply), "flows"),
            (Columns{"#", "PROTO", "SOURCE", "SPORT", "DESTINATION", "DPORT", "PACKETS", "BYTES",
                     "STAGE"}));

  EXPECT_EQ(error_of(registry, "flows", {{"by", "flows"}}), "bad_arguments");
  EXPECT_EQ(error_of(registry, "flows", {{"stage", "route"}}), "bad_arguments");
  EXPECT_EQ(error_of(registry, "flows", {{"top", 0}}), "bad_arguments");
}

// ---- reloading the pipeline's tables -----------------------------------------------------

// `text` with its first `from` replaced by `to`.
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

std::vector<config::StageConfig> pipeline_of(const std::string& text) {
  auto cfg = config::load_config_text(text, "next.yaml", builtin_stage_types());
  EXPECT_TRUE(cfg) << cfg.error().front().to_string();
  return cfg ? cfg->pipeline : std::vector<config::StageConfig>{};
}

// kAppliance's pipeline with `from` replaced by `to`.
std::vector<config::StageConfig> edited(const std::string& from, const std::string& to) {
  return pipeline_of(replaced(kAppliance, from, to));
}

const std::vector<std::string> kPorts{"wan", "lan"};

TEST_F(PipelinePart, ReloadSwapsRoutesAclRulesAndStaticNeighboursInPlace) {
  auto running = pipeline_of(kAppliance);
  // A host route to 203.0.113.7 through the lan host, UDP 53 denied, the lan host's MAC
  // changed and the wan gateway's static entry gone.
  std::string text = kAppliance;
  text = replaced(text, "{prefix: 192.0.2.1/32, action: kernel}\n",
                  "{prefix: 192.0.2.1/32, action: kernel}\n"
                  "      - {prefix: 203.0.113.7/32, via: 198.51.100.9, port: lan}\n");
  text = replaced(text, "      - {name: no-telnet",
                  "      - {name: no-dns, action: deny, proto: udp, dst_port: 53}\n"
                  "      - {name: no-telnet");
  text = replaced(text, "      - {ip: 192.0.2.254, mac: \"02:00:00:00:00:fe\", port: wan}\n", "");
  text = replaced(text, "02:00:00:00:01:09", "02:00:00:00:01:10");
  auto next = pipeline_of(text);
  ASSERT_EQ(next.size(), 3u);

  EXPECT_TRUE(pipeline_restart_reasons(running, next, kPorts).empty());
  EXPECT_EQ(pipeline_table_changes(running, next),
            (std::vector<std::string>{
                "acl: 1 rule → 2 (added no-dns)", "route: 3 routes → 4 (added 203.0.113.7/32)",
                "neighbour: 2 static entries → 1 (removed 192.0.2.254 on wan; changed "
                "198.51.100.9 on lan)"}));

  PipelineTables tables(*h.pipeline, running);
  send();  // under the old tables
  ASSERT_TRUE(tables.apply(next));
  // 203.0.113.7 now leaves on lan, to the lan host's new address.
  rte_mbuf* out = h.run_one(frame("203.0.113.7", IPPROTO_TCP, 80));
  ASSERT_NE(out, nullptr);
  EXPECT_EQ(meta(out).out_port, test::kLan);
  const auto* eth = rte_pktmbuf_mtod(out, const rte_ether_hdr*);
  MacAddress dst;
  std::memcpy(dst.bytes.data(), eth->dst_addr.addr_bytes, 6);
  EXPECT_EQ(dst.to_string(), "02:00:00:00:01:10");
  send();
  Json acl = run(registry, rates, "acl")["result"]["rules"];
  ASSERT_EQ(acl.size(), 3u);
  EXPECT_EQ(acl[0]["rule"], "no-dns");
  EXPECT_EQ(acl[0]["packets"], 3u) << "the second send's three UDP 53 packets";
  EXPECT_EQ(acl[1]["rule"], "no-telnet");
  EXPECT_EQ(acl[1]["packets"], 2u) << "one from each send: the kept rule kept its count";
  Json routes = run(registry, rates, "routes", {{"lookup", "203.0.113.7"}})["result"];
  EXPECT_EQ(routes["stages"][0]["routes"], 4u);
  EXPECT_EQ(routes["lookup"][0]["route"]["prefix"], "203.0.113.7/32");
  Json neigh = run(registry, rates, "neighbours")["result"];
  const Json* gw = row_with(neigh["entries"], "ip", "192.0.2.254");
  ASSERT_NE(gw, nullptr);
  EXPECT_EQ((*gw)["state"], "unresolved");
  EXPECT_EQ((*gw)["source"], "kernel") << "no longer static: the kernel's view takes over";
  EXPECT_EQ((*row_with(neigh["entries"], "ip", "198.51.100.9"))["mac"], "02:00:00:00:01:10");

  // Back to the running file: every table as it was.
  ASSERT_TRUE(tables.apply(running));
  EXPECT_EQ(run(registry, rates, "routes")["result"]["stages"][0]["routes"], 3u);
  EXPECT_EQ(run(registry, rates, "acl")["result"]["rules"].size(), 2u);
  neigh = run(registry, rates, "neighbours")["result"];
  EXPECT_EQ((*row_with(neigh["entries"], "ip", "192.0.2.254"))["mac"], "02:00:00:00:00:fe");
  EXPECT_EQ((*row_with(neigh["entries"], "ip", "198.51.100.9"))["mac"], "02:00:00:00:01:09");
}

TEST_F(PipelinePart, ReloadRefusesStructuralChangesAndNamesWhatNeedsARestart) {
  auto running = pipeline_of(kAppliance);
  auto first_reason = [&running](const std::vector<config::StageConfig>& next) {
    auto why = pipeline_restart_reasons(running, next, kPorts);
    return why.empty() ? std::string() : why.front();
  };
  EXPECT_EQ(
      first_reason(edited("  - stage: neighbour\n", "  - stage: count\n  - stage: neighbour\n")),
      "stage added (count): stages and their scheduler queues are built at start; "
      "restart vecflowd to apply it");
  std::string text = kAppliance;
  text.erase(text.find("  - stage: acl"),
             text.find("  - stage: route") - text.find("  - stage: acl"));
  EXPECT_TRUE(first_reason(pipeline_of(text)).starts_with("stage removed (acl): "));
  auto swapped = running;
  std::swap(swapped[0], swapped[1]);
  EXPECT_TRUE(
      first_reason(swapped).starts_with("stages reordered (acl, route, neighbour → route, acl, "
                                        "neighbour): the order is fixed"));
  EXPECT_EQ(first_reason(edited("sched: atomic", "sched: ordered")),
            "stage 'route': sched atomic → ordered: the scheduler's queues are made at start; "
            "restart vecflowd to apply it");
  EXPECT_TRUE(first_reason(edited("    fuse: true\n    from_kernel", "    from_kernel"))
                  .starts_with("stage 'neighbour': fuse true → false"));
  EXPECT_EQ(first_reason(edited("unresolved: drop", "unresolved: kernel")),
            "stage 'neighbour': unresolved drop → kernel: the stage reads it when it is built; "
            "restart vecflowd to apply it");
  EXPECT_EQ(
      first_reason(edited("sched: atomic\n", "sched: atomic\n    checks: {martians: false}\n")),
      "stage 'route': checks changed: the stage reads it when it is built; restart vecflowd "
      "to apply it");
  // A table naming another running port is a table change; a port that does not run is not.
  EXPECT_EQ(first_reason(edited("{prefix: 198.51.100.0/24, port: lan}",
                                "{prefix: 198.51.100.0/24, port: wan}")),
            "");
  auto unknown = pipeline_restart_reasons(running, running, {"wan"});
  ASSERT_FALSE(unknown.empty());
  EXPECT_NE(unknown.front().find("route 198.51.100.0/24 uses port 'lan', which this vecflowd "
                                 "does not run"),
            std::string::npos)
      << unknown.front();

  // Refused as a whole: not even the table change in the same file is applied.
  PipelineTables tables(*h.pipeline, running);
  auto r = tables.apply(edited("sched: atomic\n    routes:\n",
                               "sched: ordered\n    routes:\n"
                               "      - {prefix: 203.0.113.0/24, port: lan}\n"));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("sched atomic → ordered"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(run(registry, rates, "routes")["result"]["stages"][0]["routes"], 3u);
}

}  // namespace
}  // namespace vecflow::control
