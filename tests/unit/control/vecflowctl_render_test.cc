// vecflowctl's human output: units, aligned tables, hidden zero rows, fields.
#include <gtest/gtest.h>

#include <algorithm>

#include "render.h"

namespace vecflowctl {
namespace {

TEST(FormatValue, PrintsUnits) {
  EXPECT_EQ(format_value(Json(12), "pps"), "12 pps");
  EXPECT_EQ(format_value(Json(1234567.0), "pps"), "1.23 Mpps");
  EXPECT_EQ(format_value(Json(98700.0), "bps"), "98.7 Kbps");
  EXPECT_EQ(format_value(Json(1536), "bytes"), "1.5 KiB");
  EXPECT_EQ(format_value(Json(12.345), "percent"), "12.3%");
  EXPECT_EQ(format_value(Json(3725.0), "seconds"), "1h02m05s");
  EXPECT_EQ(format_value(Json(200000.0), "seconds"), "2d07h33m");
  EXPECT_EQ(format_value(Json(497.88), "count"), "498");
  EXPECT_EQ(format_value(Json(nullptr), "pps"), "-");
  EXPECT_EQ(format_value(Json(true), ""), "yes");
  EXPECT_EQ(format_value(Json::array({1, 2}), ""), "1, 2");
}

const Json kView = Json::parse(R"([
  {"kind":"fields","title":"","rows":"","columns":[
     {"header":"name","key":"/name"},{"header":"missing","key":"/nope"},
     {"header":"uptime","key":"/up","unit":"seconds"}]},
  {"kind":"table","title":"reasons","rows":"/reasons","hide_zero":"/count","columns":[
     {"header":"REASON","key":"reason"},{"header":"COUNT","key":"count","unit":"count"}]}
])");

TEST(Render, AlignsFieldsAndTablesAndHidesZeroRows) {
  Json result = {{"name", "edge-1"},
                 {"up", 5.0},
                 {"reasons", Json::array({{{"reason", "no_route"}, {"count", 1200}},
                                          {{"reason", "acl_deny"}, {"count", 0}},
                                          {{"reason", "ttl_expired"}, {"count", 3}}})}};
  EXPECT_EQ(render(result, kView, false),
            "name:    edge-1\n"
            "uptime:  5.0s\n"
            "\n"
            "reasons:\n"
            "REASON       COUNT\n"
            "no_route      1200\n"
            "ttl_expired      3\n"
            "(1 more at zero; --all shows them)\n");
  EXPECT_NE(render(result, kView, true).find("acl_deny"), std::string::npos);
}

TEST(Render, EmptyTablesSayNone) {
  Json result = {{"name", "x"}, {"up", 1.0}, {"reasons", Json::array()}};
  EXPECT_NE(render(result, kView, false).find("reasons:\n  none\n"), std::string::npos);
}

// A table wider than the terminal: its trailing text is shortened first; when that is not
// enough, whole columns go from the right and the output says which. A number is never cut.
TEST(Render, TablesFitTheTerminalWithoutCuttingANumber) {
  const Json view = Json::parse(R"([{"kind":"table","title":"","rows":"/r","columns":[
     {"header":"PORT","key":"port"},{"header":"RX","key":"rx","unit":"count"},
     {"header":"TX","key":"tx","unit":"count"},{"header":"WHAT","key":"what"}]}])");
  Json result = {{"r", Json::array({{{"port", "wan"},
                                     {"rx", 123456789},
                                     {"tx", 987654321},
                                     {"what", std::string(60, 'x')}}})}};
  const std::string wide = render(result, view, false, 0);
  EXPECT_NE(wide.find(std::string(60, 'x')), std::string::npos);
  for (size_t width : {40u, 80u}) {
    const std::string fitted = render(result, view, false, width);
    for (size_t at = 0, next; at < fitted.size(); at = next + 1) {
      next = fitted.find('\n', at);
      EXPECT_LE(next - at, width) << fitted;
    }
    EXPECT_NE(fitted.find("123456789"), std::string::npos) << fitted;
    EXPECT_NE(fitted.find("987654321"), std::string::npos) << fitted;
    EXPECT_NE(fitted.find("x~"), std::string::npos) << fitted;
  }
  // Too narrow for the numbers and 12 characters of text: TX and WHAT go, RX stays whole.
  const std::string narrow = render(result, view, false, 24);
  EXPECT_NE(narrow.find("123456789"), std::string::npos) << narrow;
  EXPECT_EQ(narrow.find("98765"), std::string::npos) << narrow;
  // The note too fits, broken at spaces.
  for (size_t at = 0, next; at < narrow.size(); at = next + 1) {
    next = narrow.find('\n', at);
    EXPECT_LE(next - at, 24u) << narrow;
  }
  std::string joined = narrow;
  std::replace(joined.begin(), joined.end(), '\n', ' ');
  EXPECT_NE(joined.find("(TX, WHAT not shown at this width; --json has them)"), std::string::npos)
      << narrow;
}

TEST(Render, TextLinesWrapAtSpacesIndentedAndLoseNothing) {
  const Json view = Json::parse(R"([{"kind":"text","title":"","rows":"/lines"}])");
  const std::string step =
      "  +47.0 us  lcore 1  sched  queue 0 (acl+route+neighbour) atomic, "
      "flow 6, event of 12 packets";
  const Json result = {{"lines", Json::array({"packet 1", step})}};
  EXPECT_EQ(render(result, view, false, 0), "packet 1\n" + step + "\n");
  const std::string wrapped = render(result, view, false, 40);
  EXPECT_EQ(wrapped,
            "packet 1\n"
            "  +47.0 us  lcore 1  sched  queue 0\n"
            "      (acl+route+neighbour) atomic, flow\n"
            "      6, event of 12 packets\n");
  // A word longer than the room is cut, not lost.
  const Json long_word = {{"lines", Json::array({std::string(50, 'y')})}};
  EXPECT_EQ(render(long_word, view, false, 30),
            std::string(30, 'y') + "\n    " + std::string(20, 'y') + "\n");
}

TEST(Render, YamlQuotesStringsLeavesOutNullsAndNestsLists) {
  const Json v = Json::parse(
      R"({"name":"demo","port":"22","on":true,"n":3,"skip":null,"empty":[],"none":{},
          "rules":[{"name":"a","match":{"proto":"tcp","dst_port":22,"src":null}},"x"]})");
  EXPECT_EQ(to_yaml(v),
            "name: \"demo\"\n"
            "port: \"22\"\n"
            "on: true\n"
            "n: 3\n"
            "empty: []\n"
            "none: {}\n"
            "rules:\n"
            "  - name: \"a\"\n"
            "    match:\n"
            "      proto: \"tcp\"\n"
            "      dst_port: 22\n"
            "  - \"x\"\n");
  const Json view = Json::parse(R"([{"kind":"yaml","title":"","rows":""}])");
  EXPECT_EQ(render(Json{{"a", 1}}, view, false), "a: 1\n");
}

TEST(Render, WithoutAViewPrintsJson) {
  EXPECT_EQ(render(Json{{"a", 1}}, Json(), false), "{\n  \"a\": 1\n}\n");
}

}  // namespace
}  // namespace vecflowctl
