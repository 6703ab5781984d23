// Reload: a good file applies what the running parts can apply, a bad file changes nothing,
// sections no part applies wait for a restart, and --confirm-within reverts unless confirmed.
// The test thread plays the control thread: it drives the server with poll().
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "control/reload.h"
#include "pipeline/stage_registry.h"
#include "server_fixture.h"

namespace vecflow::control {
namespace {

using namespace std::chrono_literals;

constexpr const char* kBase = R"(appliance: {name: before}
logging: {level: info}
dpdk: {memory_mb: 256}
ports:
  - {name: wan, type: afxdp, interface: veth-r0}
)";

class ReloadTest : public test::ServerFixture {
 protected:
  void SetUp() override {
    ServerFixture::SetUp();
    auto cfg = config::load_config(write("base.yaml", kBase), builtin_stage_types());
    ASSERT_TRUE(cfg);
    running_ = *cfg;
    reloader_ = std::make_unique<Reloader>(running_, *server_);
    // A part that applies `appliance` and `logging` live, remembering what it was given.
    reloader_->add_section("appliance", {nullptr, [this](const config::ApplianceConfig& next) {
                                           part_name_ = next.appliance.name;
                                           return Result<void>{};
                                         }});
    reloader_->add_section("logging", {nullptr, [this](const config::ApplianceConfig& next) {
                                         if (fail_logging_) return Result<void>(fail("refused"));
                                         part_level_ = next.logging.level;
                                         return Result<void>{};
                                       }});
    reloader_->register_commands(registry_);
  }
  void TearDown() override {
    reloader_.reset();
    ServerFixture::TearDown();
  }

  std::string write(const std::string& name, const std::string& text) {
    std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string variant(const std::string& from, const std::string& to) {
    std::string t = kBase;
    t.replace(t.find(from), from.size(), to);
    return t;
  }
  config::ApplianceConfig running_;
  std::unique_ptr<Reloader> reloader_;
  std::string part_name_ = "before";
  config::LogLevel part_level_ = config::LogLevel::Info;
  bool fail_logging_ = false;
};

TEST_F(ReloadTest, GoodFileIsAppliedAndReported) {
  std::string path = write("next.yaml", variant("name: before}\nlogging: {level: info}",
                                                "name: after}\nlogging: {level: debug}"));
  auto r = reloader_->reload(path, 0);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_EQ((*r)["applied"], Json::array({"appliance", "logging"}));
  EXPECT_TRUE((*r)["restart_required"].empty());
  EXPECT_EQ((*r)["changes"].size(), 2u);
  EXPECT_EQ(running_.appliance.name, "after");
  EXPECT_EQ(running_.source, path);
  EXPECT_EQ(part_name_, "after");
  EXPECT_EQ(part_level_, config::LogLevel::Debug);
}

TEST_F(ReloadTest, SectionsNoPartAppliesWaitForARestart) {
  std::string path =
      write("next.yaml", variant("name: before}\nlogging: {level: info}\ndpdk: {memory_mb: 256}",
                                 "name: after}\nlogging: {level: info}\ndpdk: {memory_mb: 512}"));
  auto r = reloader_->reload(path, 0);
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["applied"], Json::array({"appliance"}));
  ASSERT_EQ((*r)["restart_required"].size(), 1u);
  EXPECT_EQ((*r)["restart_required"][0]["section"], "dpdk");
  EXPECT_EQ(running_.dpdk.memory_mb, 256u);  // still what runs, not half-applied
  EXPECT_EQ(running_.appliance.name, "after");
  Json status = call("status");
  // `status` is not registered in this test; the reload state is a section of it.
  EXPECT_EQ(status["error"]["code"], "unknown_command");
}

TEST_F(ReloadTest, FileWithErrorsIsRefusedWithLocationsAndNothingChanges) {
  Json before = config_to_json(running_);
  std::string old_hash = running_.hash;
  std::string path = write("bad.yaml", variant("memory_mb: 256", "memory_mb: lots"));
  auto r = reloader_->reload(path, 0);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::InvalidConfig);
  const Json& e = r.error().details["errors"][0];
  EXPECT_EQ(e["file"], path);
  EXPECT_EQ(e["line"], 3);
  EXPECT_EQ(e["path"], "dpdk.memory_mb");
  EXPECT_EQ(config_to_json(running_), before);
  EXPECT_EQ(running_.hash, old_hash);
  EXPECT_EQ(part_name_, "before");
}

