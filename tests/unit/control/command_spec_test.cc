// Every command spec linked into vecflowctl (all of them: this test links the same objects) is
// complete: a summary and each argument's help, as vecflowctl's --help, its man page and
// `vecflowctl commands` print them; names and vecflowctl words unique; every group of words
// described. A command added without help fails here before it reaches an operator.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "api/command_spec.h"

namespace vecflow::control {
namespace {

TEST(CommandCatalogue, HoldsEveryPartsCommands) {
  // One from each folder that adds specs: control/, control/parts/ and a stage type's own.
  for (const char* name : {"status", "capture-start", "ports", "routes", "sessions", "flows"})
    EXPECT_NE(CommandCatalogue::find(name), nullptr) << name;
}

TEST(CommandCatalogue, EverySpecHasHelpAndSaneArguments) {
  ASSERT_FALSE(CommandCatalogue::commands().empty());
  for (const CommandSpec* s : CommandCatalogue::commands())
    EXPECT_EQ(spec_problem(*s), "") << s->name;
}

TEST(CommandCatalogue, NamesAndWordsAreUniqueAndGroupsDescribed) {
  std::set<std::string_view> names;
  std::set<std::string> words;
  std::set<std::string_view> groups;
  for (const CommandGroupSpec* g : CommandCatalogue::groups()) {
    EXPECT_FALSE(g->summary.empty()) << g->word;
    groups.insert(g->word);
  }
  for (const CommandSpec* s : CommandCatalogue::commands()) {
    EXPECT_TRUE(names.insert(s->name).second) << "two specs named " << s->name;
    if (s->call_only) continue;
    std::string w;
    for (auto word : s->words)
      w += std::string(word) + " ";
    if (s->words.empty()) w = std::string(s->name);
    EXPECT_TRUE(words.insert(w).second) << "two commands under the words '" << w << "'";
    EXPECT_LE(s->words.size(), 2u) << s->name;
    if (s->words.size() == 2) {
      EXPECT_TRUE(groups.contains(s->words[0])) << s->words[0];
    }
  }
}

TEST(CommandSpec, ProblemsAreNamed) {
  EXPECT_NE(spec_problem(CommandSpec{"x", ""}).find("no summary"), std::string::npos);
  EXPECT_NE(spec_problem(CommandSpec{"x", "y", Access::Read, {{"a", ArgType::Uint, ""}}})
                .find("'a' has no help"),
            std::string::npos);
  EXPECT_NE(spec_problem(
                CommandSpec{
                    "x", "y", Access::Read, {{"a", ArgType::Uint, "h"}, {"a", ArgType::Uint, "h"}}})
                .find("twice"),
            std::string::npos);
  EXPECT_NE(
      spec_problem(
          CommandSpec{"x", "y", Access::Read, {{"a", ArgType::Uint, "h", false, false, {}, {"b"}}}})
          .find("choices"),
      std::string::npos);
  EXPECT_EQ(CommandSpec({"x",
                         "y",
                         Access::Read,
                         {{"top", ArgType::Uint, "h"},
                          {"by", ArgType::String, "h", false, false, {}, {"a", "b"}},
                          {"port", ArgType::String, "h", true}}})
                .usage(),
            "[top=N] [by=a|b] port=TEXT");
}

}  // namespace
}  // namespace vecflow::control
