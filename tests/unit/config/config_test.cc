// The appliance file loader: every shipped example loads, and every file of the invalid
// corpus produces the error an operator needs, at the right place.
//
// Each file in invalid/ starts with one or more lines
//   # expect: LINE:COL KEY.PATH | message fragment
// and the test checks that an error with exactly that location and path contains the
// fragment.
#include <filesystem>
#include <fstream>
#include <regex>

#include <unistd.h>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "config/config.h"

namespace fs = std::filesystem;
using namespace vecflow::config;

namespace {

const fs::path kSource = VECFLOW_SOURCE_DIR;

std::string errors_text(const std::vector<ConfigError>& errors) {
  std::string s;
  for (const auto& e : errors)
    s += "  " + e.to_string() + "\n";
  return s;
}

std::vector<fs::path> files_in(const fs::path& dir) {
  std::vector<fs::path> v;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ".yaml") v.push_back(e.path());
  }
  std::sort(v.begin(), v.end());
  return v;
}

TEST(ConfigExamples, EveryShippedFileLoads) {
  auto files = files_in(kSource / "configs");
  ASSERT_GE(files.size(), 4u) << "configs/ should hold demo, reference and two examples";
  for (const auto& f : files) {
    auto cfg = load_config(f.string());
    EXPECT_TRUE(cfg.has_value()) << f << " failed:\n" << (cfg ? "" : errors_text(cfg.error()));
  }
}

struct Expectation {
  int line;
  int column;
  std::string path;
  std::string fragment;
};

std::vector<Expectation> expectations(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::vector<Expectation> v;
  static const std::regex re(R"(^# expect: (\d+):(\d+) ?(\S*) \| (.*)$)");
  while (std::getline(in, line)) {
    std::smatch m;
    if (!std::regex_match(line, m, re)) continue;
    v.push_back({std::stoi(m[1]), std::stoi(m[2]), m[3], m[4]});
  }
  return v;
}

class InvalidConfig : public testing::TestWithParam<fs::path> {};

TEST_P(InvalidConfig, ReportsLocatedError) {
  const fs::path& file = GetParam();
  auto exp = expectations(file);
  ASSERT_FALSE(exp.empty()) << file << " has no '# expect:' line";
  auto cfg = load_config(file.string());
  ASSERT_FALSE(cfg.has_value()) << file << " loaded but should not";
  for (const auto& e : exp) {
    bool found = false;
    for (const auto& err : cfg.error()) {
      if (err.where.line == e.line && err.where.column == e.column && err.path == e.path &&
          err.message.find(e.fragment) != std::string::npos && err.where.file == file.string()) {
        found = true;
      }
    }
    EXPECT_TRUE(found) << file.filename() << ": no error " << e.line << ":" << e.column << " "
                       << e.path << " containing '" << e.fragment << "'; got:\n"
                       << errors_text(cfg.error());
  }
}

INSTANTIATE_TEST_SUITE_P(Corpus, InvalidConfig,
                         testing::ValuesIn(files_in(kSource / "tests/unit/config/invalid")),
                         [](const testing::TestParamInfo<fs::path>& info) {
                           return info.param.stem().string();
                         });

TEST(InvalidCorpus, HasAtLeastThirtyFiles) {
  EXPECT_GE(files_in(kSource / "tests/unit/config/invalid").size(), 30u);
}

TEST(ConfigLoad, MissingFileIsAnError) {
  auto cfg = load_config("/nonexistent/vecflow.yaml");
  ASSERT_FALSE(cfg);
  EXPECT_THAT(cfg.error()[0].to_string(), testing::HasSubstr("cannot open"));
}

TEST(ConfigLoad, ErrorFormatIsFileLineColPathMessage) {
  auto cfg = load_config_text("ports:\n  - {name: a, type: afxdp, interface: eth0, mode: fast}\n",
                              "t.yaml");
  ASSERT_FALSE(cfg);
  ASSERT_EQ(cfg.error().size(), 1u);
  EXPECT_EQ(cfg.error()[0].to_string(),
            "t.yaml:2:51: ports[0].mode: 'fast' is not one of 'auto', 'copy' or 'zerocopy'");
}

TEST(ConfigLoad, ReportsEveryErrorNotJustTheFirst) {
  auto cfg = load_config_text(
      "ports:\n"
      "  - {name: a, type: afxdp, interface: eth0, ring_size: 100}\n"
      "  - {name: b, type: dpdk, devargs: net_null0, queues: 999}\n"
      "dpdk: {memory_mb: 1}\n",
      "t.yaml");
  ASSERT_FALSE(cfg);
  EXPECT_EQ(cfg.error().size(), 3u) << errors_text(cfg.error());
}

