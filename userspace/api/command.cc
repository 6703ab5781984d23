#include "api/command.h"

#include <cmath>
#include <limits>

namespace vecflow::control {

std::string_view to_string(ErrorCode code) noexcept {
  switch (code) {
    case ErrorCode::MalformedRequest:
      return "malformed_request";
    case ErrorCode::TruncatedRequest:
      return "truncated_request";
    case ErrorCode::RequestTooLarge:
      return "request_too_large";
    case ErrorCode::Timeout:
      return "timeout";
    case ErrorCode::Busy:
      return "busy";
    case ErrorCode::UnsupportedVersion:
      return "unsupported_version";
    case ErrorCode::UnknownCommand:
      return "unknown_command";
    case ErrorCode::BadArguments:
      return "bad_arguments";
    case ErrorCode::PermissionDenied:
      return "permission_denied";
    case ErrorCode::InvalidConfig:
      return "invalid_config";
    case ErrorCode::Failed:
      return "failed";
    case ErrorCode::Internal:
      return "internal";
  }
  return "internal";
}

std::string_view to_string(Unit u) noexcept {
  switch (u) {
    case Unit::None:
      return "";
    case Unit::Count:
      return "count";
    case Unit::Bytes:
      return "bytes";
    case Unit::Pps:
      return "pps";
    case Unit::Bps:
      return "bps";
    case Unit::Percent:
      return "percent";
    case Unit::Seconds:
      return "seconds";
    case Unit::Cycles:
      return "cycles";
  }
  return "";
}

ArgReader::ArgReader(const Json& args, std::initializer_list<std::string_view> known)
    : args_(args) {
  if (args_.is_null()) return;
  if (!args_.is_object()) {
    fail("\"args\" must be an object");
    return;
  }
  for (const auto& [key, value] : args_.items()) {
    bool ok = false;
    for (auto k : known)
      ok |= k == key;
    if (!ok) {
      std::string list;
      for (auto k : known)
        list += fmt::format("{}{}", list.empty() ? "" : ", ", k);
      fail(list.empty() ? fmt::format("unknown argument '{}': this command takes none", key)
                        : fmt::format("unknown argument '{}' (expected: {})", key, list));
      return;
    }
  }
}

void ArgReader::fail(std::string message) {
  if (!error_) error_ = CommandError{ErrorCode::BadArguments, std::move(message), {}};
}

const Json* ArgReader::find(std::string_view key) const {
  if (!args_.is_object()) return nullptr;
  auto it = args_.find(key);
  if (it == args_.end() || it->is_null()) return nullptr;
  return &*it;
}

void ArgReader::require(std::string_view key) {
  if (!find(key)) fail(fmt::format("missing argument '{}'", key));
}

std::optional<std::string> ArgReader::string(std::string_view key) {
  const Json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) {
    fail(fmt::format("argument '{}' must be a string", key));
    return std::nullopt;
  }
  return v->get<std::string>();
}

std::string ArgReader::string(std::string_view key, std::string fallback) {
  auto v = string(key);
  return v ? *v : fallback;
}

std::optional<uint64_t> ArgReader::uint(std::string_view key, uint64_t min, uint64_t max) {
  const Json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_number_unsigned() && !(v->is_number_integer() && v->get<int64_t>() >= 0)) {
    fail(fmt::format("argument '{}' must be a non-negative integer", key));
    return std::nullopt;
  }
  auto n = v->get<uint64_t>();
  if (n < min || n > max) {
    fail(fmt::format("argument '{}' is {}, expected {}..{}", key, n, min, max));
    return std::nullopt;
  }
  return n;
}

uint64_t ArgReader::uint(std::string_view key, uint64_t fallback, uint64_t min, uint64_t max) {
  auto v = uint(key, min, max);
  return v ? *v : fallback;
}

double ArgReader::number(std::string_view key, double fallback, double min, double max) {
  const Json* v = find(key);
  if (!v) return fallback;
  if (!v->is_number()) {
    fail(fmt::format("argument '{}' must be a number", key));
    return fallback;
  }
  double n = v->get<double>();
  if (!std::isfinite(n) || n < min || n > max) {
    fail(fmt::format("argument '{}' is {}, expected {}..{}", key, n, min, max));
    return fallback;
  }
  return n;
}

bool ArgReader::boolean(std::string_view key, bool fallback) {
  const Json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) {
    fail(fmt::format("argument '{}' must be true or false", key));
    return fallback;
  }
  return v->get<bool>();
}

std::string ArgReader::choice(std::string_view key, std::string fallback,
                              std::initializer_list<std::string_view> allowed) {
  auto v = string(key);
  if (!v) return fallback;
  for (auto a : allowed) {
    if (a == *v) return *v;
  }
  std::string list;
  for (auto a : allowed)
    list += fmt::format("{}{}", list.empty() ? "" : ", ", a);
  fail(fmt::format("argument '{}' is '{}', expected one of: {}", key, *v, list));
  return fallback;
}

Json View::to_json() const {
  Json out = Json::array();
  for (const auto& b : blocks) {
    Json cols = Json::array();
    for (const auto& c : b.columns) {
      Json col = {{"header", c.header}, {"key", c.key}};
      if (c.unit != Unit::None) col["unit"] = to_string(c.unit);
      cols.push_back(std::move(col));
    }
    const char* kind = b.kind == Block::Kind::Table    ? "table"
                       : b.kind == Block::Kind::Fields ? "fields"
                       : b.kind == Block::Kind::Text   ? "text"
                                                       : "yaml";
    Json block = {
        {"kind", kind}, {"title", b.title}, {"rows", b.rows}, {"columns", std::move(cols)}};
    if (!b.hide_zero.empty()) block["hide_zero"] = b.hide_zero;
    out.push_back(std::move(block));
  }
  return out;
}

Block table(std::string title, std::string rows, std::vector<Column> columns,
            std::string hide_zero) {
  return Block{Block::Kind::Table, std::move(title), std::move(rows), std::move(columns),
               std::move(hide_zero)};
}

Block fields(std::string title, std::string object, std::vector<Column> columns) {
  return Block{Block::Kind::Fields, std::move(title), std::move(object), std::move(columns), {}};
}

Block yaml(std::string value) {
  return Block{Block::Kind::Yaml, {}, std::move(value), {}, {}};
}

Block text(std::string title, std::string lines) {
  return Block{Block::Kind::Text, std::move(title), std::move(lines), {}, {}};
}

}  // namespace vecflow::control
