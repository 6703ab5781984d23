#include "pipeline/count/count_commands.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "api/values.h"
#include "pipeline/count/count_stage.h"

namespace vecflow::control {
namespace {

constexpr uint64_t kDefaultTopFlows = 20;

IpAddress flow_address(const uint32_t (&words)[4], uint8_t version) {
  IpAddress a;
  a.version = version;
  std::memcpy(a.bytes.data(), words, version == 4 ? 4 : 16);
  return a;
}

}  // namespace

void add_count_commands(Registry& registry, Pipeline& pipeline) {
  (void)registry.add_command(Command{
      &kFlowsSpec,
      [&pipeline](const CommandContext& ctx) -> CommandResult {
        ArgReader a(ctx);
        const uint64_t top = a.uint("top", kDefaultTopFlows);
        const std::string by = a.string("by", "packets");
        auto only = a.string("stage");
        std::vector<CountStage*> counting;
        for (CountStage* st : pipeline.all<CountStage>()) {
          if (st->by() == CountBy::Flow) counting.push_back(st);
        }
        if (counting.empty()) {
          return command_error(ErrorCode::Failed,
                               "no stage of this pipeline counts flows: add `- {{stage: count, "
                               "by: flow}}` to the pipeline section of the appliance file and "
                               "restart vecflowd (stages are built at start)");
        }
        if (only && std::none_of(counting.begin(), counting.end(),
                                 [&only](CountStage* st) { return st->name() == *only; })) {
          std::string names;
          for (CountStage* st : counting)
            names += fmt::format("{}{}", names.empty() ? "" : ", ", st->name());
          return command_error(ErrorCode::BadArguments,
                               "no count stage '{}' counts flows; stages that do: {}", *only,
                               names);
        }
        const FlowOrder order = by == "bytes" ? FlowOrder::Bytes : FlowOrder::Packets;
        Json stages = Json::array();
        Json flows = Json::array();
        for (CountStage* st : counting) {
          if (only && st->name() != *only) continue;
          stages.push_back(
              {{"stage", st->name()}, {"tracked", st->tracked()}, {"untracked", st->untracked()}});
          size_t rank = 0;
          for (const FlowCount& f : st->top_flows(top, order)) {
            const FlowKey& k = f.key;
            flows.push_back({{"stage", st->name()},
                             {"rank", ++rank},
                             {"proto", proto_name(k.l4_proto)},
                             {"src", flow_address(k.src, k.ip_version).to_string()},
                             {"src_port", ntohs(k.src_port)},
                             {"dst", flow_address(k.dst, k.ip_version).to_string()},
                             {"dst_port", ntohs(k.dst_port)},
                             {"packets", f.packets},
                             {"bytes", f.bytes}});
          }
        }
        return Json{{"by", by}, {"stages", std::move(stages)}, {"flows", std::move(flows)}};
      },
      View{{table("count stages", "/stages",
                  {{"STAGE", "stage"},
                   {"FLOWS TRACKED", "tracked", Unit::Count},
                   {"UNTRACKED PACKETS", "untracked", Unit::Count}}),
            table("flows", "/flows",
                  {{"#", "rank"},
                   {"PROTO", "proto"},
                   {"SOURCE", "src"},
                   {"SPORT", "src_port"},
                   {"DESTINATION", "dst"},
                   {"DPORT", "dst_port"},
                   {"PACKETS", "packets", Unit::Count},
                   {"BYTES", "bytes", Unit::Bytes},
                   {"STAGE", "stage"}})}}});
}

}  // namespace vecflow::control
