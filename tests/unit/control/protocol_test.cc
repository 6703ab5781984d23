// The control protocol without sockets: request parsing, replies, dispatch, argument checks,
// metric snapshots and their Prometheus text, configuration diffs.
#include <gtest/gtest.h>
#include <array>

#include <stdexcept>

#include "api/metrics.h"
#include "api/registry.h"
#include "config/config.h"
#include "control/config_json.h"
#include "pipeline/stage_registry.h"
#include "render.h"
#include "support/lab.h"

namespace vecflow::control {
namespace {

const MetricFamily kTestPackets{"vecflow_test_packets_total",
                                "Packets \"seen\"\nby a test",
                                MetricType::Counter,
                                {"port", "queue"}};
const MetricFamily kTestGauge{"vecflow_test_depth", "A gauge", MetricType::Gauge, {}};
const MetricFamily kTestWait{
    "vecflow_test_wait_seconds", "A histogram", MetricType::Histogram, {"port", "le"}};

TEST(ParseRequest, AcceptsAMinimalRequest) {
  auto r = parse_request(R"({"command":"status"})");
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(r->command, "status");
  EXPECT_TRUE(r->id.is_null());
  EXPECT_TRUE(r->args.is_null());
}

TEST(ParseRequest, KeepsIdArgsAndVersion) {
  auto r = parse_request(R"({"version":1,"id":"a7","command":"flows","args":{"top":5}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->id, "a7");
  EXPECT_EQ(r->args["top"], 5);
}

TEST(ParseRequest, MalformedJsonIsMalformed) {
  auto r = parse_request("status please");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::MalformedRequest);
}

TEST(ParseRequest, CutShortIsTruncated) {
  auto r = parse_request(R"({"command":"sta)");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::TruncatedRequest);
}

TEST(ParseRequest, RejectsNonObjectsMissingCommandAndBadArgs) {
  EXPECT_EQ(parse_request("[1,2]").error().code, ErrorCode::MalformedRequest);
  EXPECT_EQ(parse_request(R"({"args":{}})").error().code, ErrorCode::MalformedRequest);
  EXPECT_EQ(parse_request(R"({"command":7})").error().code, ErrorCode::MalformedRequest);
  EXPECT_EQ(parse_request(R"({"command":"x","args":[1]})").error().code,
            ErrorCode::MalformedRequest);
  EXPECT_EQ(parse_request(R"({"command":"x","verbose":true})").error().code,
            ErrorCode::MalformedRequest);
}

TEST(ParseRequest, OtherVersionsAreRefusedWithTheSupportedOne) {
  auto r = parse_request(R"({"version":2,"command":"status"})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::UnsupportedVersion);
  EXPECT_EQ(r.error().details["supported"][0], kProtocolVersion);
}

TEST(ParseRequest, InvalidUtf8IsMalformedNotACrash) {
  auto r = parse_request("{\"command\":\"\xff\xfe\"}");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::MalformedRequest);
}

TEST(ParseRequest, ANumberTooLargeForADoubleIsMalformedNotACrash) {
  auto r = parse_request(R"({"command":"status","id":1e400})");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::MalformedRequest);
  EXPECT_NE(r.error().message.find("1e400"), std::string::npos) << r.error().message;
}

TEST(Reply, CarriesVersionIdAndErrorCode) {
  Json ok = reply_ok("x", Json{{"a", 1}}, nullptr);
  EXPECT_EQ(ok["version"], kProtocolVersion);
  EXPECT_EQ(ok["id"], "x");
  EXPECT_TRUE(ok["ok"].get<bool>());
  EXPECT_FALSE(ok.contains("view"));
  Json err = reply_error(nullptr, CommandError{ErrorCode::BadArguments, "no", {}});
  EXPECT_FALSE(err.contains("id"));
  EXPECT_FALSE(err["ok"].get<bool>());
  EXPECT_EQ(err["error"]["code"], "bad_arguments");
}

const CommandSpec kArgsSpec{
    "args",
    "takes every kind of argument",
    Access::Read,
    {{"top", ArgType::Uint, "how many", false, false, {}, {}, 1, 100},
     {"by", ArgType::String, "order", false, false, {}, {"packets", "bytes"}},
     {"name", ArgType::String, "a name"},
     {"ratio", ArgType::Number, "a fraction", false, false, {}, {}, 0, 1},
     {"port", ArgType::String, "a port", true}}};

std::string args_problem(Json args) {
  auto e = check_args(kArgsSpec, args);
  if (!e) return {};
  EXPECT_EQ(e->code, ErrorCode::BadArguments);
  return e->message;
}

TEST(CheckArgs, RejectsUnknownKeysNamingTheKnownOnes) {
  std::string m = args_problem({{"port", "wan"}, {"sort", "x"}});
  EXPECT_NE(m.find("'sort'"), std::string::npos) << m;
  EXPECT_NE(m.find("top, by, name, ratio, port"), std::string::npos) << m;
}

TEST(CheckArgs, ChecksTypesRangesChoicesAndRequiredOnes) {
  EXPECT_EQ(args_problem({{"port", "wan"}}), "");
  EXPECT_EQ(args_problem({{"port", "wan"}, {"top", 100}, {"by", "bytes"}, {"ratio", 0.5}}), "");
  EXPECT_NE(args_problem({{"port", "wan"}, {"top", 0}}).find("expected 1..100"), std::string::npos);
  EXPECT_NE(args_problem({{"port", "wan"}, {"top", -3}}).find("non-negative integer"),
            std::string::npos);
  EXPECT_NE(args_problem({{"port", "wan"}, {"by", "flows"}}).find("packets, bytes"),
            std::string::npos);
  EXPECT_NE(args_problem({{"port", "wan"}, {"name", 3}}).find("must be a string"),
            std::string::npos);
  EXPECT_NE(args_problem({{"port", "wan"}, {"ratio", 2}}).find("expected 0..1"), std::string::npos);
  EXPECT_NE(args_problem(Json::object()).find("missing argument 'port'"), std::string::npos);
  EXPECT_NE(args_problem(Json::array()).find("must be an object"), std::string::npos);
}

TEST(CheckArgs, ACommandWithoutArgumentsSaysSo) {
  const CommandSpec none{"none", "takes nothing"};
  auto e = check_args(none, Json{{"x", 1}});
  ASSERT_TRUE(e);
  EXPECT_NE(e->message.find("takes none"), std::string::npos);
  EXPECT_FALSE(check_args(none, Json()));
}

TEST(ArgReader, ReadsCheckedArgumentsWithFallbacks) {
  const Json args = {{"port", "wan"}, {"top", 7}};
  const Peer peer;
  const Snapshot snapshot(0);
  const RateWindow rates;
  const CommandContext ctx{args, peer, snapshot, rates};
  ArgReader a(ctx);
  EXPECT_EQ(a.string("port", ""), "wan");
  EXPECT_EQ(a.uint("top", 20), 7u);
  EXPECT_EQ(a.string("by", "packets"), "packets");
  EXPECT_FALSE(a.string("name"));
  EXPECT_EQ(a.number("ratio", 0.25), 0.25);
}

const CommandSpec kEcho{"echo", "echo args", Access::Read, {{"n", ArgType::Uint, "a number"}}};
const CommandSpec kChange{"change", "changes", Access::Change};
const CommandSpec kThrows{"throws", "a bug"};
const CommandSpec kViewed{"viewed", "has a view"};

class DispatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(registry.add_command(Command{&kEcho, [](const CommandContext& c) -> CommandResult {
                                               return Json{{"args", c.args}};
                                             }}));
    ASSERT_TRUE(registry.add_command(Command{&kChange, [](const CommandContext&) -> CommandResult {
                                               return Json{{"done", true}};
                                             }}));
    ASSERT_TRUE(registry.add_command(Command{
        &kThrows,
        [](const CommandContext&) -> CommandResult { throw std::runtime_error("out of cheese"); },
        View{{table("t", "/rows", {{"A", "a"}})}}}));
  }
  Json run(const std::string& text, bool may_change = false) {
    auto r = parse_request(text);
    EXPECT_TRUE(r);
    Peer p;
    p.may_change = may_change;
    return registry.dispatch(*r, p, rates);
  }
  Registry registry;
  RateWindow rates;
};

