#include "format/manifest.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace sluice {

void Manifest::save(const std::string& path) const {
  nlohmann::json j;
  j["version"] = version;
  j["spine"] = {{"file", kSpineFile}, {"format", spine_format}};
  j["files"] = nlohmann::json::array();
  for (const auto& [n, sz] : files) j["files"].push_back({{"name", n}, {"size", sz}});
  j["packs"] = packs;
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
    m.version = j.at("version").get<int>();
    if (m.version != 1) fail("{}: manifest version {} is not supported", path, m.version);
    m.spine_format = j.at("spine").at("format").get<std::string>();
    for (const auto& f : j.at("files")) m.files.push_back({f.at("name").get<std::string>(), f.at("size").get<uint64_t>()});
    if (j.contains("packs"))
      for (const auto& p : j.at("packs")) m.packs.push_back(p.get<std::string>());
    for (const auto& e : j.at("experts")) {
      ManifestExpert me;
      me.layer = e.at(0).get<int32_t>();
      me.expert = e.at(1).get<int32_t>();
      for (const auto& x : e.at(2)) me.extents.push_back({x.at(0).get<int32_t>(), x.at(1).get<uint64_t>(), x.at(2).get<uint64_t>()});
      me.checksum = std::stoull(e.at(3).get<std::string>(), nullptr, 16);
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
