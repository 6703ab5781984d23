#include "api/metrics.h"

#include <time.h>

#include <algorithm>
#include <cassert>
#include <cmath>

#include <fmt/format.h>

namespace vecflow::control {
namespace {

template <class Range>
std::vector<std::string> to_vector(const Range& labels) {
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

std::string_view to_string(MetricType t) noexcept {
  switch (t) {
    case MetricType::Counter:
      return "counter";
    case MetricType::Gauge:
      return "gauge";
    case MetricType::Histogram:
      return "histogram";
  }
  return "untyped";
}

void Snapshot::subtract(const Snapshot& base) {
  for (const Family& b : base.families_) {
    if (!is_cumulative(b.family->type)) continue;
    for (Family& f : families_) {
      if (f.family->name != b.family->name) continue;
      for (auto& [labels, value] : f.series) {
        auto it = b.series.find(labels);
        if (it == b.series.end() || it->second.integral != value.integral) continue;
        if (value.integral && it->second.count <= value.count) value.count -= it->second.count;
        if (!value.integral && it->second.real <= value.real) value.real -= it->second.real;
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
  add(f, std::span<const std::string_view>(labels.begin(), labels.size()), value);
}

void Snapshot::add(const MetricFamily& f, std::span<const std::string_view> labels,
                   uint64_t value) {
  assert(labels.size() == f.labels.size());
  MetricValue& v = family(f).series[to_vector(labels)];
  v.integral = true;
  v.count += value;
}

void Snapshot::add_histogram(const MetricFamily& f, Labels labels, std::span<const double> bounds,
                             std::span<const uint64_t> cumulative, double sum) {
  assert(f.type == MetricType::Histogram && labels.size() + 1 == f.labels.size());
  assert(cumulative.size() == bounds.size() + 1);
  Family& fam = family(f);
  std::vector<std::string> key = to_vector(labels);
  key.emplace_back();
  for (size_t i = 0; i < cumulative.size(); ++i) {
    key.back() = i < bounds.size() ? fmt::format("{}", bounds[i]) : "+Inf";
    MetricValue& v = fam.series[key];
    v.integral = true;
    v.count += cumulative[i];
  }
  key.back().clear();
  MetricValue& v = fam.series[key];
  v.integral = false;
  v.real += sum;
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
  return count(f, std::span<const std::string_view>(labels.begin(), labels.size()));
}

uint64_t Snapshot::count(const MetricFamily& f, std::span<const std::string_view> labels) const {
  const Family* fam = find(f.name);
  if (!fam) return 0;
  auto it = fam->series.find(to_vector(labels));
  return it != fam->series.end() && it->second.integral ? it->second.count : 0;
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

namespace {

// One sample line: name, suffix, the first `nlabels` labels.
void append_sample(std::string& out, const MetricFamily& f, std::string_view suffix,
                   const std::vector<std::string>& labels, size_t nlabels,
                   const MetricValue& value) {
  out += f.name;
  out += suffix;
  if (nlabels > 0) {
    out += '{';
    for (size_t i = 0; i < nlabels; ++i) {
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

// A histogram's series, each label set's buckets in ascending order of their bound (the series
// map orders le as text), then its sum and count.
void append_histogram(std::string& out, const Snapshot::Family& fam) {
  const MetricFamily& f = *fam.family;
  using Entry = std::pair<const std::vector<std::string>*, const MetricValue*>;
  std::vector<Entry> entries;
  for (const auto& [labels, value] : fam.series)
    entries.emplace_back(&labels, &value);
  auto bound = [](const std::string& le) {
    return le.empty() ? INFINITY : le == "+Inf" ? HUGE_VAL : std::stod(le);
  };
  std::stable_sort(entries.begin(), entries.end(), [&](const Entry& a, const Entry& b) {
    const auto& la = *a.first;
    const auto& lb = *b.first;
    if (!std::equal(la.begin(), la.end() - 1, lb.begin(), lb.end() - 1))
      return std::lexicographical_compare(la.begin(), la.end() - 1, lb.begin(), lb.end() - 1);
    return bound(la.back()) < bound(lb.back()) || (la.back() == "+Inf" && lb.back().empty());
  });
  const size_t prefix = f.labels.size() - 1;
  for (const auto& [labels, value] : entries) {
    if (labels->back().empty()) {
      append_sample(out, f, "_sum", *labels, prefix, *value);
      continue;
    }
    append_sample(out, f, "_bucket", *labels, prefix + 1, *value);
    if (labels->back() == "+Inf") append_sample(out, f, "_count", *labels, prefix, *value);
  }
}

}  // namespace

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
    out += ' ';
    out += to_string(f.type);
    out += '\n';
    if (f.type == MetricType::Histogram) {
      append_histogram(out, fam);
      continue;
    }
    for (const auto& [labels, value] : fam.series)
      append_sample(out, f, "", labels, labels.size(), value);
  }
  return out;
}

}  // namespace vecflow::control