TEST_F(DispatchTest, UnknownCommandListsWhatIsServed) {
  Json r = run(R"({"command":"ports"})");
  EXPECT_EQ(r["error"]["code"], "unknown_command");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("change, echo, throws"),
            std::string::npos);
}

TEST_F(DispatchTest, RegisteringANameTwiceFails) {
  auto r = registry.add_command(Command{&kEcho, nullptr});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("twice"), std::string::npos);
}

// The rule every command lives by: vecflowctl's --help, the man page and `commands` print a
// summary and each argument's help, so a spec without them does not register.
TEST_F(DispatchTest, ACommandWithoutHelpIsRefused) {
  const CommandSpec no_summary{"quiet", ""};
  auto r = registry.add_command(Command{&no_summary, nullptr});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("no summary"), std::string::npos);
  const CommandSpec no_arg_help{"terse", "says little", Access::Read, {{"x", ArgType::Uint, ""}}};
  r = registry.add_command(Command{&no_arg_help, nullptr});
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("'x' has no help"), std::string::npos);
  EXPECT_FALSE(registry.find("quiet"));
  EXPECT_FALSE(registry.find("terse"));
}

TEST_F(DispatchTest, ArgumentsAreCheckedBeforeTheHandlerRuns) {
  EXPECT_EQ(run(R"({"command":"echo","args":{"n":3}})")["result"]["args"]["n"], 3);
  Json r = run(R"({"command":"echo","args":{"n":"three"}})");
  EXPECT_EQ(r["error"]["code"], "bad_arguments");
  EXPECT_EQ(run(R"({"command":"change","args":{"n":1}})", true)["error"]["code"], "bad_arguments");
}

