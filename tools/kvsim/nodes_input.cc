#include "nodes_input.h"

#include <cctype>
#include <cstdlib>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"

namespace kvsim {
namespace {

// Lower case, without white space ("300 MB/s" -> "300mb/s").
std::string Normalized(std::string_view text) {
  std::string t;
  for (char ch : text) {
    if (!std::isspace(static_cast<unsigned char>(ch))) t += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  return t;
}

}  // namespace

absl::StatusOr<double> ParseRate(std::string_view text) {
  std::string t = Normalized(text);
  if (t.size() > 2 && t.compare(t.size() - 2, 2, "/s") == 0) t.resize(t.size() - 2);
  const auto bad = [&] { return absl::InvalidArgumentError(absl::StrCat("'", std::string(text), "' is not a bandwidth (e.g. 3e8, 300MB, 2.5GiB/s)")); };
  if (t.empty() || !(std::isdigit(static_cast<unsigned char>(t[0])) || t[0] == '.')) return bad();
  char* end = nullptr;
  const double value = std::strtod(t.c_str(), &end);
  const std::string unit(end);
  double scale = 0;
  if (unit.empty() || unit == "b") scale = 1;
  const char* prefixes = "kmgt";
  for (int p = 0; p < 4; ++p) {
    const std::string u(1, prefixes[p]);
    if (unit == u || unit == u + "b") scale = std::pow(1e3, p + 1);
    if (unit == u + "ib") scale = std::pow(1024.0, p + 1);
  }
  const double rate = value * scale;
  if (scale == 0 || !std::isfinite(rate) || rate <= 0) return bad();
  return rate;
}

absl::StatusOr<std::vector<double>> ParseRates(std::string_view text) {
  std::vector<double> out;
  size_t from = 0;
  while (true) {
    const size_t comma = text.find(',', from);
    auto r = ParseRate(text.substr(from, comma == std::string_view::npos ? std::string_view::npos : comma - from));
    if (!r.ok()) return r.status();
    out.push_back(*r);
    if (comma == std::string_view::npos) return out;
    from = comma + 1;
  }
}

absl::StatusOr<NodesFile> LoadNodesFile(const std::string& path, const Cluster& defaults) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open " + path);
  NodesFile f;
  f.cluster = defaults;
  f.cluster.nodes.clear();
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    f.cluster.pfs_bps = j.at("pfs_bps").get<double>();
    f.cluster.pfs_node_cap_bps = j.value("pfs_node_cap_bps", defaults.pfs_node_cap_bps);
    f.cluster.block_bytes = j.value("block_bytes", defaults.block_bytes);
    f.cluster.queue_depth = j.value("queue_depth", defaults.queue_depth);
    f.cluster.seed = j.value("seed", defaults.seed);
    f.cluster.window_s = j.value("window_s", defaults.window_s);
    f.cluster.takeover = j.value("takeover", defaults.takeover);
    if (j.contains("gaps")) {
      const std::string g = j.at("gaps");
      if (g != "fixed" && g != "exponential") return absl::InvalidArgumentError(path + ": gaps is fixed or exponential");
      f.cluster.gaps = g == "fixed" ? GapDistribution::kFixed : GapDistribution::kExponential;
    }
    for (const auto& n : j.at("nodes")) {
      NodeLoad load{n.at("nvme_bps").get<double>(), n.at("step_bytes").get<double>(), n.value("gap_s", 0.0)};
      MeasuredNode m;
      m.name = n.value("node", absl::StrCat("n", f.measured.size()));
      m.pfs_share = n.at("pfs_share").get<double>();
      if (n.contains("step_s")) m.step_s = n.at("step_s").get<double>();
      if (!(load.nvme_bps > 0) || !(load.step_bytes > 0) || !(load.gap_s >= 0) || !(m.pfs_share >= 0 && m.pfs_share <= 1)) {
        return absl::InvalidArgumentError(path + ": node " + m.name +
                                          " needs nvme_bps > 0, step_bytes > 0, gap_s >= 0 and pfs_share in [0, 1]");
      }
      f.cluster.nodes.push_back(load);
      f.measured.push_back(m);
    }
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(path + ": " + e.what());
  }
  if (f.cluster.nodes.empty()) return absl::InvalidArgumentError(path + ": no nodes");
  if (!(f.cluster.pfs_bps >= 0) || !(f.cluster.block_bytes > 0) || f.cluster.queue_depth == 0 ||
      !(f.cluster.pfs_node_cap_bps >= 0)) {
    return absl::InvalidArgumentError(path + ": pfs_bps >= 0, block_bytes > 0, queue_depth > 0 and pfs_node_cap_bps >= 0");
  }
  return f;
}

}  // namespace kvsim
