#include "trace.h"

#include <algorithm>
#include <deque>
#include <fstream>
#include <map>
#include <random>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace kvsim {

absl::StatusOr<std::vector<Request>> LoadTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot open trace " + path);
  std::vector<Request> out;
  std::string line;
  size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      Request r;
      r.arrival_s = j.at("timestamp").get<double>() / 1000.0;
      r.input_tokens = j.at("input_length").get<uint32_t>();
      r.output_tokens = j.at("output_length").get<uint32_t>();
      r.blocks = j.at("hash_ids").get<std::vector<uint64_t>>();
      // The first block is often a shared system prompt; the conversation is named by the next.
      r.session = r.blocks.size() > 1 ? r.blocks[1] : (r.blocks.empty() ? number : r.blocks[0]);
      if (r.input_tokens == 0) throw std::runtime_error("input_length is 0");
      out.push_back(std::move(r));
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(path + ":" + std::to_string(number) + ": " + e.what());
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
  return out;
}

absl::StatusOr<ArrivalOrder> ParseArrivalOrder(const std::string& text) {
  if (text == "recorded") return ArrivalOrder::kRecorded;
  if (text == "round-robin") return ArrivalOrder::kSessionsRoundRobin;
  if (text == "random") return ArrivalOrder::kSessionsRandom;
  return absl::InvalidArgumentError("arrival order '" + text + "' is not one of recorded, round-robin, random");
}

absl::StatusOr<LongDocOptions> ParseSynthetic(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, ':');
  LongDocOptions o;
  bool ok = parts[0] == "long-doc" && parts.size() <= 3;
  if (ok && parts.size() > 1) ok = absl::SimpleAtoi(parts[1], &o.docs) && o.docs > 0 && o.docs < (1u << 20);
  if (ok && parts.size() > 2) ok = absl::SimpleAtoi(parts[2], &o.reads) && o.reads > 0 && o.reads < (1u << 20);
  if (!ok) return absl::InvalidArgumentError("synthetic workload '" + text + "' is not long-doc[:<docs>[:<reads>]]");
  return o;
}

std::vector<Request> LongDocTrace(const LongDocOptions& o, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto uniform = [&](uint32_t lo, uint32_t hi) { return std::uniform_int_distribution<uint32_t>(lo, hi)(rng); };
  std::vector<uint32_t> doc_blocks(o.docs);
  for (uint32_t& b : doc_blocks) b = uniform(o.min_tokens / kTraceBlockTokens, o.max_tokens / kTraceBlockTokens);
  std::vector<uint32_t> order;
  for (uint32_t d = 0; d < o.docs; ++d) order.insert(order.end(), o.reads, d);
  std::shuffle(order.begin(), order.end(), rng);
  std::exponential_distribution<double> gap(o.rate_rps);
  std::vector<Request> out;
  double t = 0;
  for (size_t j = 0; j < order.size(); ++j) {
    const uint32_t d = order[j];
    Request r;
    r.arrival_s = t;
    t += gap(rng);
    for (uint64_t i = 0; i < doc_blocks[d]; ++i) r.blocks.push_back((uint64_t{d} + 1) << 32 | i);
    r.blocks.push_back(uint64_t{1} << 62 | j);
    r.input_tokens = doc_blocks[d] * kTraceBlockTokens + uniform(o.min_suffix, o.max_suffix);
    r.output_tokens = uniform(o.min_output, o.max_output);
    r.session = d;
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<Request> Arrange(std::vector<Request> trace, double rate, ArrivalOrder order, uint64_t seed) {
  std::vector<double> times;
  for (const Request& r : trace) times.push_back(r.arrival_s / rate);
  if (order != ArrivalOrder::kRecorded) {
    std::map<uint64_t, std::deque<Request>> sessions;
    std::vector<uint64_t> first_seen;
    for (Request& r : trace) {
      auto& q = sessions[r.session];
      if (q.empty()) first_seen.push_back(r.session);
      q.push_back(std::move(r));
    }
    trace.clear();
    if (order == ArrivalOrder::kSessionsRoundRobin) {
      while (!first_seen.empty()) {
        std::vector<uint64_t> still;
        for (uint64_t s : first_seen) {
          auto& q = sessions[s];
          trace.push_back(std::move(q.front()));
          q.pop_front();
          if (!q.empty()) still.push_back(s);
        }
        first_seen.swap(still);
      }
    } else {
      // Random interleaving: draw a session with probability proportional to what it has left.
      std::mt19937_64 rng(seed);
      std::vector<uint64_t> tickets;
      for (auto& [s, q] : sessions) tickets.insert(tickets.end(), q.size(), s);
      std::shuffle(tickets.begin(), tickets.end(), rng);
      for (uint64_t s : tickets) {
        trace.push_back(std::move(sessions[s].front()));
        sessions[s].pop_front();
      }
    }
  }
  for (size_t i = 0; i < trace.size(); ++i) trace[i].arrival_s = times[i];
  return trace;
}

}  // namespace kvsim