TEST_F(DispatchTest, ChangeNeedsAPrivilegedPeer) {
  EXPECT_EQ(run(R"({"command":"change"})")["error"]["code"], "permission_denied");
  EXPECT_TRUE(run(R"({"command":"change"})", true)["ok"].get<bool>());
}

TEST_F(DispatchTest, AHandlerThatThrowsGetsAnInternalError) {
  Json r = run(R"({"command":"throws","id":9})");
  EXPECT_EQ(r["id"], 9);
  EXPECT_EQ(r["error"]["code"], "internal");
  EXPECT_NE(r["error"]["message"].get<std::string>().find("out of cheese"), std::string::npos);
}

TEST_F(DispatchTest, ViewIsSentOnlyWhenAsked) {
  EXPECT_FALSE(run(R"({"command":"echo"})").contains("view"));
  registry.remove_command("throws");
  ASSERT_TRUE(registry.add_command(
      Command{&kViewed, [](const CommandContext&) -> CommandResult { return Json::object(); },
              View{{table("t", "/rows", {{"A", "a", Unit::Pps}})}}}));
  Json r = run(R"({"command":"viewed","view":true})");
  ASSERT_TRUE(r.contains("view"));
  EXPECT_EQ(r["view"][0]["columns"][0]["unit"], "pps");
}

TEST(Snapshot, SumsSeriesAddedTwiceAndMatchesLabels) {
  Snapshot s;
  s.add(kTestPackets, {"wan", "0"}, 5);
  s.add(kTestPackets, {"wan", "0"}, 7);
  s.add(kTestPackets, {"wan", "1"}, 1);
  s.add(kTestPackets, {"lan", "0"}, 100);
  EXPECT_EQ(s.count(kTestPackets, {"wan", "0"}), 12u);
  EXPECT_EQ(s.sum(kTestPackets, {{"port", "wan"}}), 13);
  EXPECT_EQ(s.sum(kTestPackets), 113);
  EXPECT_EQ(s.sum(kTestPackets, {{"nope", "x"}}), 0);
  EXPECT_EQ(s.count(kTestPackets, {"dmz", "0"}), 0u);
}

TEST(Snapshot, RendersPrometheusTextWithEscaping) {
  Snapshot s;
  s.add(kTestPackets, {"w\"a\\n\nx", "0"}, 3);
  s.set(kTestGauge, {}, 0.5);
  std::string text = render_prometheus(s);
  EXPECT_NE(text.find("# HELP vecflow_test_packets_total Packets \"seen\"\\nby a test\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE vecflow_test_packets_total counter\n"), std::string::npos);
  EXPECT_NE(text.find("vecflow_test_packets_total{port=\"w\\\"a\\\\n\\nx\",queue=\"0\"} 3\n"),
            std::string::npos);
  EXPECT_NE(text.find("# TYPE vecflow_test_depth gauge\nvecflow_test_depth 0.5\n"),
            std::string::npos);
}