TEST(ConfigLoad, DefaultsAndDerivedValues) {
  auto cfg = load_config_text(
      "cpu: {control: 0, workers: [1, 2]}\n"
      "ports:\n"
      "  - {name: wan, type: afxdp, interface: eth1}\n"
      "  - {name: lan, type: dpdk, devargs: 'net_af_xdp0,iface=eth2,start_queue=0'}\n",
      "t.yaml");
  ASSERT_TRUE(cfg) << errors_text(cfg.error());
  EXPECT_EQ(cfg->scheduler.workers, (std::vector<unsigned>{1, 2}));
  EXPECT_EQ(cfg->scheduler.vector_size, 64);
  EXPECT_EQ(cfg->steering.default_action.kind, SteerActionKind::Userspace);
  const auto& wan = std::get<AfXdpPort>(cfg->ports[0].kind);
  ASSERT_EQ(wan.queues.size(), 1u);
  EXPECT_EQ(wan.queues[0].count, 1);
  EXPECT_EQ(std::get<DpdkPort>(cfg->ports[1].kind).interface, "eth2");
  EXPECT_EQ(cfg->port_index("lan"), 1);
  EXPECT_EQ(cfg->hash.size(), 16u);
}

TEST(ConfigLoad, HashChangesWithContent) {
  auto a = load_config_text("ports: [{name: a, type: afxdp, interface: eth0}]\n", "a");
  auto b = load_config_text("ports: [{name: b, type: afxdp, interface: eth0}]\n", "b");
  ASSERT_TRUE(a && b);
  EXPECT_NE(a->hash, b->hash);
}

TEST(ConfigLoad, SteeringRulesParsed) {
  auto cfg = load_config_text(
      "ports: [{name: wan, type: afxdp, interface: eth0}, {name: out, type: afxdp, interface: "
      "eth1}]\n"
      "steering:\n"
      "  rules:\n"
      "    - {name: r1, priority: 7, match: {port: wan, vlan: 10, src: '2001:db8::/32', proto: "
      "udp, dst_port: 1000-2000}, action: {redirect: out}}\n",
      "t.yaml");
  ASSERT_TRUE(cfg) << errors_text(cfg.error());
  const auto& r = cfg->steering.rules.at(0);
  EXPECT_EQ(r.name, "r1");
  EXPECT_EQ(r.priority, 7u);
  EXPECT_EQ(r.match.vlan, 10);
  EXPECT_EQ(r.match.src->addr.version, 6);
  EXPECT_EQ(r.match.src->length, 32);
  EXPECT_EQ(r.match.l4_proto, 17);
  EXPECT_EQ(r.match.dst_port, (PortRange{1000, 2000}));
  EXPECT_EQ(r.action.kind, SteerActionKind::Redirect);
  EXPECT_EQ(r.action.redirect_port, "out");
}

// An operator with a large block list writes 100k steering rules into the file (~9 MB, over a
// million YAML nodes, no aliases): it loads, and every rule is kept.
TEST(ConfigLoad, HundredThousandSteeringRulesLoad) {
  constexpr int kRules = 100'000;
  std::string text =
      "ports: [{name: wan, type: afxdp, interface: eth0}]\n"
      "steering:\n"
      "  rules:\n";
  for (int i = 0; i < kRules; ++i) {
    text += fmt::format(
        "    - {{name: b{}, match: {{port: wan, src: 10.{}.{}.{}/32, proto: udp, dst_port: 7}}, "
        "action: drop}}\n",
        i, i >> 16 & 255, i >> 8 & 255, i & 255);
  }
  const fs::path path = fs::temp_directory_path() / fmt::format("vf-rules-{}.yaml", getpid());
  std::ofstream(path) << text;
  auto cfg = load_config(path.string());
  fs::remove(path);
  ASSERT_TRUE(cfg) << errors_text(cfg.error());
  ASSERT_EQ(cfg->steering.rules.size(), static_cast<size_t>(kRules));
  EXPECT_EQ(cfg->steering.rules.back().name, fmt::format("b{}", kRules - 1));
}

TEST(ConfigLoad, EcmpRouteAndStageNames) {
  auto cfg = load_config_text(
      "ports: [{name: a, type: afxdp, interface: eth0}]\n"
      "pipeline:\n"
      "  - stage: route\n"
      "    routes:\n"
      "      - prefix: 10.0.0.0/8\n"
      "        nexthops: [{via: 192.0.2.1, port: a}, {via: 192.0.2.2, port: a}]\n"
      "  - {stage: count, fuse: true}\n"
      "  - {stage: count, sched: parallel}\n",
      "t.yaml");
  ASSERT_TRUE(cfg) << errors_text(cfg.error());
  const auto& route = std::get<RouteStage>(cfg->pipeline[0].params);
  EXPECT_EQ(route.routes[0].nexthops.size(), 2u);
  EXPECT_EQ(cfg->pipeline[1].name, "count");
  EXPECT_TRUE(cfg->pipeline[1].fuse);
  EXPECT_EQ(cfg->pipeline[2].name, "count-2");
  EXPECT_EQ(cfg->pipeline[2].sched, SchedType::Parallel);
}

}  // namespace
