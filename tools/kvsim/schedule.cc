#include "schedule.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace kvsim {

std::vector<double> ParseList(const std::string& text) {
  std::vector<double> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(std::stod(item));
  return out;
}

absl::StatusOr<std::vector<std::vector<double>>> LoadReplay(const std::string& path, size_t tiers) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open " + path);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  std::vector<std::vector<double>> rows;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '[')) {
    try {
      nlohmann::json j = nlohmann::json::parse(text);
      nlohmann::json steps = j;
      if (j.is_object()) {
        for (const auto& p : j.at("policies")) {
          if (p.at("policy") == "completion") steps = p.at("steps");
        }
        if (steps.is_object()) return absl::InvalidArgumentError(path + ": no \"completion\" policy with steps");
      }
      for (const auto& step : steps) {
        std::vector<double> row;
        for (const auto& t : step.at("tiers")) row.push_back(t.at("bandwidth_bps").get<double>());
        rows.push_back(std::move(row));
      }
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(path + ": " + e.what());
    }
  } else {
    std::stringstream lines(text);
    std::string line;
    while (std::getline(lines, line)) {
      std::stringstream ss(line);
      std::vector<double> row;
      double v;
      while (ss >> v) row.push_back(v);
      if (!row.empty()) rows.push_back(std::move(row));
    }
  }
  if (rows.empty()) return absl::InvalidArgumentError(path + ": no steps");
  for (const auto& row : rows) {
    if (row.size() != tiers || std::any_of(row.begin(), row.end(), [](double b) { return !(b > 0); })) {
      return absl::InvalidArgumentError(path + ": every step needs a positive bandwidth per tier (" +
                                        std::to_string(tiers) + " tiers, as in --bw)");
    }
  }
  return rows;
}

absl::StatusOr<BandwidthSchedule> MakeSchedule(const std::vector<double>& base, const std::string& schedule) {
  if (schedule.empty() || schedule == "constant") {
    return BandwidthSchedule([base](uint64_t, double) { return base; });
  }
  if (schedule.rfind("periodic:", 0) == 0) {
    std::string args = schedule.substr(9);
    std::replace(args.begin(), args.end(), ':', ',');
    std::vector<double> parts;
    try {
      parts = ParseList(args);
    } catch (const std::exception&) {
    }
    if (parts.size() != 2 || parts[0] <= 0 || parts[1] < 0 || parts[1] >= 1) {
      return absl::InvalidArgumentError("periodic schedule is periodic:<period_s>:<amplitude in [0,1)>");
    }
    const double period = parts[0], amp = parts[1];
    return BandwidthSchedule([base, period, amp](uint64_t, double now) {
      std::vector<double> b = base;
      b.back() *= 1 + amp * std::sin(2 * M_PI * now / period);
      return b;
    });
  }
  if (schedule.rfind("replay:", 0) == 0) {
    auto rows = LoadReplay(schedule.substr(7), base.size());
    if (!rows.ok()) return rows.status();
    return BandwidthSchedule([rows = *rows](uint64_t step, double) { return rows[step % rows.size()]; });
  }
  return absl::InvalidArgumentError("schedule is constant, periodic:<period_s>:<amplitude> or replay:<file>");
}

}  // namespace kvsim