// Prometheus' histogram: each label set's buckets in ascending order of their bound (10 before
// 2 as text), then its sum and count; the buckets count up like counters between snapshots.
TEST(Snapshot, RendersAHistogramAsBucketsSumAndCount) {
  const std::array<double, 3> bounds = {0.5, 2, 10};
  Snapshot s;
  s.add_histogram(kTestWait, {"wan"}, bounds, std::array<uint64_t, 4>{1, 3, 3, 4}, 12.5);
  std::string text = render_prometheus(s);
  EXPECT_NE(text.find("# TYPE vecflow_test_wait_seconds histogram\n"
                      "vecflow_test_wait_seconds_bucket{port=\"wan\",le=\"0.5\"} 1\n"
                      "vecflow_test_wait_seconds_bucket{port=\"wan\",le=\"2\"} 3\n"
                      "vecflow_test_wait_seconds_bucket{port=\"wan\",le=\"10\"} 3\n"
                      "vecflow_test_wait_seconds_bucket{port=\"wan\",le=\"+Inf\"} 4\n"
                      "vecflow_test_wait_seconds_count{port=\"wan\"} 4\n"
                      "vecflow_test_wait_seconds_sum{port=\"wan\"} 12.5\n"),
            std::string::npos)
      << text;
  Snapshot later;
  later.add_histogram(kTestWait, {"wan"}, bounds, std::array<uint64_t, 4>{2, 5, 6, 9}, 20);
  later.subtract(s);
  EXPECT_EQ(later.count(kTestWait, {"wan", "2"}), 2u);
  EXPECT_EQ(later.count(kTestWait, {"wan", "+Inf"}), 5u);
  EXPECT_DOUBLE_EQ(later.get(kTestWait, {"wan", ""})->real, 7.5);
}

TEST(RateWindow, RatesNeedTwoSamplesAndIgnoreResets) {
  RateWindow w;
  Snapshot a(1'000'000'000);
  a.add(kTestPackets, {"wan", "0"}, 100);
  w.push(a);
  EXPECT_FALSE(w.rate(kTestPackets, {"wan", "0"}));
  Snapshot b(3'000'000'000);
  b.add(kTestPackets, {"wan", "0"}, 700);
  w.push(b);
  ASSERT_TRUE(w.rate(kTestPackets, {"wan", "0"}));
  EXPECT_DOUBLE_EQ(*w.rate(kTestPackets, {"wan", "0"}), 300.0);
  EXPECT_DOUBLE_EQ(w.interval_s(), 2.0);
  Snapshot c(4'000'000'000);
  c.add(kTestPackets, {"wan", "0"}, 5);  // a part restarted its counters
  w.push(c);
  EXPECT_FALSE(w.rate(kTestPackets, {"wan", "0"}));
}

config::ApplianceConfig load(const std::string& text) {
  auto c = config::load_config_text(text, "<test>", builtin_stage_types());
  EXPECT_TRUE(c) << (c ? "" : c.error()[0].to_string());
  return c ? *c : config::ApplianceConfig{};
}

constexpr const char* kBase = R"(
appliance: {name: a}
ports:
  - {name: wan, type: afxdp, interface: veth-x0}
  - {name: lan, type: dpdk, devargs: "net_af_packet0,iface=veth-x1"}
steering:
  rules:
    - {name: arp, match: {l3: arp}, action: pass}
    - {name: ssh, match: {proto: tcp, dst_port: 22}, action: pass}
)";

TEST(ConfigDiff, IdenticalFilesHaveNoChanges) {
  EXPECT_TRUE(diff_configs(load(kBase), load(kBase)).empty());
}

// The running file's `queues: all` was filled in with the interface's queues at start-up;
// reloading the same file still changes nothing, and the running configuration says `all`.
TEST(ConfigDiff, QueuesAllFilledInAtStartUpIsNoChange) {
  config::ApplianceConfig running = load(kBase);
  ASSERT_EQ(config::resolve_rx_queues(running, 0, 4), std::nullopt);
  EXPECT_TRUE(diff_configs(running, load(kBase)).empty());
  EXPECT_EQ(config_to_json(running)["ports"][0]["queues"], "all");
  EXPECT_TRUE(config_to_json(running)["ports"][0]["other_queues"].is_null());
  std::string next = kBase;
  next.replace(next.find("interface: veth-x0}"), 19,
               "interface: veth-x0, queues: 1, other_queues: drop}");
  auto changes = diff_configs(running, load(next));
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].path, "ports[wan].queues");
  EXPECT_EQ(changes[1].path, "ports[wan].other_queues");
  EXPECT_EQ(changes[1].to, "drop");
}

