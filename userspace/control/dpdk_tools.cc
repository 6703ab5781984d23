#include "control/dpdk_tools.h"

#include <algorithm>
#include <future>
#include <mutex>
#include <set>

#include <rte_errno.h>
#include <rte_pdump.h>
#include <rte_telemetry.h>

#include "core/log.h"

namespace vecflow::control {
namespace {

constexpr std::string_view kPrefix = "/vecflow/";

// The bridge DPDK's callbacks reach: a plain function pointer cannot carry a context in 22.11.
struct BridgeTarget {
  std::mutex mutex;
  ControlServer* server = nullptr;
  Registry* registry = nullptr;
};
BridgeTarget g_target;

std::string key_text(std::string_view key) {
  std::string out;
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '/' || c == '-';
    out += ok ? c : '_';
  }
  return out.substr(0, RTE_TEL_MAX_STRING_LEN - 1);
}

std::string scalar_text(const Json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return fmt::format("{:.3f}", v.get<double>());
  return v.dump();
}

// The member of array items that names them better than a position.
std::string item_name(const Json& item, size_t index) {
  if (item.is_object()) {
    for (const char* k : {"name", "reason", "port", "service", "lcore", "command"}) {
      auto it = item.find(k);
      if (it != item.end() && (it->is_string() || it->is_number_integer())) {
        std::string name = it->is_string() ? it->get<std::string>() : it->dump();
        // Rows keyed by two members (services: lcore + service) stay unique.
        if (std::string_view(k) == "service" && item.contains("lcore"))
          name = item["lcore"].dump() + "_" + name;
        return name;
      }
    }
  }
  return std::to_string(index);
}

void add_scalar(rte_tel_data* d, const std::string& key, const Json& v) {
  std::string k = key_text(key);
  if (v.is_number_unsigned()) {
    rte_tel_data_add_dict_u64(d, k.c_str(), v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    int64_t n = v.get<int64_t>();
    if (n >= INT32_MIN && n <= INT32_MAX) {
      rte_tel_data_add_dict_int(d, k.c_str(), static_cast<int>(n));
    } else {
      rte_tel_data_add_dict_string(d, k.c_str(), v.dump().c_str());
    }
  } else if (v.is_boolean()) {
    rte_tel_data_add_dict_int(d, k.c_str(), v.get<bool>() ? 1 : 0);
  } else if (v.is_null()) {
    rte_tel_data_add_dict_string(d, k.c_str(), "");
  } else {
    std::string s = scalar_text(v).substr(0, RTE_TEL_MAX_STRING_LEN - 1);
    rte_tel_data_add_dict_string(d, k.c_str(), s.c_str());
  }
}

// Flattens `v` into the dict `d`, at most RTE_TEL_MAX_DICT_ENTRIES entries.
void flatten(rte_tel_data* d, const std::string& prefix, const Json& v, size_t& entries) {
  auto join = [&prefix](const std::string& k) { return prefix.empty() ? k : prefix + "_" + k; };
  if (entries >= RTE_TEL_MAX_DICT_ENTRIES - 1) return;
  if (v.is_object()) {
    for (const auto& [k, item] : v.items())
      flatten(d, join(k), item, entries);
  } else if (v.is_array()) {
    bool scalars = std::all_of(v.begin(), v.end(), [](const Json& x) { return x.is_primitive(); });
    if (scalars) {
      rte_tel_data* arr = rte_tel_data_alloc();
      if (!arr) return;
      rte_tel_data_start_array(arr, RTE_TEL_STRING_VAL);
      for (const auto& x : v) {
        std::string s = scalar_text(x).substr(0, RTE_TEL_MAX_STRING_LEN - 1);
        rte_tel_data_add_array_string(arr, s.c_str());
      }
      std::string k = key_text(prefix);
      rte_tel_data_add_dict_container(d, k.c_str(), arr, 0);
      ++entries;
      return;
    }
    for (size_t i = 0; i < v.size(); ++i)
      flatten(d, join(item_name(v[i], i)), v[i], entries);
  } else {
    add_scalar(d, prefix, v);
    ++entries;
  }
}

// Runs a read-only command on the control thread and waits for its reply.
std::optional<Json> ask(const std::string& command, Json args) {
  auto promise = std::make_shared<std::promise<Json>>();
  auto answer = promise->get_future();
  {
    std::lock_guard lock(g_target.mutex);
    if (!g_target.server) return std::nullopt;
    Registry* registry = g_target.registry;
    ControlServer* server = g_target.server;
    server->post([promise, registry, server, command, args = std::move(args)]() {
      Request r;
      r.command = command;
      r.args = args;
      Peer telemetry;  // DPDK's telemetry socket is root's; it only reaches read commands
      promise->set_value(registry->dispatch(r, telemetry, server->rates()));
    });
  }
  if (answer.wait_for(TelemetryBridge::kTelemetryTimeout) != std::future_status::ready)
    return std::nullopt;
  try {
    return answer.get();
  } catch (const std::future_error&) {
    return std::nullopt;  // the control server stopped before answering
  }
}

int telemetry_command(const char* cmd, const char* params, rte_tel_data* d) {
  std::string_view name(cmd);
  if (!name.starts_with(kPrefix)) return -EINVAL;
  name.remove_prefix(kPrefix.size());
  Json args = Json::object();
  if (name == "metrics" && params && *params) args["family"] = params;
  auto reply = ask(std::string(name), std::move(args));
  if (!reply) return -EAGAIN;
  rte_tel_data_start_dict(d);
  size_t entries = 0;
  if (!(*reply)["ok"].get<bool>()) {
    add_scalar(d, "error", (*reply)["error"]["message"]);
    return 0;
  }
  const Json& result = (*reply)["result"];
  if (name == "metrics") {
    // One entry per series: "family{label=value,...}" would exceed the key length; the
    // family is the parameter, so the key is the label values.
    for (const auto& s : result["samples"]) {
      if (entries >= RTE_TEL_MAX_DICT_ENTRIES - 1) break;
      std::string key = s["name"].get<std::string>();
      if (!s["labels"].get<std::string>().empty()) key += "/" + s["labels"].get<std::string>();
      add_scalar(d, key, s["value"]);
      ++entries;
    }
    return 0;
  }
  if (name == "errors") {
    for (const auto& r : result["reasons"])
      add_scalar(d, r["reason"].get<std::string>(), r["count"]);
    add_scalar(d, "total", result["total"]);
    return 0;
  }
  flatten(d, "", result, entries);
  if (entries >= RTE_TEL_MAX_DICT_ENTRIES - 1)
    rte_tel_data_add_dict_string(d, "truncated", "use vecflowctl for the whole result");
  return 0;
}

}  // namespace

Result<std::unique_ptr<TelemetryBridge>> TelemetryBridge::create(ControlServer& server,
                                                                 Registry& registry) {
  {
    std::lock_guard lock(g_target.mutex);
    if (g_target.server) return fail("a telemetry bridge already exists in this process");
    g_target.server = &server;
    g_target.registry = &registry;
  }
  // Registration outlives the bridge (DPDK has no unregister); register each name once.
  static std::set<std::string> registered;
  for (const Command* c : registry.commands()) {
    const CommandSpec& spec = *c->spec;
    if (spec.access != Access::Read) continue;
    std::string name = std::string(kPrefix) + std::string(spec.name);
    if (registered.contains(name)) continue;
    std::string help = fmt::format("vecflow: {}{}", spec.summary,
                                   spec.name == "metrics" ? ". Parameter: family name prefix" : "");
    // DPDK refuses (EINVAL) a help text of RTE_TEL_MAX_STRING_LEN bytes or more.
    if (help.size() >= RTE_TEL_MAX_STRING_LEN)
      help = help.substr(0, RTE_TEL_MAX_STRING_LEN - 4) + "...";
    int rc = rte_telemetry_register_cmd(name.c_str(), telemetry_command, help.c_str());
    if (rc < 0) {
      // EINVAL also when telemetry is off (--no-telemetry): not worth failing start-up.
      log::get("control")->info("DPDK telemetry: {} not registered: {}", name, rte_strerror(-rc));
      continue;
    }
    registered.insert(name);
  }
  return std::unique_ptr<TelemetryBridge>(new TelemetryBridge());
}

TelemetryBridge::~TelemetryBridge() {
  std::lock_guard lock(g_target.mutex);
  g_target.server = nullptr;
  g_target.registry = nullptr;
}

PdumpGuard::PdumpGuard(bool secondaries_can_attach) {
  if (rte_pdump_init() != 0) {
    state_ = {false,
              fmt::format("rte_pdump_init: {}; use vecflowctl capture", rte_strerror(rte_errno))};
    return;
  }
  initialised_ = true;
  if (secondaries_can_attach) {
    state_ = {true, "dpdk-dumpcap --file-prefix <dpdk.file_prefix> can capture DPDK ports"};
  } else {
    state_ = {false,
              "dpdk-dumpcap cannot attach: EAL runs --in-memory or --no-huge; set "
              "dpdk.multiprocess: true (needs hugepages), or use vecflowctl capture"};
  }
}

PdumpGuard::~PdumpGuard() {
  if (initialised_) rte_pdump_uninit();
}

}  // namespace vecflow::control
