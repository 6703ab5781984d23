// Writes the malformed-traffic corpus (corpus.cc) to disk:
//
//   gen_corpus CORPUS_DIR [SEED_DIR]
//
// CORPUS_DIR gets one pcap per case and MANIFEST; SEED_DIR, if given, gets every frame as a
// raw file (<case>-<n>), the seeds of the frame fuzz targets. Files of cases that no longer
// exist are removed from both, so the directories hold exactly the corpus (and SEED_DIR the
// regress-* inputs fuzzing found). `ninja corpus-update`
// runs it on the source tree; corpus_test checks the committed files equal its output.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "corpus.h"

namespace fs = std::filesystem;
using namespace vecflow::test;

namespace {

bool write_file(const fs::path& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), std::streamsize(size));
  return bool(out);
}

// Removes files in `dir` not in `keep` (only those `ours` says this tool made).
template <typename Ours>
void remove_stale(const fs::path& dir, const std::set<std::string>& keep, Ours ours) {
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (e.is_regular_file() && ours(name) && !keep.count(name)) fs::remove(e.path());
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR [SEED_DIR]\n", argv[0]);
    return 2;
  }
  fs::path dir = argv[1];
  fs::create_directories(dir);
  auto cases = corpus_cases();
  std::set<std::string> pcaps;
  for (const auto& c : cases) {
    std::string file = c.name + ".pcap";
    if (auto r = write_pcap((dir / file).string(), c.frames); !r) {
      std::fprintf(stderr, "gen_corpus: %s\n", r.error().message.c_str());
      return 1;
    }
    pcaps.insert(file);
  }
  std::string manifest = manifest_text(cases);
  if (!write_file(dir / "MANIFEST", manifest.data(), manifest.size())) {
    std::fprintf(stderr, "gen_corpus: cannot write %s\n", (dir / "MANIFEST").c_str());
    return 1;
  }
  remove_stale(dir, pcaps, [](const std::string& n) { return n.ends_with(".pcap"); });

  size_t frames = 0;
  if (argc == 3) {
    fs::path seeds = argv[2];
    fs::create_directories(seeds);
    std::set<std::string> names;
    for (const auto& c : cases) {
      for (size_t i = 0; i < c.frames.size(); ++i) {
        std::string name = fmt::format("{}-{}", c.name, i);
        if (!write_file(seeds / name, c.frames[i].data(), c.frames[i].size())) {
          std::fprintf(stderr, "gen_corpus: cannot write %s\n", (seeds / name).c_str());
          return 1;
        }
        names.insert(name);
      }
    }
    // Inputs fuzzing found (regress-*) live beside the generated seeds and stay.
    remove_stale(seeds, names, [](const std::string& n) { return !n.starts_with("regress-"); });
  }
  for (const auto& c : cases)
    frames += c.frames.size();
  std::printf("gen_corpus: %zu cases, %zu frames\n", cases.size(), frames);
  return 0;
}
