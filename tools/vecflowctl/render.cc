#include "render.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include <fmt/format.h>

namespace vecflowctl {
namespace {

// SI prefixes for rates: "1.23 Mpps".
std::string si(double v, std::string_view unit) {
  static constexpr const char* kPrefix[] = {"", "K", "M", "G", "T"};
  size_t i = 0;
  double a = std::fabs(v);
  while (a >= 1000 && i + 1 < std::size(kPrefix)) {
    a /= 1000;
    v /= 1000;
    ++i;
  }
  if (i == 0) return fmt::format("{:.0f} {}", v, unit);
  return fmt::format("{:.{}f} {}{}", v, a >= 100 ? 0 : a >= 10 ? 1 : 2, kPrefix[i], unit);
}

std::string bytes(double v) {
  static constexpr const char* kPrefix[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  size_t i = 0;
  while (v >= 1024 && i + 1 < std::size(kPrefix)) {
    v /= 1024;
    ++i;
  }
  return i == 0 ? fmt::format("{:.0f} B", v) : fmt::format("{:.1f} {}", v, kPrefix[i]);
}

std::string duration(double s) {
  if (s < 60) return fmt::format("{:.1f}s", s);
  auto total = static_cast<uint64_t>(s);
  uint64_t d = total / 86400, h = total / 3600 % 24, m = total / 60 % 60, sec = total % 60;
  if (d > 0) return fmt::format("{}d{:02}h{:02}m", d, h, m);
  if (h > 0) return fmt::format("{}h{:02}m{:02}s", h, m, sec);
  return fmt::format("{}m{:02}s", m, sec);
}

std::string plain(const Json& v) {
  if (v.is_null()) return "-";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  if (v.is_number_float()) {
    double d = v.get<double>();
    return d == std::floor(d) && std::fabs(d) < 1e15 ? fmt::format("{:.0f}", d)
                                                     : fmt::format("{:.2f}", d);
  }
  if (v.is_array()) {
    std::string out;
    for (const auto& x : v)
      out += (out.empty() ? "" : ", ") + plain(x);
    return out.empty() ? "-" : out;
  }
  if (v.is_object()) {
    std::string out;
    for (const auto& [k, x] : v.items()) {
      if (x.is_null()) continue;
      out += fmt::format("{}{}={}", out.empty() ? "" : " ", k, plain(x));
    }
    return out;
  }
  return v.dump();
}

const Json* lookup(const Json& object, const std::string& key) {
  try {
    if (!key.empty() && key.front() == '/') {
      Json::json_pointer p(key);
      return object.contains(p) ? &object.at(p) : nullptr;
    }
    if (key.empty()) return &object;
    if (!object.is_object()) return nullptr;
    auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  } catch (const Json::exception&) {
    return nullptr;
  }
}

bool is_numeric_unit(std::string_view unit) {
  return !unit.empty();
}

bool is_zero(const Json* v) {
  return !v || v->is_null() || (v->is_number() && v->get<double>() == 0);
}

void render_fields(std::string& out, const Json& result, const Json& block) {
  const Json* object = lookup(result, block.value("rows", ""));
  if (!object) return;
  std::vector<std::pair<std::string, std::string>> lines;
  for (const auto& col : block["columns"]) {
    const Json* v = lookup(*object, col.value("key", ""));
    if (!v || v->is_null() || (v->is_array() && v->empty())) continue;
    lines.emplace_back(col.value("header", ""), format_value(*v, col.value("unit", "")));
  }
  std::string title = block.value("title", "");
  if (!title.empty() && !lines.empty()) out += (out.empty() ? "" : "\n") + title + ":\n";
  size_t width = 0;
  for (const auto& [name, value] : lines)
    width = std::max(width, name.size());
  for (const auto& [name, value] : lines)
    out += fmt::format("{:<{}}  {}\n", name + ":", width + 1, value);
}

// Fits a table into `max_width` columns of terminal (0: no limit). Numbers are never cut: a
// trailing text column (a description, a log line) is shortened first, then columns are
// dropped from the right, the first (the row's name) always kept. Returns the headers of the
// columns dropped.
std::vector<std::string> fit(std::vector<std::string>& header, std::vector<bool>& right,
                             std::vector<std::vector<std::string>>& cells,
                             std::vector<size_t>& width, size_t max_width) {
  auto total = [&] {
    size_t t = 0;
    for (size_t w : width)
      t += w;
    return t + 2 * (width.size() - 1);
  };
  std::vector<std::string> dropped;
  if (max_width == 0 || total() <= max_width) return dropped;
  constexpr size_t kShortestText = 12;
  const size_t last = width.size() - 1;
  if (!right[last] && last > 0) {
    const size_t others = total() - width[last];
    if (others + kShortestText <= max_width) {
      width[last] = max_width - others;
      for (auto& line : cells)
        if (line[last].size() > width[last])
          line[last] = line[last].substr(0, width[last] - 1) + "~";
      return dropped;
    }
  }
  while (width.size() > 1 && total() > max_width) {
    dropped.push_back(header.back());
    header.pop_back();
    right.pop_back();
    width.pop_back();
    for (auto& line : cells)
      line.pop_back();
  }
  std::reverse(dropped.begin(), dropped.end());
  return dropped;
}

void render_table(std::string& out, const Json& result, const Json& block, bool all,
                  size_t max_width) {
  const Json* rows = lookup(result, block.value("rows", ""));
  std::string title = block.value("title", "");
  const Json& cols = block["columns"];
  std::string hide = block.value("hide_zero", "");
  std::vector<std::vector<std::string>> cells;
  std::vector<std::string> header;
  std::vector<bool> right;
  for (const auto& c : cols) {
    header.push_back(c.value("header", ""));
    right.push_back(is_numeric_unit(c.value("unit", "")));
  }
  size_t hidden = 0;
  if (rows && rows->is_array()) {
    for (const auto& row : *rows) {
      if (!all && !hide.empty() && is_zero(lookup(row, hide))) {
        ++hidden;
        continue;
      }
      std::vector<std::string> line;
      for (const auto& c : cols) {
        const Json* v = lookup(row, c.value("key", ""));
        line.push_back(v ? format_value(*v, c.value("unit", "")) : "-");
      }
      cells.push_back(std::move(line));
    }
  }
  if (!out.empty()) out += "\n";
  if (!title.empty()) out += title + ":\n";
  if (cells.empty()) {
    out += hidden > 0 ? fmt::format("  none ({} at zero; --all shows them)\n", hidden)
                      : std::string("  none\n");
    return;
  }
  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) {
    width[i] = header[i].size();
    for (const auto& line : cells)
      width[i] = std::max(width[i], line[i].size());
  }
  const std::vector<std::string> dropped = fit(header, right, cells, width, max_width);
  auto emit = [&](const std::vector<std::string>& line) {
    std::string text;
    for (size_t i = 0; i < line.size(); ++i) {
      bool last = i + 1 == line.size();
      if (right[i]) {
        text += fmt::format("{:>{}}", line[i], width[i]);
      } else {
        text += last ? line[i] : fmt::format("{:<{}}", line[i], width[i]);
      }
      if (!last) text += "  ";
    }
    while (!text.empty() && text.back() == ' ')
      text.pop_back();
    out += text + "\n";
  };
  emit(header);
  for (const auto& line : cells)
    emit(line);
  if (hidden > 0) out += fmt::format("({} more at zero; --all shows them)\n", hidden);
  if (!dropped.empty()) {
    std::string names;
    for (const auto& d : dropped)
      names += (names.empty() ? "" : ", ") + d;
    // The note itself is cut at the last space that fits, not inside a word.
    std::string note = fmt::format("({} not shown at this width; --json has them)", names);
    while (max_width > 0 && note.size() > max_width) {
      size_t cut = note.rfind(' ', max_width);
      if (cut == std::string::npos || cut == 0) cut = max_width;
      out += note.substr(0, cut) + "\n";
      note = note.substr(cut == max_width ? cut : cut + 1);
    }
    out += note + "\n";
  }
}

// Lines written by vecflowd. One wider than `max_width` breaks at its last space that fits,
// and goes on indented four columns deeper than it starts; a word longer than the room is
// cut where the room ends.
void render_text(std::string& out, const Json& result, const Json& block, size_t max_width) {
  const Json* lines = lookup(result, block.value("rows", ""));
  if (!lines || !lines->is_array()) return;
  if (!out.empty()) out += "\n";
  const std::string title = block.value("title", "");
  if (!title.empty()) out += title + ":\n";
  for (const auto& l : *lines) {
    std::string line = l.is_string() ? l.get<std::string>() : plain(l);
    const size_t indent = std::min(line.find_first_not_of(' '), line.size()) + 4;
    if (max_width == 0 || max_width <= indent + 8) {
      out += line + "\n";
      continue;
    }
    bool first = true;
    while (true) {
      const size_t room = first ? max_width : max_width - indent;
      const std::string lead = first ? "" : std::string(indent, ' ');
      if (line.size() <= room) {
        out += lead + line + "\n";
        break;
      }
      size_t cut = line.rfind(' ', room);
      const bool at_space =
          cut != std::string::npos && cut > 0 && line.find_first_not_of(' ') < cut;
      if (!at_space) cut = room;
      out += lead + line.substr(0, cut) + "\n";
      line = line.substr(at_space ? cut + 1 : cut);
      first = false;
    }
  }
}

// A scalar in YAML: strings double-quoted (JSON's escapes are YAML's), so that "22" stays a
// string and "on" is not read as a boolean; numbers and booleans as they are.
std::string yaml_scalar(const Json& v) {
  if (v.is_string()) return v.dump();
  if (v.is_boolean()) return v.get<bool>() ? "true" : "false";
  return v.dump();
}

bool yaml_empty(const Json& v) {
  return (v.is_object() || v.is_array()) && v.empty();
}

// Block-style YAML of `v` at `indent`: mappings as `key: value`, sequences as `- item`, null
// members left out (the loader fills their defaults), empty collections as {} and [].
void render_yaml_value(std::string& out, const Json& v, size_t indent) {
  const std::string pad(indent, ' ');
  if (v.is_object()) {
    for (const auto& [key, value] : v.items()) {
      if (value.is_null()) continue;
      if ((value.is_object() || value.is_array()) && !yaml_empty(value)) {
        out += pad + key + ":\n";
        render_yaml_value(out, value, indent + 2);
      } else {
        out += pad + key + ": " + (yaml_empty(value) ? value.dump() : yaml_scalar(value)) + "\n";
      }
    }
  } else if (v.is_array()) {
    for (const auto& item : v) {
      if ((item.is_object() || item.is_array()) && !yaml_empty(item)) {
        // The item's first line goes after the dash, the rest under it.
        std::string inner;
        render_yaml_value(inner, item, indent + 2);
        out += pad + "- " + inner.substr(indent + 2);
      } else {
        out += pad + "- " + (yaml_empty(item) ? item.dump() : yaml_scalar(item)) + "\n";
      }
    }
  } else if (!v.is_null()) {
    out += pad + yaml_scalar(v) + "\n";
  }
}

}  // namespace

std::string to_yaml(const Json& value) {
  std::string out;
  render_yaml_value(out, value, 0);
  return out;
}

std::string format_value(const Json& v, std::string_view unit) {
  if (v.is_null()) return "-";
  if (!v.is_number()) return plain(v);
  double d = v.get<double>();
  if (unit == "pps") return si(d, "pps");
  if (unit == "bps") return si(d, "bps");
  if (unit == "bytes") return bytes(d);
  if (unit == "percent") return fmt::format("{:.1f}%", d);
  if (unit == "seconds") return duration(d);
  if (unit == "count" || unit == "cycles") return fmt::format("{:.0f}", d);
  return plain(v);
}

std::string render(const Json& result, const Json& view, bool all, size_t max_width) {
  if (!view.is_array() || view.empty()) return result.dump(2) + "\n";
  std::string out;
  for (const auto& block : view) {
    const std::string kind = block.value("kind", "");
    if (kind == "fields") {
      render_fields(out, result, block);
    } else if (kind == "text") {
      render_text(out, result, block, max_width);
    } else if (kind == "yaml") {
      if (const Json* v = lookup(result, block.value("rows", ""))) out += to_yaml(*v);
    } else {
      render_table(out, result, block, all, max_width);
    }
  }
  return out;
}

}  // namespace vecflowctl
