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
#include "core/ids.h"
#include "pipeline/route/route_stage.h"
#include "pipeline/stage_registry.h"

namespace fs = std::filesystem;
using namespace vecflow::config;
using vecflow::QueueOwner;
using vecflow::RouteChecks;
using vecflow::RouteConfig;
using vecflow::SchedType;

namespace {

// The loader with the built-in stage types.
LoadResult load_config(const std::string& path) {
  return vecflow::config::load_config(path, vecflow::builtin_stage_types());
}
LoadResult load_config_text(std::string_view text, const std::string& source) {
  return vecflow::config::load_config_text(text, source, vecflow::builtin_stage_types());
}

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

// An error about the file as a whole (it cannot be opened, read, is too large or is not a
// file) names the file and no line.
TEST(ConfigLoad, FileLevelErrorsNameTheFile) {
  const fs::path dir = fs::temp_directory_path() / fmt::format("vf-config-{}", getpid());
  fs::create_directories(dir);
  const fs::path large = dir / "large.yaml";
  {
    std::ofstream(large) << "";
    fs::resize_file(large, (32u << 20) + 1);  // sparse: no 32 MiB written
  }
  struct Case {
    std::string path;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"/nonexistent/vecflow.yaml", "cannot open: No such file or directory"},
      {dir.string(), "is a directory"},
      // Opens, and every read fails: nothing is mapped at address 0.
      {"/proc/self/mem", "cannot read: Input/output error"},
      {large.string(), "file is larger than 33554432 bytes"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.path);
    auto cfg = load_config(c.path);
    ASSERT_FALSE(cfg);
    ASSERT_EQ(cfg.error().size(), 1u) << errors_text(cfg.error());
    const ConfigError& e = cfg.error()[0];
    EXPECT_EQ(e.where.file, c.path);
    EXPECT_EQ(e.where.line, 0);
    EXPECT_EQ(e.to_string(), c.path + ": " + c.message);
  }
  fs::remove_all(dir);
}

// Strings are UTF-8 (RFC 3629) without NUL; the error names the first byte at fault and never
// repeats the bytes, so it can travel as JSON.
TEST(ConfigLoad, StringsAreUtf8WithoutNul) {
  const auto name = [](std::string value) {
    return load_config_text("appliance: {name: \"" + value +
                                "\"}\nports: [{name: wan, type: afxdp, interface: eth0}]\n",
                            "t.yaml");
  };
  auto good = name("Zürich édge 東京 \xf0\x9f\x9a\x80");
  ASSERT_TRUE(good) << errors_text(good.error());
  EXPECT_EQ(good->appliance.name, "Zürich édge 東京 🚀");

  const std::vector<std::pair<std::string, std::string>> bad = {
      {"a\\0b", "contains a NUL byte (offset 1)"},
      {"ab\xc0\x80", "is not valid UTF-8 (byte 0xc0 at offset 2)"},        // overlong NUL
      {"\xe0\x80\xaf", "is not valid UTF-8 (byte 0xe0 at offset 0)"},      // overlong '/'
      {"x\xed\xa0\x80", "is not valid UTF-8 (byte 0xed at offset 1)"},     // surrogate
      {"\xf4\x90\x80\x80", "is not valid UTF-8 (byte 0xf4 at offset 0)"},  // past U+10FFFF
      {"\xf5\x80\x80\x80", "is not valid UTF-8 (byte 0xf5 at offset 0)"},  // no such lead
      {"ab\x80", "is not valid UTF-8 (byte 0x80 at offset 2)"},            // lone continuation
      {"euro \xe2\x82", "is not valid UTF-8 (byte 0xe2 at offset 5)"},     // cut short
      {"caf\xe9 au lait", "is not valid UTF-8 (byte 0xe9 at offset 3)"},   // Latin-1
  };
  for (const auto& [value, fault] : bad) {
    SCOPED_TRACE(fault);
    auto cfg = name(value);
    ASSERT_FALSE(cfg);
    ASSERT_EQ(cfg.error().size(), 1u) << errors_text(cfg.error());
    EXPECT_EQ(cfg.error()[0].to_string(), "t.yaml:1:19: appliance.name: the string " + fault);
  }
}

