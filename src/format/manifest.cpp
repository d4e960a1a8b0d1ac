#include "format/manifest.h"

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/json_integer.h"

namespace sluice {

namespace {
// A 64-bit checksum written as hex; std::invalid_argument / std::out_of_range as std::stoull.
uint64_t hex64(const std::string& s) {
  size_t used = 0;
  const uint64_t v = std::stoull(s, &used, 16);
  if (used != s.size() || s.empty() || s[0] == '-' || s[0] == '+' || std::isspace((unsigned char)s[0]))
    throw std::invalid_argument(s);
  return v;
}

// An integer field that fits T, or a type_error naming what is there.
template <class T>
T integer(const nlohmann::json& v) {
  if (const auto i = json_integer<T>(v)) return *i;
  throw nlohmann::json::type_error::create(302, "expected an integer that fits " + std::to_string(sizeof(T) * 8) +
                                                    " bits, got " + v.dump(), &v);
}
}  // namespace

void Manifest::save(const std::string& path) const {
  nlohmann::json j;
  j["version"] = version;
  j["spine"] = {{"file", kSpineFile}, {"format", spine_format}};
  if (spine_file) {
    j["spine"]["size"] = spine_file->size;
    j["spine"]["xxh3"] = fmt::format("{:016x}", spine_file->checksum);
  }
  if (!rest_checksums.empty() && rest_checksums.size() != files.size())
    fail("{}: {} rest checksums for {} files", path, rest_checksums.size(), files.size());
  j["files"] = nlohmann::json::array();
  for (size_t i = 0; i < files.size(); ++i) {
    j["files"].push_back({{"name", files[i].first}, {"size", files[i].second}});
    if (!rest_checksums.empty()) j["files"].back()["rest_xxh3"] = fmt::format("{:016x}", rest_checksums[i]);
  }
  j["packs"] = packs;
  if (pack_dirs.size() != (expert_dirs.empty() ? 0 : packs.size()))
    fail("{}: {} pack directories for {} packs", path, pack_dirs.size(), packs.size());
  if (!expert_dirs.empty()) {
    j["expert_dirs"] = expert_dirs;
    j["pack_dirs"] = pack_dirs;
  }
  j["experts"] = nlohmann::json::array();
  for (const auto& e : experts) {
    nlohmann::json ex = nlohmann::json::array();
    for (const auto& x : e.extents) ex.push_back({x.file, x.offset, x.length});
    j["experts"].push_back({e.layer, e.expert, ex, fmt::format("{:016x}", e.checksum)});
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    out << j.dump() << "\n";
    if (!out) fail("{}: cannot write", tmp);
  }
  std::filesystem::rename(tmp, path);
}

Manifest Manifest::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail("{}: cannot open", path);
  Manifest m;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    m.version = integer<int>(j.at("version"));
    if (m.version != 1) fail("{}: manifest version {} is not supported", path, m.version);
    const auto& spine = j.at("spine");
    m.spine_format = spine.at("format").get<std::string>();
    if (spine.contains("xxh3"))
      m.spine_file = Manifest::SpineFile{integer<uint64_t>(spine.at("size")), hex64(spine.at("xxh3").get<std::string>())};
    bool rest = false;
    for (const auto& f : j.at("files")) {
      m.files.push_back({f.at("name").get<std::string>(), integer<uint64_t>(f.at("size"))});
      if (m.files.size() == 1) rest = f.contains("rest_xxh3");
      if (rest != f.contains("rest_xxh3")) fail("{}: files[{}]: rest_xxh3 on some files only", path, m.files.size() - 1);
      if (rest) m.rest_checksums.push_back(hex64(f.at("rest_xxh3").get<std::string>()));
    }
    if (j.contains("packs"))
      for (const auto& p : j.at("packs")) m.packs.push_back(p.get<std::string>());
    if (j.contains("expert_dirs")) {
      for (const auto& d : j.at("expert_dirs")) m.expert_dirs.push_back(d.get<std::string>());
      for (const auto& d : j.at("pack_dirs")) m.pack_dirs.push_back(integer<int32_t>(d));
      if (m.pack_dirs.size() != m.packs.size())
        fail("{}: {} pack_dirs entries for {} packs", path, m.pack_dirs.size(), m.packs.size());
      for (size_t p = 0; p < m.pack_dirs.size(); ++p)
        if (m.pack_dirs[p] < 0 || size_t(m.pack_dirs[p]) >= m.expert_dirs.size())
          fail("{}: pack_dirs[{}] is {}, but there are {} expert_dirs", path, p, m.pack_dirs[p], m.expert_dirs.size());
    }
    for (const auto& e : j.at("experts")) {
      ManifestExpert me;
      me.layer = integer<int32_t>(e.at(0));
      me.expert = integer<int32_t>(e.at(1));
      // Readers index tables by (layer, expert): a negative or absurd one must not get that far.
      if (me.layer < 0 || me.layer >= kMaxManifestLayers || me.expert < 0 || me.expert >= kMaxManifestExperts)
        fail("{}: experts[{}]: (layer {}, expert {}) is out of range (0..{}, 0..{})", path, m.experts.size(), me.layer,
             me.expert, kMaxManifestLayers - 1, kMaxManifestExperts - 1);
      for (const auto& x : e.at(2)) {
        me.extents.push_back({integer<int32_t>(x.at(0)), integer<uint64_t>(x.at(1)), integer<uint64_t>(x.at(2))});
        const auto& ex = me.extents.back();
        if (ex.file < 0 || size_t(ex.file) >= m.files.size())
          fail("{}: experts[{}]: extent in file {}, but there are {} files", path, m.experts.size(), ex.file,
               m.files.size());
        if (ex.offset + ex.length < ex.offset || ex.offset + ex.length > m.files[size_t(ex.file)].second)
          fail("{}: experts[{}]: extent [{}, +{}) runs past the end of {} ({} bytes)", path, m.experts.size(),
               ex.offset, ex.length, m.files[size_t(ex.file)].first, m.files[size_t(ex.file)].second);
      }
      me.checksum = hex64(e.at(3).get<std::string>());
      m.experts.push_back(std::move(me));
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: malformed manifest: {}", path, e.what());
  } catch (const std::invalid_argument&) {
    fail("{}: malformed checksum in manifest", path);
  } catch (const std::out_of_range&) {  // a checksum longer than 64 bits
    fail("{}: malformed checksum in manifest (out of range)", path);
  }
  return m;
}

