// Fuzzes the appliance-file loader (config/loader.cc: yaml-cpp, the section readers and the
// cross-checks), the code that reads what an operator or a reload request hands vecflowd.
// Whatever the bytes, load_config_text() must return: either a configuration, or errors that
// each say where in the file (line and column) and what is wrong. An exception escaping it or
// a crash is a finding.
#include <cstdint>
#include <string>
#include <string_view>

#include "config/config.h"
#include "fuzz_check.h"
#include "pipeline/stage_registry.h"

using namespace vecflow;

namespace {
constexpr const char* kSource = "fuzz.yaml";
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cfg = config::load_config_text(text, kSource, builtin_stage_types());
  if (!cfg) {
    FUZZ_CHECK(!cfg.error().empty());
    for (const auto& e : cfg.error()) {
      FUZZ_CHECK(e.where.file == kSource);
      FUZZ_CHECK(e.where.line >= 1 && e.where.column >= 1);
      FUZZ_CHECK(!e.message.empty());
      FUZZ_CHECK(!e.to_string().empty());
    }
    return 0;
  }
  // A configuration the loader accepts is one vecflowd can wire: ports exist, and every name a
  // section refers to resolves.
  FUZZ_CHECK(cfg->source == kSource);
  FUZZ_CHECK(cfg->hash.size() == 16);
  FUZZ_CHECK(!cfg->ports.empty());
  for (const auto& p : cfg->ports)
    FUZZ_CHECK(cfg->find_port(p.name) == &p);
  FUZZ_CHECK(!cfg->cpu.workers.empty() && !cfg->scheduler.workers.empty());
  return 0;
}
