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

namespace {

std::string list_of(const std::vector<std::string_view>& words) {
  std::string out;
  for (auto w : words)
    out += fmt::format("{}{}", out.empty() ? "" : ", ", w);
  return out;
}

std::string bound(double v) {
  return fmt::format("{}", v);
}

// What is wrong with one argument's value, or empty.
std::string value_problem(const ArgSpec& a, const Json& v) {
  switch (a.type) {
    case ArgType::String:
    case ArgType::Path:
      if (!v.is_string()) return fmt::format("argument '{}' must be a string", a.name);
      if (!a.choices.empty()) {
        const std::string s = v.get<std::string>();
        for (auto c : a.choices) {
          if (c == s) return {};
        }
        return fmt::format("argument '{}' is '{}', expected one of: {}", a.name, s,
                           list_of(a.choices));
      }
      return {};
    case ArgType::Uint: {
      if (!v.is_number_unsigned() && !(v.is_number_integer() && v.get<int64_t>() >= 0))
        return fmt::format("argument '{}' must be a non-negative integer", a.name);
      const auto n = v.get<uint64_t>();
      if (static_cast<double>(n) < a.min || static_cast<double>(n) > a.max)
        return fmt::format("argument '{}' is {}, expected {}..{}", a.name, n, bound(a.min),
                           bound(a.max));
      return {};
    }
    case ArgType::Number: {
      if (!v.is_number()) return fmt::format("argument '{}' must be a number", a.name);
      const double n = v.get<double>();
      if (!std::isfinite(n) || n < a.min || n > a.max)
        return fmt::format("argument '{}' is {}, expected {}..{}", a.name, n, bound(a.min),
                           bound(a.max));
      return {};
    }
    case ArgType::Bool:
      if (!v.is_boolean()) return fmt::format("argument '{}' must be true or false", a.name);
      return {};
  }
  return {};
}

}  // namespace

std::optional<CommandError> check_args(const CommandSpec& spec, const Json& args) {
  auto bad = [](std::string message) {
    return CommandError{ErrorCode::BadArguments, std::move(message), {}};
  };
  if (!args.is_null() && !args.is_object()) return bad("\"args\" must be an object");
  if (args.is_object()) {
    for (const auto& [key, value] : args.items()) {
      const ArgSpec* a = spec.arg(key);
      if (!a) {
        if (spec.args.empty())
          return bad(fmt::format("unknown argument '{}': this command takes none", key));
        std::vector<std::string_view> names;
        for (const ArgSpec& known : spec.args)
          names.push_back(known.name);
        return bad(fmt::format("unknown argument '{}' (expected: {})", key, list_of(names)));
      }
      if (value.is_null()) continue;
      if (auto problem = value_problem(*a, value); !problem.empty()) return bad(problem);
    }
  }
  for (const ArgSpec& a : spec.args) {
    if (!a.required) continue;
    if (!args.is_object() || !args.contains(a.name) || args[a.name].is_null())
      return bad(fmt::format("missing argument '{}'", a.name));
  }
  return std::nullopt;
}

ArgReader::ArgReader(const CommandContext& ctx) : args_(ctx.args) {}

const Json* ArgReader::find(std::string_view key) const {
  if (!args_.is_object()) return nullptr;
  auto it = args_.find(key);
  if (it == args_.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> ArgReader::string(std::string_view key) const {
  const Json* v = find(key);
  if (!v || !v->is_string()) return std::nullopt;
  return v->get<std::string>();
}

std::string ArgReader::string(std::string_view key, std::string fallback) const {
  auto v = string(key);
  return v ? *v : fallback;
}

std::optional<uint64_t> ArgReader::uint(std::string_view key) const {
  const Json* v = find(key);
  if (!v || !v->is_number_integer()) return std::nullopt;
  return v->get<uint64_t>();
}

uint64_t ArgReader::uint(std::string_view key, uint64_t fallback) const {
  auto v = uint(key);
  return v ? *v : fallback;
}

double ArgReader::number(std::string_view key, double fallback) const {
  const Json* v = find(key);
  return v && v->is_number() ? v->get<double>() : fallback;
}

bool ArgReader::boolean(std::string_view key, bool fallback) const {
  const Json* v = find(key);
  return v && v->is_boolean() ? v->get<bool>() : fallback;
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