// yaml-cpp reads nodes 499 levels deep and refuses the 500th with only "bad file"; the loader
// says so, at the 499th collection, whose contents the parser would not read. 100 000 levels,
// as lists, mappings and compact block lists, are refused alike.
TEST(ConfigLoad, NestingBeyondTheParserIsALocatedError) {
  const std::string ports = "ports: [{name: wan, type: afxdp, interface: eth0}]\n";
  const auto nested = [&](int levels, std::string_view open, std::string_view close) {
    std::string text = ports + "x: ";
    for (int i = 0; i < levels; ++i)
      text += open;
    text += "y";
    for (int i = 0; i < levels; ++i)
      text += close;
    return text + "\n";
  };
  // 499 levels (the root mapping, 497 lists and a scalar) are read; then refused as an
  // unknown key.
  auto deepest = load_config_text(nested(497, "[", "]"), "t.yaml");
  ASSERT_FALSE(deepest);
  EXPECT_THAT(errors_text(deepest.error()), testing::HasSubstr("2:1: x: unknown key 'x'"));
  EXPECT_THAT(errors_text(deepest.error()), testing::Not(testing::HasSubstr("nested")));

  std::string block = ports;
  for (int i = 0; i < 600; ++i)
    block += std::string(size_t(i), ' ') + "k:\n";
  std::string compact = ports + "x:\n";
  for (int i = 0; i < 100'000; ++i)
    compact += "- ";
  compact += "y\n";
  // Where the 499th collection starts: the root mapping is the first.
  const std::vector<std::tuple<std::string, std::string, int, int>> cases = {
      {"a scalar one level too deep", nested(498, "[", "]"), 2, 3 + 498},
      {"a list one level too deep", nested(499, "[", "]"), 2, 3 + 498},
      // An empty list 499 deep is read; the one after it holds too much.
      {"the second of two lists 499 deep",
       ports + "x: " + std::string(497, '[') + "[], [y]" + std::string(497, ']') + "\n", 2,
       3 + 497 + 5},
      {"100 000 lists", nested(100'000, "[", "]"), 2, 3 + 498},
      {"100 000 mappings", nested(100'000, "{a: ", "}"), 2, 4 + 4 * 497},
      {"100 000 compact block lists", compact, 3, 1 + 2 * 497},
      {"600 block mappings", block, 1 + 499, 499},
  };
  for (const auto& [what, text, line, column] : cases) {
    SCOPED_TRACE(what);
    auto cfg = load_config_text(text, "t.yaml");
    ASSERT_FALSE(cfg);
    ASSERT_EQ(cfg.error().size(), 1u) << errors_text(cfg.error());
    const ConfigError& e = cfg.error()[0];
    EXPECT_EQ(e.where.line, line);
    EXPECT_EQ(e.where.column, column);
    EXPECT_EQ(e.path, "");
    EXPECT_THAT(e.message, testing::HasSubstr("nested deeper than 499 levels"));
  }
}

TEST(ConfigLoad, NegativeNumbersAreOutOfRange) {
  for (const char* v : {"-1", "-99999999999999999999"}) {
    auto cfg = load_config_text(
        fmt::format("ports: [{{name: wan, type: afxdp, interface: eth0, queues: {}}}]\n", v),
        "t.yaml");
    ASSERT_FALSE(cfg);
    ASSERT_EQ(cfg.error().size(), 1u) << errors_text(cfg.error());
    EXPECT_EQ(cfg.error()[0].message,
              fmt::format("expected an integer from 1 to 256, found {}", v));
  }
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
  EXPECT_TRUE(wan.all_queues);  // `queues: all`: start-up fills in the interface's queues
  EXPECT_TRUE(wan.queues.empty());
  EXPECT_FALSE(wan.other_queues);
  EXPECT_EQ(std::get<DpdkPort>(cfg->ports[1].kind).interface, "eth2");
  EXPECT_EQ(cfg->port_index("lan"), 1);
  EXPECT_EQ(cfg->hash.size(), 16u);
}

// Each VLAN of a trunk is a port of its own. Its Linux VLAN device is named after the parent's
// interface unless the file names it, and a parent may come after its VLANs.
TEST(ConfigVlan, VlanPortsLoadWithParentVlanAndDevice) {
  auto cfg = load_config_text(
      "ports:\n"
      "  - {name: office, type: vlan, parent: trunk, vlan: 100}\n"
      "  - {name: trunk, type: afxdp, interface: trunk0, mtu: 9000}\n"
      "  - {name: guests, type: vlan, parent: trunk, vlan: 4094, interface: guests, mtu: 1500}\n"
      "steering:\n"
      "  rules: [{match: {port: trunk, vlan: 100}, action: userspace}]\n",
      "t.yaml");
  ASSERT_TRUE(cfg) << errors_text(cfg.error());
  ASSERT_EQ(cfg->ports.size(), 3u);
  const PortConfig& office = cfg->ports[0];
  ASSERT_TRUE(office.is_vlan());
  EXPECT_FALSE(office.is_afxdp());
  const auto& o = std::get<VlanPort>(office.kind);
  EXPECT_EQ(o.parent, "trunk");
  EXPECT_EQ(o.vlan, 100);
  EXPECT_EQ(o.interface, "trunk0.100");  // the default: <parent's interface>.<vlan>
  ASSERT_NE(office.kernel_interface(), nullptr);
  EXPECT_EQ(*office.kernel_interface(), "trunk0.100");
  EXPECT_FALSE(office.lcore);
  EXPECT_FALSE(office.mtu);
  EXPECT_TRUE(cfg->ports[1].is_afxdp());
  const PortConfig& guests = cfg->ports[2];
  const auto& g = std::get<VlanPort>(guests.kind);
  EXPECT_EQ(g.parent, "trunk");
  EXPECT_EQ(g.vlan, 4094);
  EXPECT_EQ(g.interface, "guests");
  EXPECT_EQ(guests.mtu, 1500u);
  EXPECT_EQ(cfg->port_index("guests"), 2);
}

// A default device name of exactly 15 characters, the most Linux takes, is kept; one longer is
// refused (invalid/vlan_default_interface_too_long.yaml).
TEST(ConfigVlan, DefaultDeviceNameMayBeFifteenCharacters) {
  auto cfg = load_config_text(
      "ports:\n"
      "  - {name: trunk, type: afxdp, interface: enp129s0f0}\n"
      "  - {name: office, type: vlan, parent: trunk, vlan: 4094}\n",
      "t.yaml");
  ASSERT_TRUE(cfg) << errors_text(cfg.error());
  EXPECT_EQ(std::get<VlanPort>(cfg->ports[1].kind).interface, "enp129s0f0.4094");
}

// A trunk may carry as many VLAN ports as an appliance has ports (kMaxPorts, 1024 with the
// trunk); one more is refused where it stands, naming the limit, rather than run without a
// place in the per-port tables.
TEST(ConfigVlan, AnApplianceHasAtMostKMaxPortsVlansIncluded) {
  using vecflow::kMaxPorts;
  const auto trunk_with = [](unsigned vlans) {
    std::string text = "ports:\n  - {name: trunk, type: afxdp, interface: trunk0}\n";
    for (unsigned v = 1; v <= vlans; ++v)
      text += fmt::format("  - {{name: v{0}, type: vlan, parent: trunk, vlan: {0}}}\n", v);
    return text;
  };
  auto most = load_config_text(trunk_with(kMaxPorts - 1), "t.yaml");
  ASSERT_TRUE(most) << errors_text(most.error());
  EXPECT_EQ(most->ports.size(), kMaxPorts);
  auto over = load_config_text(trunk_with(kMaxPorts), "t.yaml");
  ASSERT_FALSE(over);
  // ports[1024] is on line 1026: "ports:", then a port a line.
  EXPECT_THAT(errors_text(over.error()),
              ::testing::HasSubstr(fmt::format("t.yaml:{}:", kMaxPorts + 2)));
  EXPECT_THAT(errors_text(over.error()), ::testing::HasSubstr(fmt::format("ports[{}]", kMaxPorts)));
  EXPECT_THAT(errors_text(over.error()),
              ::testing::HasSubstr(fmt::format("at most {}", kMaxPorts)));
}

// QinQ: a service VLAN (802.1ad) of the trunk and customer VLANs inside it, each a port; their
// devices are named as Linux stacks them (trunk0.300, trunk0.300.10). Steering matches both tags.
TEST(ConfigVlan, QinqPortsAreVlanPortsOfAServiceVlan) {
  auto cfg = load_config_text(
      "ports:\n"
      "  - {name: cust, type: vlan, parent: svc, vlan: 10}\n"
      "  - {name: trunk, type: afxdp, interface: trunk0}\n"
      "  - {name: svc, type: vlan, parent: trunk, vlan: 300, proto: 802.1ad}\n"
      "  - {name: office, type: vlan, parent: trunk, vlan: 300, interface: office0}\n"
      "steering:\n"
      "  rules: [{match: {port: trunk, vlan: 300, inner_vlan: 10}, action: userspace}]\n",
      "t.yaml");
  ASSERT_TRUE(cfg) << errors_text(cfg.error());
  const auto& cust = std::get<VlanPort>(cfg->ports[0].kind);
  EXPECT_EQ(cust.parent, "svc");
  EXPECT_EQ(cust.proto, VlanProto::Dot1q);
  EXPECT_EQ(cust.interface, "trunk0.300.10");
  const auto& svc = std::get<VlanPort>(cfg->ports[2].kind);
  EXPECT_EQ(svc.proto, VlanProto::Dot1ad);
  EXPECT_EQ(svc.interface, "trunk0.300");
  EXPECT_EQ(std::get<VlanPort>(cfg->ports[3].kind).proto, VlanProto::Dot1q)
      << "802.1Q 300 and 802.1ad 300 are two VLANs";
  EXPECT_EQ(cfg->link_of(cfg->ports[0])->name, "trunk");
  EXPECT_EQ(cfg->link_of(cfg->ports[1])->name, "trunk");
  EXPECT_EQ(cfg->steering.rules[0].match.inner_vlan, 10);
}

// VRFs: each with its ports and the kernel table it follows; routes name their VRF, and a
// route into another VRF is `to_vrf` (a next hop with neither port nor gateway).
TEST(ConfigVrf, VrfsAndTheirRoutesLoad) {
  auto cfg = load_config_text(
      "ports:\n"
      "  - {name: a, type: afxdp, interface: a0}\n"
      "  - {name: b, type: afxdp, interface: b0}\n"
      "  - {name: up, type: afxdp, interface: u0}\n"
      "vrfs:\n"
      "  - {name: blue, table: 10, ports: [a]}\n"
      "  - {name: red, ports: [b]}\n"
      "pipeline:\n"
      "  - stage: route\n"
      "    routes:\n"
      "      - {prefix: 10.0.0.0/24, vrf: blue, port: a}\n"
      "      - {prefix: 10.0.0.0/24, vrf: red, port: b}\n"
      "      - {prefix: 10.0.0.0/24, vrf: default, port: up}\n"
      "      - {prefix: 172.16.0.0/12, vrf: red, to_vrf: blue}\n",
      "t.yaml");
  ASSERT_TRUE(cfg) << errors_text(cfg.error());
  ASSERT_EQ(cfg->vrfs.size(), 2u);
  EXPECT_EQ(cfg->vrfs[0].name, "blue");
  EXPECT_EQ(cfg->vrfs[0].table, 10u);
  EXPECT_EQ(cfg->vrfs[0].ports, std::vector<std::string>{"a"});
  EXPECT_EQ(cfg->vrfs[1].table, 0u);  // follows no kernel table
  const auto& rc = cfg->pipeline[0].params.get<RouteConfig>();
  ASSERT_EQ(rc.routes.size(), 4u);
  EXPECT_EQ(rc.routes[0].vrf, "blue");
  EXPECT_EQ(rc.routes[1].vrf, "red");
  EXPECT_EQ(rc.routes[2].vrf, "");  // `default` is the default VRF
  ASSERT_EQ(rc.routes[3].nexthops.size(), 1u);
  EXPECT_EQ(rc.routes[3].nexthops[0].vrf, "blue");
  EXPECT_EQ(rc.routes[3].nexthops[0].port, "");
}

// An afxdp port reads every rx queue of its interface unless the file says otherwise.
TEST(ConfigQueues, AllIsTheDefaultAndTakesEveryQueueTheInterfaceHas) {
  for (const char* port : {"{name: wan, type: afxdp, interface: veth0}",
                           "{name: wan, type: afxdp, interface: veth0, queues: all}"}) {
    auto cfg = load_config_text(fmt::format("ports: [{}]\n", port), "t.yaml");
    ASSERT_TRUE(cfg) << errors_text(cfg.error());
    EXPECT_EQ(resolve_rx_queues(*cfg, 0, 4), std::nullopt) << port;
    const auto& a = std::get<AfXdpPort>(cfg->ports[0].kind);
    ASSERT_EQ(a.queues.size(), 1u);
    EXPECT_EQ(a.queues[0].first, 0);
    EXPECT_EQ(a.queues[0].count, 4);
    EXPECT_EQ(a.queues[0].owner, QueueOwner::Vecflow);
    EXPECT_TRUE(a.all_queues);
  }
}

// The case of issue 16: `queues: 1` on a veth with 2 rx queues. The flows hashed to queue 1
// went to the kernel unnoticed; now start-up refuses the file, at the key, with the counts.
TEST(ConfigQueues, ReadingFewerQueuesThanTheInterfaceHasIsRefusedWithTheCounts) {
  auto cfg = load_config_text(
      "ports:\n"
      "  - name: wan\n"
      "    type: afxdp\n"
      "    interface: veth0\n"
      "    queues: 1\n",
      "t.yaml");
  ASSERT_TRUE(cfg) << errors_text(cfg.error());
  auto e = resolve_rx_queues(*cfg, 0, 2);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->to_string(),
            "t.yaml:5:13: ports[0].queues: interface veth0 has 2 rx queues, the file reads 1 "
            "(queue 0): flows the interface hashes to queue 1 would bypass vecflow. Read them all "
            "(`queues: all`) or say what happens to the others (`other_queues: pass` hands them "
            "to the kernel, `other_queues: drop` drops them; either is counted)");
  // The same file on an interface with one queue is fine.
  EXPECT_EQ(resolve_rx_queues(*cfg, 0, 1), std::nullopt);
}

TEST(ConfigQueues, RangesThatLeaveGapsNameTheUnreadQueues) {
  auto cfg = load_config_text(
      "ports:\n"
      "  - {name: wan, type: afxdp, interface: eth0,\n"
      "     queues: [{queues: 0-1, owner: vecflow}, {queues: 3, owner: dpdk}]}\n",
      "t.yaml");
  ASSERT_TRUE(cfg) << errors_text(cfg.error());
  auto e = resolve_rx_queues(*cfg, 0, 6);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->where.line, 3);
  EXPECT_EQ(e->path, "ports[0].queues");
  EXPECT_THAT(e->message, testing::HasSubstr("interface eth0 has 6 rx queues, the file reads 3 "
                                             "(queues 0-1, 3): flows the interface hashes to "
                                             "queues 2, 4-5 would bypass vecflow"));
}

TEST(ConfigQueues, OtherQueuesSaysWhatHappensToTheRest) {
  for (auto [word, kind] :
       {std::pair{"pass", SteerActionKind::Pass}, std::pair{"drop", SteerActionKind::Drop}}) {
    auto cfg = load_config_text(
        fmt::format("ports: [{{name: wan, type: afxdp, interface: veth0, queues: 1, "
                    "other_queues: {}}}]\n",
                    word),
        "t.yaml");
    ASSERT_TRUE(cfg) << errors_text(cfg.error());
    EXPECT_EQ(resolve_rx_queues(*cfg, 0, 2), std::nullopt) << word;
    const auto& a = std::get<AfXdpPort>(cfg->ports[0].kind);
    EXPECT_EQ(a.other_queues, kind);
    ASSERT_EQ(a.queues.size(), 1u);
    EXPECT_EQ(a.queues[0].count, 1);  // still queue 0 only: the rest is the XDP program's
  }
}

TEST(ConfigQueues, AQueueTheInterfaceLacksIsRefused) {
  auto cfg = load_config_text(
      "ports: [{name: wan, type: afxdp, interface: veth0, queues: 4, other_queues: pass}]\n",
      "t.yaml");
  ASSERT_TRUE(cfg) << errors_text(cfg.error());
  auto e = resolve_rx_queues(*cfg, 0, 2);
  ASSERT_TRUE(e);
  EXPECT_EQ(e->message,
            "interface veth0 has 2 rx queues (0-1), the file reads queues 2-3 it does not have");
}

TEST(ConfigQueues, AllOnMoreQueuesThanAPortReadsIsRefused) {
  auto cfg = load_config_text("ports: [{name: wan, type: afxdp, interface: eth0}]\n", "t.yaml");
  ASSERT_TRUE(cfg) << errors_text(cfg.error());
  auto e = resolve_rx_queues(*cfg, 0, kMaxRxQueues + 1);
  ASSERT_TRUE(e);
  EXPECT_THAT(e->message, testing::HasSubstr("interface eth0 has 65 rx queues; a port reads at "
                                             "most 64 (queues 0-63)"));
}

TEST(ConfigQueues, QueueListsAreCompact) {
  EXPECT_EQ(queue_list(0), "");
  EXPECT_EQ(queue_list(0b1), "0");
  EXPECT_EQ(queue_list(0b1111), "0-3");
  EXPECT_EQ(queue_list(0b11010011), "0-1, 4, 6-7");
  EXPECT_EQ(queue_list(~uint64_t{0}), "0-63");
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

// The route stage's RFC 1812 checks are on unless the file switches one off.
TEST(ConfigLoad, RouteChecksAreOnUnlessSwitchedOff) {
  const auto checks = [](const std::string& route) {
    auto cfg = load_config_text(
        "ports: [{name: a, type: afxdp, interface: eth0}]\npipeline:\n  - " + route + "\n",
        "t.yaml");
    EXPECT_TRUE(cfg) << errors_text(cfg.error());
    return cfg ? cfg->pipeline[0].params.get<RouteConfig>().checks : RouteChecks{};
  };
  auto c = checks("{stage: route}");
  EXPECT_TRUE(c.ipv4_checksum && c.martians);
  c = checks("{stage: route, checks: {martians: false}}");
  EXPECT_TRUE(c.ipv4_checksum);
  EXPECT_FALSE(c.martians);
  c = checks("{stage: route, checks: {ipv4_checksum: false, martians: true}}");
  EXPECT_FALSE(c.ipv4_checksum);
  EXPECT_TRUE(c.martians);

  auto typo = load_config_text(
      "ports: [{name: a, type: afxdp, interface: eth0}]\n"
      "pipeline: [{stage: route, checks: {martian: false}}]\n",
      "t.yaml");
  ASSERT_FALSE(typo);
  EXPECT_EQ(typo.error()[0].to_string(),
            "t.yaml:2:36: pipeline[0].checks.martian: unknown key 'martian' (did you mean "
            "'martians'?)");
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
  const auto& route = cfg->pipeline[0].params.get<RouteConfig>();
  EXPECT_EQ(route.routes[0].nexthops.size(), 2u);
  EXPECT_EQ(cfg->pipeline[1].name, "count");
  EXPECT_TRUE(cfg->pipeline[1].fuse);
  EXPECT_EQ(cfg->pipeline[2].name, "count-2");
  EXPECT_EQ(cfg->pipeline[2].sched, SchedType::Parallel);
}

}  // namespace

// An afxdp MTU above one buffer needs AF_XDP multi-buffer: the loader asks the running kernel's
// release, read as uname gives it.
TEST(ConfigLoad, MultiBufferAfXdpNeedsLinux66) {
  EXPECT_FALSE(kernel_has_xsk_multi_buffer("6.1.0-18-amd64"));  // Debian 12's own
  EXPECT_FALSE(kernel_has_xsk_multi_buffer("5.19.0"));
  EXPECT_TRUE(kernel_has_xsk_multi_buffer("6.6.0"));
  EXPECT_TRUE(kernel_has_xsk_multi_buffer("6.12.12+bpo-amd64"));  // bookworm-backports
  EXPECT_TRUE(kernel_has_xsk_multi_buffer("7.0"));
  EXPECT_FALSE(kernel_has_xsk_multi_buffer(""));
  EXPECT_FALSE(kernel_has_xsk_multi_buffer("six"));
  EXPECT_EQ(afxdp_max_mtu(2048, false, false), 1578u);
  EXPECT_EQ(afxdp_max_mtu(2048), 25578u);
}

// The icmp section: Linux's defaults, or the file's, within their ranges.
TEST(ConfigLoad, IcmpLimits) {
  const std::string base = "ports:\n  - {name: wan, type: dpdk, devargs: net_null0}\n";
  auto cfg = load_config_text(base, "icmp.yaml");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->icmp.ratelimit_ms, 1000u);
  EXPECT_EQ(cfg->icmp.burst, 6u);
  EXPECT_EQ(cfg->icmp.per_second, 1000u);
  cfg = load_config_text(base + "icmp: {ratelimit_ms: 0, burst: 2, per_second: 50}\n", "icmp.yaml");
  ASSERT_TRUE(cfg);
  EXPECT_EQ(cfg->icmp.ratelimit_ms, 0u);
  EXPECT_EQ(cfg->icmp.burst, 2u);
  EXPECT_EQ(cfg->icmp.per_second, 50u);
  cfg = load_config_text(base + "icmp: {burst: 0, rate: 5}\n", "icmp.yaml");
  ASSERT_FALSE(cfg);
  ASSERT_EQ(cfg.error().size(), 2u);
  EXPECT_NE(cfg.error()[0].to_string().find("icmp.yaml:3:15: icmp.burst"), std::string::npos)
      << cfg.error()[0].to_string();
  EXPECT_NE(cfg.error()[1].to_string().find("icmp.rate"), std::string::npos)
      << cfg.error()[1].to_string();
}
