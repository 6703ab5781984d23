// The ports section's reload (control/parts/ports_reload_part.h): which changes apply live,
// and the order in which a reload adds, publishes, detaches and retires VLAN ports, also
// when a later section fails and the reload is undone.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "control/parts/ports_reload_part.h"
#include "control/reload.h"
#include "pipeline/stage_registry.h"
#include "server_fixture.h"

namespace vecflow::control {
namespace {

// A trunk with VLAN 100 and the `extra` ports given, and a route through VLAN 100 and each
// port of `routed`.
std::string appliance(const std::string& extra = "", const std::vector<std::string>& routed = {}) {
  std::string routes = "      - {prefix: 10.1.0.0/24, port: office}\n";
  for (size_t i = 0; i < routed.size(); ++i)
    routes += fmt::format("      - {{prefix: 10.{}.0.0/24, port: {}}}\n", i + 2, routed[i]);
  return "appliance: {name: t}\n"
         "ports:\n"
         "  - {name: wan, type: afxdp, interface: wan0}\n"
         "  - {name: office, type: vlan, parent: wan, vlan: 100}\n" +
         extra +
         "pipeline:\n"
         "  - stage: route\n"
         "    routes:\n" +
         routes;
}

config::ApplianceConfig load(const std::string& text) {
  auto cfg = config::load_config_text(text, "test.yaml", builtin_stage_types());
  EXPECT_TRUE(cfg) << (cfg ? "" : cfg.error().front().to_string());
  return cfg ? *cfg : config::ApplianceConfig{};
}

TEST(PortsReload, VlanPortsAddedOrRemovedApplyLiveAnythingElseNeedsARestart) {
  const auto running = load(appliance("  - {name: spare, type: vlan, parent: wan, vlan: 400}\n"));
  // QinQ: a service VLAN and a customer in it, added together; spare removed.
  const auto next =
      load(appliance("  - {name: c10, type: vlan, parent: svc, vlan: 10}\n"
                     "  - {name: svc, type: vlan, parent: wan, vlan: 300, proto: 802.1ad}\n"));
  EXPECT_EQ(ports_restart_reasons(running, next), std::vector<std::string>{});
  EXPECT_EQ(ports_changes(running, next),
            (std::vector<std::string>{"port c10: added, VLAN 10 of svc",
                                      "port svc: added, VLAN 300 of wan", "port spare: removed"}));
  EXPECT_EQ(ports_after_reload(running, next),
            (std::vector<std::string>{"wan", "office", "c10", "svc"}));

  // A VLAN port moved to another VLAN id is replaced live; a link added is not.
  const auto moved = load(appliance("  - {name: spare, type: vlan, parent: wan, vlan: 401}\n"));
  EXPECT_EQ(ports_restart_reasons(running, moved), std::vector<std::string>{});
  EXPECT_EQ(
      ports_changes(running, moved),
      std::vector<std::string>{"port spare: replaced, VLAN 401 of wan (was VLAN 400 of wan)"});
  const auto changed =
      load(appliance("  - {name: spare, type: vlan, parent: wan, vlan: 401}\n"
                     "  - {name: lan, type: afxdp, interface: lan0}\n"));
  ASSERT_EQ(changed.ports.size(), 4u);
  const auto why = ports_restart_reasons(running, changed);
  ASSERT_EQ(why.size(), 1u) << fmt::format("{}", fmt::join(why, "\n"));
  EXPECT_TRUE(why[0].starts_with("port lan (afxdp) added: links are opened at start")) << why[0];
  // The other sections' checks see the ports that run now.
  EXPECT_EQ(ports_after_reload(running, changed),
            (std::vector<std::string>{"wan", "office", "spare"}));
  const auto without_link = load(
      "appliance: {name: t}\nports:\n  - {name: office2, type: afxdp, interface: x0}\n"
      "pipeline:\n  - stage: route\n");
  EXPECT_EQ(ports_restart_reasons(running, without_link).size(), 2u)
      << "wan removed and office2 added (its VLAN ports could go live, but not without it)";
  // A service VLAN with a customer in it: its customers would lose their parent.
  const auto qinq =
      load(appliance("  - {name: svc, type: vlan, parent: wan, vlan: 300, proto: 802.1ad}\n"
                     "  - {name: c10, type: vlan, parent: svc, vlan: 10}\n"));
  const auto qinq_moved =
      load(appliance("  - {name: svc, type: vlan, parent: wan, vlan: 301, proto: 802.1ad}\n"
                     "  - {name: c10, type: vlan, parent: svc, vlan: 11}\n"));
  const auto moved_why = ports_restart_reasons(qinq, qinq_moved);
  ASSERT_EQ(moved_why.size(), 1u) << fmt::format("{}", fmt::join(moved_why, "\n"));
  EXPECT_TRUE(moved_why[0].starts_with("port svc: vlan, interface changed: VLAN ports sit on it"))
      << moved_why[0];
}

// What the data path is asked to do, in order.
struct Calls {
  std::vector<std::string> log;
  bool fail_add = false;
  std::optional<uint16_t> refused_vlan;  // an add of a VLAN port with this id fails
  std::vector<uint16_t> added_vlans;     // the VLAN ids of the VLAN ports added, in order
  PortEditor editor() {
    return {[this](const config::ApplianceConfig&, const config::PortConfig& p) -> Result<void> {
              if (fail_add && p.name == "c10") return fail("no room");
              const auto* v = std::get_if<config::VlanPort>(&p.kind);
              if (v != nullptr && refused_vlan == v->vlan) return fail("no room");
              log.push_back("add " + p.name);
              if (v != nullptr) added_vlans.push_back(v->vlan);
              return {};
            },
            [this](std::string_view n) { log.push_back("publish " + std::string(n)); },
            [this](std::string_view n) { log.push_back("detach " + std::string(n)); },
            [this](std::string_view n) { log.push_back("reattach " + std::string(n)); },
            [this](std::string_view n) { log.push_back("retire " + std::string(n)); }};
  }
};

class PortsReloadOrder : public test::ServerFixture {
 protected:
  // A later section that records when it applies, and fails while `fails` says so (read at
  // each reload).
  static void add_pipeline(Reloader& reloader, Calls& calls, const bool& fails) {
    reloader.add_section("pipeline", {nullptr, [&calls, &fails](const config::ApplianceConfig&) {
                                        calls.log.push_back("pipeline");
                                        return fails ? Result<void>(fail("refused"))
                                                     : Result<void>{};
                                      }});
  }
  std::string write_file(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
};

TEST_F(PortsReloadOrder, AddsParentsFirstPublishesAndRetiresAfterTheOtherSections) {
  auto running = load(appliance("  - {name: spare, type: vlan, parent: wan, vlan: 400}\n"));
  Calls calls;
  Reloader reloader(running, *server_);
  register_ports_reload(reloader, calls.editor(), running);
  const bool pipeline_fails = false;
  add_pipeline(reloader, calls, pipeline_fails);
  const std::string next = write_file(
      "next.yaml", appliance("  - {name: c10, type: vlan, parent: svc, vlan: 10}\n"
                             "  - {name: svc, type: vlan, parent: wan, vlan: 300, proto: "
                             "802.1ad}\n",
                             {"c10"}));
  auto r = reloader.reload(next, 0);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(calls.log, (std::vector<std::string>{"add svc", "add c10", "detach spare", "pipeline",
                                                 "publish svc", "publish c10", "retire spare"}));
  EXPECT_NE(running.find_port("c10"), nullptr);
  EXPECT_EQ(running.find_port("spare"), nullptr);
}

TEST_F(PortsReloadOrder, AFailedReloadPutsThePortsBackAsTheyWere) {
  auto running = load(appliance("  - {name: spare, type: vlan, parent: wan, vlan: 400}\n"));
  Calls calls;
  Reloader reloader(running, *server_);
  register_ports_reload(reloader, calls.editor(), running);
  bool pipeline_fails = true;
  add_pipeline(reloader, calls, pipeline_fails);
  const std::string next = write_file(
      "next.yaml", appliance("  - {name: dev, type: vlan, parent: wan, vlan: 300}\n", {"dev"}));
  EXPECT_FALSE(reloader.reload(next, 0));
  // dev went before any frame could reach it; spare claims its tags again.
  EXPECT_EQ(calls.log, (std::vector<std::string>{"add dev", "detach spare", "pipeline",
                                                 "retire dev", "reattach spare"}));
  EXPECT_NE(running.find_port("spare"), nullptr);
  // An add the data path refuses: the ports added before it in the same reload go again.
  calls.log.clear();
  calls.fail_add = true;
  pipeline_fails = false;
  const std::string qinq = write_file(
      "qinq.yaml", appliance("  - {name: spare, type: vlan, parent: wan, vlan: 400}\n"
                             "  - {name: svc, type: vlan, parent: wan, vlan: 300, proto: 802.1ad}\n"
                             "  - {name: c10, type: vlan, parent: svc, vlan: 10}\n",
                             {"c10"}));
  auto r = reloader.reload(qinq, 0);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("port 'c10': no room"), std::string::npos) << r.error().message;
  EXPECT_EQ(calls.log, (std::vector<std::string>{"add svc", "retire svc"}));
}

// A VLAN port moved to another VLAN id is replaced under its name: released and retired at
// once, made again as declared, its new tags claimed after the other sections. If a later
// section fails, or the data path refuses the new one, it is made again as it ran.
TEST_F(PortsReloadOrder, AChangedVlanPortIsReplacedAndPutBackIfTheReloadFails) {
  auto running = load(appliance("  - {name: spare, type: vlan, parent: wan, vlan: 400}\n"));
  Calls calls;
  Reloader reloader(running, *server_);
  register_ports_reload(reloader, calls.editor(), running);
  bool pipeline_fails = true;
  add_pipeline(reloader, calls, pipeline_fails);
  const std::string moved =
      write_file("moved.yaml",
                 appliance("  - {name: spare, type: vlan, parent: wan, vlan: 401}\n", {"spare"}));
  EXPECT_FALSE(reloader.reload(moved, 0));
  EXPECT_EQ(calls.log,
            (std::vector<std::string>{"detach spare", "retire spare", "add spare", "pipeline",
                                      "retire spare", "add spare", "publish spare"}));
  EXPECT_EQ(calls.added_vlans, (std::vector<uint16_t>{401, 400}));
  EXPECT_EQ(std::get<config::VlanPort>(running.find_port("spare")->kind).vlan, 400);

  // The data path refuses the new one: the old one comes back, and the reload says why.
  calls = Calls{};
  calls.refused_vlan = 401;
  pipeline_fails = false;
  auto refused = reloader.reload(moved, 0);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("port 'spare': no room"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(calls.log, (std::vector<std::string>{"detach spare", "retire spare", "retire spare",
                                                 "add spare", "publish spare"}));
  EXPECT_EQ(calls.added_vlans, (std::vector<uint16_t>{400}));

  calls = Calls{};
  auto r = reloader.reload(moved, 0);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ(calls.log, (std::vector<std::string>{"detach spare", "retire spare", "add spare",
                                                 "pipeline", "publish spare"}));
  EXPECT_EQ(std::get<config::VlanPort>(running.find_port("spare")->kind).vlan, 401);
}

}  // namespace
}  // namespace vecflow::control