std::string Manifest::pack_path(const std::string& model_dir, size_t p) const {
  const std::string& dir = pack_dirs.empty() ? model_dir : expert_dirs.at(size_t(pack_dirs.at(p)));
  return (std::filesystem::path(dir) / packs.at(p)).string();
}

std::string Manifest::file_path(const std::string& model_dir, size_t i) const {
  const std::string& name = files.at(i).first;
  if (!pack_dirs.empty())
    for (size_t p = 0; p < packs.size(); ++p)
      if (packs[p] == name) return pack_path(model_dir, p);
  return (std::filesystem::path(model_dir) / name).string();
}

std::vector<std::vector<uint64_t>> Manifest::checksum_table() const {
  std::vector<std::vector<uint64_t>> t;
  for (const auto& e : experts) {
    if (int32_t(t.size()) <= e.layer) t.resize(size_t(e.layer) + 1);
    auto& row = t[size_t(e.layer)];
    if (int32_t(row.size()) <= e.expert) row.resize(size_t(e.expert) + 1);
    row[size_t(e.expert)] = e.checksum;
  }
  return t;
}

std::optional<Manifest> find_manifest(const std::string& dir) {
  const auto p = std::filesystem::path(dir) / kManifestFile;
  if (!std::filesystem::exists(p)) return std::nullopt;
  return Manifest::load(p.string());
}

}  // namespace sluice