TEST_F(ReloadTest, FailingSectionPutsBackTheOnesAppliedBeforeIt) {
  fail_logging_ = true;
  Json before = config_to_json(running_);
  std::string path = write("next.yaml", variant("name: before}\nlogging: {level: info}",
                                                "name: after}\nlogging: {level: debug}"));
  auto r = reloader_->reload(path, 0);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("applying 'logging' failed"), std::string::npos);
  EXPECT_EQ(part_name_, "before");  // re-applied from the running configuration
  EXPECT_EQ(config_to_json(running_), before);
}

TEST_F(ReloadTest, UnconfirmedReloadIsReverted) {
  std::string old_source = running_.source;
  std::string path = write("next.yaml", variant("name: before}", "name: after}"));
  auto r = reloader_->reload(path, 1);
  ASSERT_TRUE(r);
  EXPECT_EQ((*r)["confirm_within_s"], 1);
  EXPECT_EQ(part_name_, "after");
  // A second reload must wait for the first to be confirmed or rolled back.
  auto again = reloader_->reload(path, 0);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find("awaits confirmation"), std::string::npos);
  pump(1500ms);
  EXPECT_EQ(running_.appliance.name, "before");
  EXPECT_EQ(running_.source, old_source);
  EXPECT_EQ(part_name_, "before");
}

TEST_F(ReloadTest, ConfirmedReloadStays) {
  std::string path = write("next.yaml", variant("name: before}", "name: after}"));
  ASSERT_TRUE(reloader_->reload(path, 1));
  Json c = call("confirm");
  EXPECT_TRUE(c["ok"].get<bool>()) << c.dump();
  pump(1500ms);
  EXPECT_EQ(running_.appliance.name, "after");
  EXPECT_EQ(call("confirm")["error"]["message"], "no reload awaits confirmation");
}

TEST_F(ReloadTest, RollbackRevertsAtOnce) {
  std::string path = write("next.yaml", variant("name: before}", "name: after}"));
  ASSERT_TRUE(reloader_->reload(path, 60));
  Json r = call("rollback");
  EXPECT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_EQ(running_.appliance.name, "before");
  EXPECT_EQ(part_name_, "before");
}

TEST_F(ReloadTest, CommandChecksItsArguments) {
  EXPECT_EQ(call("reload", {{"file", "relative.yaml"}})["error"]["code"], "bad_arguments");
  EXPECT_EQ(call("reload", {{"confirm_within", 999999}})["error"]["code"], "bad_arguments");
  EXPECT_EQ(call("reload", {{"fiel", "/x"}})["error"]["code"], "bad_arguments");
  // No file: the running one, unchanged.
  Json r = call("reload");
  ASSERT_TRUE(r["ok"].get<bool>()) << r.dump();
  EXPECT_TRUE(r["result"]["changes"].empty());
}

TEST_F(ReloadTest, ConfigCommandShowsTheRunningConfiguration) {
  Json r = call("config", {{"section", "appliance"}});
  EXPECT_EQ(r["result"]["appliance"]["name"], "before");
  EXPECT_EQ(call("config", {{"section", "nope"}})["error"]["code"], "bad_arguments");
}

TEST_F(ReloadTest, ReloadNeedsChangeAccess) {
  Request r;
  r.command = "reload";
  Peer nobody;
  EXPECT_EQ(registry_.dispatch(r, nobody, server_->rates())["error"]["code"], "permission_denied");
}

}  // namespace
}  // namespace vecflow::control
