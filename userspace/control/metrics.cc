#include "control/metrics.h"

#include <time.h>

#include <algorithm>
#include <cassert>
#include <cmath>

#include <fmt/format.h>

namespace vecflow::control {
namespace {

std::vector<std::string> to_vector(Labels labels) {
  return std::vector<std::string>(labels.begin(), labels.end());
}

bool matches(const MetricFamily& f, const std::vector<std::string>& values, LabelMatch match) {
  for (const auto& [name, want] : match) {
    bool found = false;
    for (size_t i = 0; i < f.labels.size() && i < values.size(); ++i) {
      if (f.labels[i] == name) {
        if (values[i] != want) return false;
        found = true;
      }
    }
    if (!found) return false;
  }
  return true;
}

void append_escaped(std::string& out, std::string_view text, bool quote) {
  for (char c : text) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (quote && c == '"') {
      out += "\\\"";
    } else {
      out += c;
    }
  }
}

void append_value(std::string& out, const MetricValue& v) {
  if (v.integral) {
    out += fmt::format("{}", v.count);
  } else if (std::isnan(v.real)) {
    out += "NaN";
  } else if (std::isinf(v.real)) {
    out += v.real > 0 ? "+Inf" : "-Inf";
  } else {
    out += fmt::format("{}", v.real);
  }
}

}  // namespace

uint64_t monotonic_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

Snapshot::Snapshot() : taken_ns_(monotonic_ns()) {}

Snapshot::Family& Snapshot::family(const MetricFamily& f) {
  for (auto& fam : families_) {
    if (fam.family->name == f.name) {
      assert(fam.family->type == f.type && fam.family->labels.size() == f.labels.size());
      return fam;
    }
  }
  families_.push_back(Family{&f, {}});
  return families_.back();
}

void Snapshot::subtract(const Snapshot& base) {
  for (const Family& b : base.families_) {
    if (b.family->type != MetricType::Counter) continue;
    for (Family& f : families_) {
      if (f.family->name != b.family->name) continue;
      for (auto& [labels, value] : f.series) {
        auto it = b.series.find(labels);
        if (it == b.series.end() || !value.integral) continue;
        if (it->second.count <= value.count) value.count -= it->second.count;
      }
    }
  }
}

void Snapshot::replace(const Snapshot& from,
                       const std::function<bool(const MetricFamily&)>& which) {
  for (const Family& f : from.families_) {
    if (!which(*f.family)) continue;
    family(*f.family).series = f.series;
  }
}

void Snapshot::declare(const MetricFamily& f) {
  family(f);
}

void Snapshot::add(const MetricFamily& f, Labels labels, uint64_t value) {
  assert(labels.size() == f.labels.size());
  MetricValue& v = family(f).series[to_vector(labels)];
  v.integral = true;
  v.count += value;
}

void Snapshot::set(const MetricFamily& f, Labels labels, double value) {
  assert(labels.size() == f.labels.size());
  MetricValue& v = family(f).series[to_vector(labels)];
  v.integral = false;
  v.real = value;
}

std::optional<MetricValue> Snapshot::get(const MetricFamily& f, Labels labels) const {
  const Family* fam = find(f.name);
  if (!fam) return std::nullopt;
  auto it = fam->series.find(to_vector(labels));
  if (it == fam->series.end()) return std::nullopt;
  return it->second;
}

uint64_t Snapshot::count(const MetricFamily& f, Labels labels) const {
  auto v = get(f, labels);
  return v && v->integral ? v->count : 0;
}

double Snapshot::sum(const MetricFamily& f, LabelMatch match) const {
  const Family* fam = find(f.name);
  if (!fam) return 0;
  double total = 0;
  for (const auto& [labels, value] : fam->series) {
    if (matches(*fam->family, labels, match)) total += value.as_double();
  }
  return total;
}

std::unordered_map<std::string, double> Snapshot::sum_by(const MetricFamily& f,
                                                         std::string_view label) const {
  std::unordered_map<std::string, double> sums;
  const Family* fam = find(f.name);
  if (!fam) return sums;
  auto at = std::find(f.labels.begin(), f.labels.end(), label);
  assert(at != f.labels.end());
  const size_t index = static_cast<size_t>(at - f.labels.begin());
  for (const auto& [labels, value] : fam->series)
    sums[labels[index]] += value.as_double();
  return sums;
}

const Snapshot::Family* Snapshot::find(std::string_view family_name) const {
  for (const auto& fam : families_) {
    if (fam.family->name == family_name) return &fam;
  }
  return nullptr;
}

void RateWindow::push(Snapshot latest) {
  previous_ = std::move(latest_);
  latest_ = std::move(latest);
}

double RateWindow::interval_s() const noexcept {
  if (!ready()) return 0;
  return static_cast<double>(latest_->taken_ns() - previous_->taken_ns()) / 1e9;
}

std::optional<double> RateWindow::rate(const MetricFamily& f, Labels labels) const {
  if (!ready()) return std::nullopt;
  auto now = latest_->get(f, labels);
  auto before = previous_->get(f, labels);
  double dt = interval_s();
  if (!now || dt <= 0) return std::nullopt;
  double b = before ? before->as_double() : 0;
  double n = now->as_double();
  if (n < b) return std::nullopt;  // the counter was reset (a part restarted)
  return (n - b) / dt;
}

std::optional<double> RateWindow::rate_sum(const MetricFamily& f, LabelMatch match) const {
  if (!ready()) return std::nullopt;
  double dt = interval_s();
  double n = latest_->sum(f, match);
  double b = previous_->sum(f, match);
  if (dt <= 0 || n < b) return std::nullopt;
  return (n - b) / dt;
}

std::unordered_map<std::string, std::optional<double>> RateWindow::rate_by(
    const MetricFamily& f, std::string_view label) const {
  std::unordered_map<std::string, std::optional<double>> rates;
  double dt = interval_s();
  if (!ready() || dt <= 0) return rates;
  const auto before = previous_->sum_by(f, label);
  for (const auto& [value, now] : latest_->sum_by(f, label)) {
    auto it = before.find(value);
    double b = it == before.end() ? 0 : it->second;
    rates[value] = now < b ? std::nullopt : std::optional<double>((now - b) / dt);
  }
  for (const auto& [value, b] : before) {
    if (!rates.contains(value)) rates[value] = std::nullopt;  // gone: its sum went to 0
  }
  return rates;
}

std::string render_prometheus(const Snapshot& s) {
  std::string out;
  for (const auto& fam : s.families()) {
    const MetricFamily& f = *fam.family;
    out += "# HELP ";
    out += f.name;
    out += ' ';
    append_escaped(out, f.help, false);
    out += "\n# TYPE ";
    out += f.name;
    out += f.type == MetricType::Counter ? " counter\n" : " gauge\n";
    for (const auto& [labels, value] : fam.series) {
      out += f.name;
      if (!labels.empty()) {
        out += '{';
        for (size_t i = 0; i < labels.size(); ++i) {
          if (i) out += ',';
          out += f.labels[i];
          out += "=\"";
          append_escaped(out, labels[i], true);
          out += '"';
        }
        out += '}';
      }
      out += ' ';
      append_value(out, value);
      out += '\n';
    }
  }
  return out;
}

}  // namespace vecflow::control
