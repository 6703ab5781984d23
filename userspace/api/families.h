// Metric families shared by more than one part. A part's own families live in its adapter
// (control/parts/); these are the ones several parts add to, so that `vecflowctl errors` and a
// dashboard see every drop of the box in one family whichever layer dropped it.
#pragma once

#include "api/metrics.h"

namespace vecflow::control {

// Every drop of the box, by ingress port, reason (drop_reasons.h wire names) and the layer that
// dropped: "xdp" (the steering program), "userspace" (OutcomeTable: scheduler, pipeline, tx),
// "port" (frames a port received and dropped before handing them on: malformed frames) and
// "device" (frames the device or the kernel socket dropped before vecflow saw them: rx ring
// full, no buffer, rx errors). Each frame is counted in one layer only. A part that drops
// packets adds its counts here.
inline const MetricFamily kDrops{"vecflow_drops_total",
                                 "Packets dropped, by ingress port, reason and layer",
                                 MetricType::Counter,
                                 {"port", "reason", "layer"}};

// The OutcomeTable (core/accounting.h): what became of the packets that entered user space
// through each port. rx = tx + kernel + drops{layer="userspace"} + held once in-flight packets
// drain.
inline const MetricFamily kAccountRxPackets{"vecflow_accounting_rx_packets_total",
                                            "Packets that entered user space through a port",
                                            MetricType::Counter,
                                            {"port"}};
inline const MetricFamily kAccountRxBytes{"vecflow_accounting_rx_bytes_total",
                                          "Bytes that entered user space through a port",
                                          MetricType::Counter,
                                          {"port"}};
inline const MetricFamily kAccountTxPackets{
    "vecflow_accounting_tx_packets_total",
    "Packets transmitted, charged to the port they entered through",
    MetricType::Counter,
    {"port"}};
inline const MetricFamily kAccountTxBytes{
    "vecflow_accounting_tx_bytes_total",
    "Bytes transmitted, charged to the port they entered through",
    MetricType::Counter,
    {"port"}};
inline const MetricFamily kAccountKernelPackets{
    "vecflow_accounting_kernel_packets_total",
    "Packets handed to the kernel stack, charged to the port they entered through",
    MetricType::Counter,
    {"port"}};
inline const MetricFamily kAccountHeldPackets{
    "vecflow_accounting_held_packets",
    "Packets a stage holds now (waiting for their next hop to resolve), by ingress port",
    MetricType::Gauge,
    {"port"}};

// The XDP steering program of a port's interface (control/parts/steering_part.cc adds them;
// `accounting` reads them for the layer before user space). Per port, once settled:
//   rx == Σ verdicts (pass, drop, userspace, tx, redirect, offload), and verdict "userspace"
//   (lifted) == drops{layer="device"} (the AF_XDP socket's) + drops{layer="port"} +
//   vecflow_accounting_rx_packets_total.
inline const MetricFamily kSteerRxPackets{
    "vecflow_steer_rx_packets_total",
    "Frames the XDP steering program saw on a port's interface",
    MetricType::Counter,
    {"port"}};
inline const MetricFamily kSteerVerdicts{
    "vecflow_steer_verdicts_total",
    "What the XDP program finally did with each frame (after fallbacks)",
    MetricType::Counter,
    {"port", "verdict"}};

// The runtime's lcores and services (register_runtime): busy, idle and sleep cycles. Parts whose
// work runs as services (rx adapters, workers) read their busy share from these series, keyed
// by service name, rather than counting time again.
inline const MetricFamily kTscHz{
    "vecflow_tsc_hertz", "TSC ticks per second (converts *_cycles_total)", MetricType::Gauge, {}};

inline const MetricFamily kLcoreBusy{"vecflow_lcore_busy_cycles_total",
                                     "TSC cycles an lcore spent in polls that did work",
                                     MetricType::Counter,
                                     {"lcore"}};
inline const MetricFamily kLcoreIdle{"vecflow_lcore_idle_cycles_total",
                                     "TSC cycles an lcore spent in polls that found nothing",
                                     MetricType::Counter,
                                     {"lcore"}};
inline const MetricFamily kLcoreSleep{"vecflow_lcore_sleep_cycles_total",
                                      "TSC cycles an lcore spent napping or asleep",
                                      MetricType::Counter,
                                      {"lcore"}};
inline const MetricFamily kLcoreRounds{"vecflow_lcore_rounds_total",
                                       "Rounds of an lcore's service loop",
                                       MetricType::Counter,
                                       {"lcore"}};
inline const MetricFamily kLcoreNaps{
    "vecflow_lcore_naps_total", "Idle naps of an lcore", MetricType::Counter, {"lcore"}};
inline const MetricFamily kLcoreInterruptSleeps{
    "vecflow_lcore_interrupt_sleeps_total",
    "Times an lcore slept on its services' wake-up descriptors",
    MetricType::Counter,
    {"lcore"}};
// Stalls (runtime/lcore.h): one round of an lcore's services lasting cpu.stall_after_ms or more.
inline const MetricFamily kLcoreStalled{"vecflow_lcore_stalled",
                                        "1 while an lcore is stuck in one round",
                                        MetricType::Gauge,
                                        {"lcore"}};
inline const MetricFamily kLcoreStalls{"vecflow_lcore_stalls_total",
                                       "Rounds of an lcore that lasted cpu.stall_after_ms or more",
                                       MetricType::Counter,
                                       {"lcore"}};
inline const MetricFamily kLcoreStalledCycles{"vecflow_lcore_stalled_cycles_total",
                                              "TSC cycles an lcore spent in stalled rounds",
                                              MetricType::Counter,
                                              {"lcore"}};
inline const MetricFamily kServicePolls{
    "vecflow_service_polls_total", "Polls of a service", MetricType::Counter, {"lcore", "service"}};
inline const MetricFamily kServiceBusyPolls{"vecflow_service_busy_polls_total",
                                            "Polls of a service that did work",
                                            MetricType::Counter,
                                            {"lcore", "service"}};
inline const MetricFamily kServiceBusy{"vecflow_service_busy_cycles_total",
                                       "TSC cycles a service spent in polls that did work",
                                       MetricType::Counter,
                                       {"lcore", "service"}};
inline const MetricFamily kServiceIdle{"vecflow_service_idle_cycles_total",
                                       "TSC cycles a service spent in polls that found nothing",
                                       MetricType::Counter,
                                       {"lcore", "service"}};
inline const MetricFamily kServiceSleeps{"vecflow_service_sleeps_total",
                                         "Times an lcore slept on a service's wake-up descriptors",
                                         MetricType::Counter,
                                         {"lcore", "service"}};

}  // namespace vecflow::control
