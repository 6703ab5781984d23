#include "control/command_specs.h"

namespace vecflow::control {

namespace {

// The highest lcore id an argument may name; vecflowd says which lcores exist when one does not.
constexpr double kMaxLcoreId = 1023;

const ArgSpec kLcoreArg{"lcore", ArgType::Uint, "Only this lcore", false, false, {}, {},
                        0,       kMaxLcoreId};
const ArgSpec kPortArg{"port", ArgType::String, "Only this port"};

const CommandGroupSpec kCaptureGroup{"capture", "Packet captures of a port to pcapng files"};
const CommandGroupSpec kTraceGroup{
    "trace", "Follow packets through every step of the data path: add, show, clear"};
const CommandGroupSpec kLogGroup{"log", "Log levels and the last lines logged; set a level", "log"};
const CommandCatalogue::Entry kGroups[] = {CommandCatalogue::Entry{kCaptureGroup},
                                           CommandCatalogue::Entry{kTraceGroup},
                                           CommandCatalogue::Entry{kLogGroup}};

}  // namespace

const CommandSpec kCommandsSpec{"commands", "The commands this vecflowd serves"};
const CommandSpec kMetricsSpec{
    "metrics",
    "Every counter, as one snapshot (the numbers /metrics serves)",
    Access::Read,
    {{"family", ArgType::String, "Only families whose name starts with this prefix"}}};
const CommandSpec kClearSpec{
    "clear",
    "Counters shown by commands restart from zero (/metrics stays monotonic)",
    Access::Change,
    {{"what",
      ArgType::String,
      "counters (all), errors (drops and parse errors) or runtime (lcore, service, stage and "
      "scheduler time and work)",
      false,
      true,
      {},
      {"counters", "errors", "runtime"}}}};
const CommandSpec kStatusSpec{"status",
                              "Is it up: version, uptime, configuration, lcores, ports, scheduler"};
const CommandSpec kLcoresSpec{
    "lcores", "Which core is busy: busy/idle/sleep time of every lcore and service"};
const CommandSpec kAccountingSpec{
    "accounting",
    "Where each port's packets went (rx = tx + kernel + dropped + held) and came from (XDP's "
    "verdicts, drops before user space)"};
const CommandSpec kErrorsSpec{"errors", "Where packets are dropped and why: every drop reason"};
const CommandSpec kLogSpec{"log",
                           "Each part's log level and the last lines logged",
                           Access::Read,
                           {{"lines",
                             ArgType::Uint,
                             "How many lines (default 20)",
                             false,
                             false,
                             "-n,--lines",
                             {},
                             0,
                             1000}},
                           {"log", "show"}};
const CommandSpec kLogLevelSpec{
    "log-level",
    "Set the log level of every part, or of one",
    Access::Change,
    {{"part", ArgType::String, "The part (steer, sched, pipeline ...); default: every part", false,
      true},
     {"level",
      ArgType::String,
      "The level",
      true,
      true,
      {},
      {"trace", "debug", "info", "warn", "error", "off"}}},
    {"log", "level"}};

// The longest confirmation window is a day: longer would be a configuration that reverts by
// surprise long after everyone forgot it.
const CommandSpec kReloadSpec{
    "reload",
    "Validate and apply an appliance file (default: the running one); refused with located "
    "errors if it has any",
    Access::Change,
    {{"file", ArgType::Path, "Appliance file", false, true},
     {"confirm_within",
      ArgType::Uint,
      "Revert unless `vecflowctl confirm` comes within SECONDS",
      false,
      false,
      "--confirm-within",
      {},
      0,
      86400}}};
const CommandSpec kConfirmSpec{"confirm", "Keep a reload made with --confirm-within",
                               Access::Change};
const CommandSpec kRollbackSpec{"rollback", "Revert a reload made with --confirm-within now",
                                Access::Change};
const CommandSpec kConfigSpec{
    "config",
    "The running configuration, every default filled in",
    Access::Read,
    {{"section", ArgType::String, "Only this section (ports, steering, ...)", false, true}}};

const CommandSpec kBuffersSpec{
    "buffers",
    "Buffer pools (in use, cached, free), buffers lent to the kernel per AF_XDP queue, EAL "
    "heaps and the process's memory"};

const CommandSpec kCaptureStartSpec{
    "capture-start",
    "Start a pcapng capture of a port (files under control.capture_dir)",
    Access::Change,
    {{"port", ArgType::String, "Port name", true, true},
     {"direction",
      ArgType::String,
      "rx, tx or both (default)",
      false,
      false,
      {},
      {"rx", "tx", "both"}},
     {"count", ArgType::Uint, "Stop after N packets", false, false, "-c,--count"},
     {"duration_s",
      ArgType::Number,
      "Stop after SECONDS",
      false,
      false,
      "-d,--duration",
      {},
      0,
      86400 * 7},
     {"filter", ArgType::String, "pcap filter expression (as tcpdump)", false, false,
      "-f,--filter"},
     {"snaplen",
      ArgType::Uint,
      "Bytes kept of each packet (default and most: 262144, as tcpdump)",
      false,
      false,
      {},
      {},
      64,
      262144},
     {"file", ArgType::String, "File name under control.capture_dir"}},
    {"capture", "start"}};
const CommandSpec kCaptureStopSpec{"capture-stop",
                                   "Stop a capture (all when no id)",
                                   Access::Change,
                                   {{"id", ArgType::Uint, "Capture id", false, true, {}, {}, 1}},
                                   {"capture", "stop"}};
const CommandSpec kCapturesSpec{
    "captures", "Captures running and done", Access::Read, {}, {"capture", "list"}};

const CommandSpec kTraceAddSpec{
    "trace-add",
    "Follow the next COUNT packets that match through every step of the data path",
    Access::Change,
    {{"count", ArgType::Uint, "Packets to follow", true, true, {}, {}, 1, 1000},
     {"port", ArgType::String, "Only packets received on this port", false, false, "-p,--port"},
     {"filter", ArgType::String, "pcap filter expression (as tcpdump)", false, false,
      "-f,--filter"}},
    {"trace", "add"}};
const CommandSpec kTraceClearSpec{
    "trace-clear", "Stop following and forget the steps", Access::Change, {}, {"trace", "clear"}};
const CommandSpec kTraceSpec{
    "trace", "The steps of the packets followed so far", Access::Read, {}, {"trace", "show"}};

const CommandSpec kFaultStallSpec{
    "fault-stall",
    "Fault injection: block one lcore's next round for `ms` milliseconds (needs "
    "control.fault_injection)",
    Access::Change,
    {{"lcore", ArgType::Uint, "The lcore to stall", true, false, {}, {}, 0, kMaxLcoreId},
     {"ms",
      ArgType::Uint,
      "How long, in milliseconds (default 2000)",
      false,
      false,
      {},
      {},
      1,
      60000}},
    {},
    true};

const CommandSpec kPipelineSpec{
    "pipeline",
    "Per stage: calls, packets, packets per call, cycles per packet (like VPP's show runtime); "
    "per lcore too when several run stages",
    Access::Read,
    {kLcoreArg}};
const CommandSpec kSchedSpec{
    "sched",
    "Scheduler: events per queue and worker, vectors formed and why they closed, busy/idle per "
    "worker, migrations, backpressure; or the direct path, when one worker runs the pipeline "
    "without it",
    Access::Read,
    {kLcoreArg}};
const CommandSpec kPortsSpec{
    "ports",
    "Per port and queue: rx/tx/kernel packets, bytes and rates, drops by reason, AF_XDP mode, "
    "link, MTU",
    Access::Read,
    {kPortArg}};
const CommandSpec kHardwareSpec{
    "hardware",
    "Per port, what the device is: driver, bus address, NUMA node, speed, MTU, queues, "
    "offloads, and the XDP program on a kernel interface",
    Access::Read,
    {kPortArg}};
const CommandSpec kSteeringSpec{
    "steering",
    "XDP steering: frames per port and verdict, hits per rule and action, parse errors"};
const CommandSpec kOffloadSpec{
    "offload",
    "Flow offload to XDP: whether it runs and why not, the flows the steering program forwards "
    "with their hits, and the flows refused with the reason"};

namespace {

const CommandCatalogue::Entry kEntries[] = {
    CommandCatalogue::Entry{kCommandsSpec},     CommandCatalogue::Entry{kMetricsSpec},
    CommandCatalogue::Entry{kClearSpec},        CommandCatalogue::Entry{kStatusSpec},
    CommandCatalogue::Entry{kLcoresSpec},       CommandCatalogue::Entry{kAccountingSpec},
    CommandCatalogue::Entry{kErrorsSpec},       CommandCatalogue::Entry{kLogSpec},
    CommandCatalogue::Entry{kLogLevelSpec},     CommandCatalogue::Entry{kReloadSpec},
    CommandCatalogue::Entry{kConfirmSpec},      CommandCatalogue::Entry{kRollbackSpec},
    CommandCatalogue::Entry{kConfigSpec},       CommandCatalogue::Entry{kBuffersSpec},
    CommandCatalogue::Entry{kCaptureStartSpec}, CommandCatalogue::Entry{kCaptureStopSpec},
    CommandCatalogue::Entry{kCapturesSpec},     CommandCatalogue::Entry{kTraceAddSpec},
    CommandCatalogue::Entry{kTraceClearSpec},   CommandCatalogue::Entry{kTraceSpec},
    CommandCatalogue::Entry{kFaultStallSpec},   CommandCatalogue::Entry{kPipelineSpec},
    CommandCatalogue::Entry{kSchedSpec},        CommandCatalogue::Entry{kPortsSpec},
    CommandCatalogue::Entry{kHardwareSpec},     CommandCatalogue::Entry{kSteeringSpec},
    CommandCatalogue::Entry{kOffloadSpec}};

}  // namespace

}  // namespace vecflow::control
