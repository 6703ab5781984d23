// A control server on a socket in a fresh temporary directory, with its registry, for the
// control-plane tests that run commands through it (capture, reload, trace). Derived fixtures
// register their parts in SetUp() after calling ServerFixture::SetUp(), and drop what holds the
// server before ServerFixture::TearDown() runs.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "api/registry.h"
#include "control/server.h"

namespace vecflow::control::test {

class ServerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/vct-ctl-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    ServerOptions o;
    o.socket_path = dir_ + "/c.sock";
    o.group = "";
    auto s = ControlServer::create(o, registry_);
    ASSERT_TRUE(s) << s.error().message;
    server_ = *s;
  }
  void TearDown() override {
    server_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // Runs a command as a peer that may change state; the whole reply.
  Json call(const std::string& command, Json args = Json::object()) {
    Request r;
    r.command = command;
    r.args = std::move(args);
    Peer root;
    root.may_change = true;
    return registry_.dispatch(r, root, server_->rates());
  }
  // Serves the control thread's timers for `d`.
  void pump(std::chrono::milliseconds d) {
    auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
      server_->poll();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  std::string dir_;
  Registry registry_;
  std::shared_ptr<ControlServer> server_;
};

}  // namespace vecflow::control::test