TEST(ConfigDiff, MatchesRulesByNameAndReportsOrder) {
  std::string next = kBase;
  next.replace(next.find("    - {name: arp"), 0,
               "    - {name: dns, match: {proto: udp, dst_port: 53}, action: drop}\n");
  next.replace(next.find("dst_port: 22}, action: pass"), 27, "dst_port: 22}, action: drop");
  // A rule inserted first is one added rule, not every later rule changed.
  auto changes = diff_configs(load(kBase), load(next));
  ASSERT_EQ(changes.size(), 2u) << to_json(changes[0]).dump();
  EXPECT_EQ(changes[0].path, "steering.rules[ssh].action");
  EXPECT_EQ(changes[0].from, "pass");
  EXPECT_EQ(changes[0].to, "drop");
  EXPECT_EQ(changes[1].path, "steering.rules[dns]");
  EXPECT_EQ(changes[1].op, "added");
}

TEST(ConfigDiff, ReportsRulesThatChangedOrder) {
  std::string next = kBase;
  std::string arp = "    - {name: arp, match: {l3: arp}, action: pass}\n";
  next.erase(next.find(arp), arp.size());
  next += arp;
  auto changes = diff_configs(load(kBase), load(next));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].op, "reordered");
  EXPECT_EQ(changes[0].path, "steering.rules");
  EXPECT_EQ(changes[0].to, Json::array({"ssh", "arp"}));
}

TEST(ConfigDiff, ReportsSectionsOfScalarChanges) {
  std::string next = kBase;
  next.replace(next.find("name: a}"), 8, "name: b}");
  next += "control: {read_timeout_ms: 700}\n";
  auto changes = diff_configs(load(kBase), load(next));
  ASSERT_EQ(changes.size(), 2u);
  EXPECT_EQ(changes[0].section, "appliance");
  EXPECT_EQ(changes[1].path, "control.read_timeout_ms");
  EXPECT_EQ(changes[1].to, 700);
}

TEST(ConfigDiff, CopySectionReplacesOnlyThatSection) {
  auto a = load(kBase);
  std::string next = kBase;
  next.replace(next.find("name: a}"), 8, "name: b}");
  next += "logging: {level: debug}\n";
  auto b = load(next);
  copy_section(a, b, "logging");
  auto left = diff_configs(a, b);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].section, "appliance");
}

TEST(ConfigJson, ReferenceFileSerialisesEverySection) {
  auto cfg =
      config::load_config(test::source_path("configs/reference.yaml"), builtin_stage_types());
  ASSERT_TRUE(cfg);
  Json j = config_to_json(*cfg);
  for (const auto& s : config_sections())
    EXPECT_TRUE(j.contains(s)) << s;
  EXPECT_EQ(j["pipeline"].size(), cfg->pipeline.size());
  EXPECT_EQ(j["control"]["mode"], "0660");
}

// `vecflowctl config` prints the running configuration as YAML; saved, that text must load
// into the same configuration (so a reload of it changes nothing), for every shipped file.
TEST(ConfigJson, PrintedAsYamlItLoadsBackIntoTheSameConfiguration) {
  for (const char* file : {"configs/reference.yaml", "configs/demo.yaml", "configs/router.yaml",
                           "configs/edge.yaml", "configs/appliance.yaml", "configs/trunk.yaml"}) {
    auto cfg = config::load_config(test::source_path(file), builtin_stage_types());
    ASSERT_TRUE(cfg) << file;
    const Json j = config_to_json(*cfg);
    const std::string yaml = vecflowctl::to_yaml(vecflowctl::Json::parse(j.dump()));
    auto again = config::load_config_text(yaml, "printed.yaml", builtin_stage_types());
    ASSERT_TRUE(again) << file << ": " << again.error().front().to_string() << "\n" << yaml;
    EXPECT_EQ(config_to_json(*again), j) << file << "\n" << yaml;
  }
}

}  // namespace
}  // namespace vecflow::control
