// kvsim: trace-driven simulator of a serving node reading prefix KV through KVStream. This file is
// the command line; each mode lives in its own file: --trace in serving_mode.h, --validate in
// validate_mode.h, --nodes and --validate-nodes in nodes_mode.h, --drives in drives_mode.h.
#include <CLI/CLI.hpp>

#include <iostream>
#include <string>

#include "drives_mode.h"
#include "nodes_mode.h"
#include "serving_mode.h"
#include "validate_mode.h"

namespace kvsim {
namespace {

// What the command line gives the modes. --queue-depth, --seed and --json are fields of the
// serving mode's options that the nodes modes read too.
struct CommandLine {
  ServingOptions serving;     // --trace and the serving node
  std::string validate_path;  // --validate
  NodesOptions nodes;         // --nodes, --validate-nodes
  DrivesOptions drives;       // --drives
};

// The serving mode's options and --validate, in --help's order.
void AddServingOptions(CLI::App& app, CommandLine& cl) {
  ServingOptions& s = cl.serving;
  auto* trace = app.add_option("--trace", s.trace_path, "request trace (JSON lines: timestamp ms, input_length, output_length, hash_ids)")
      ->check(CLI::ExistingFile);
  app.add_option("--synthetic", s.synthetic,
                 "instead of --trace, a generated workload: long-doc[:<docs>[:<reads>]] (default 32 documents of "
                 "32k-128k tokens, each read by 8 requests with a short unique suffix, Poisson arrivals at 0.1/s "
                 "before --rate or --load; --seed applies)")
      ->excludes(trace);
  app.add_option("--requests", s.requests, "replay only the first N requests (after --order; 0: all)")->capture_default_str();
  app.add_option("--validate", cl.validate_path,
                 "instead of simulating: predict the per-policy retrieval times measured in a kvcore_bench or kvbench --json file")
      ->check(CLI::ExistingFile);
  app.add_option("--model", s.profile_name, "model profile: 8B | 14B | 32B | 70B | 110B (KV bytes/token, forward time, shape)")->capture_default_str();
  app.add_option("--memory", s.memory_text, "GPU + host KV capacity in front of storage (e.g. 64GiB)")->capture_default_str();
  app.add_option("--bw", s.bw_text, "read bandwidth per tier in bytes/s, comma-separated (tier 0 first; default: 4 NVMe drives and a PFS link)")->capture_default_str();
  app.add_option("--write-bw", s.write_bw_text, "write bandwidth per tier in bytes/s, comma-separated (default: as fast as each reads)");
  app.add_option("--replication", s.replication,
                 "where new KV is written, comma-separated to compare: all (every tier) | primary (tier 0 only) | "
                 "fraction:<f> (every tier for a share f of the blocks) | idle (tier 0, copies for the others only from "
                 "their idle write bandwidth, dropped oldest first instead of stalling) | reuse (tier 0, and a block read "
                 "back from tier 0 alone is copied to the others) | adaptive (idle and reuse)")
      ->capture_default_str();
  app.add_option("--schedule", s.schedule, "bandwidth over time: constant | periodic:<period_s>:<amplitude> (swings the last tier) | replay:<file> (step records as JSON, e.g. kvcore_bench --json, or one line of bytes/s per tier per step)");
  auto* rate = app.add_option("--rate", s.rate, "arrival-rate scale (2 = twice as fast)")->capture_default_str();
  app.add_option("--load", s.load,
                 "instead of --rate, the arrival-rate scale at which recomputing every prompt in full would keep the "
                 "node's prefill busy this fraction of the time (e.g. 0.5)")
      ->excludes(rate);
  app.add_option("--order", s.order_text, "arrival order: recorded | round-robin | random (sessions interleaved)")->capture_default_str();
  app.add_option("--seed", s.seed, "seed for --order random and --nodes gaps")->capture_default_str();
  app.add_option("--policies", s.policies_text,
                 "comma-separated: recompute, serial, fastest, static:<g>, completion, verdict (completion routing; "
                 "each request loads the prefix of its storage hit that gets its first token soonest by the daemon's "
                 "load estimate and the model's prefill cost, and computes the rest; new KV that staging cannot take "
                 "is dropped, earliest prefix blocks kept, never waited for)")
      ->capture_default_str();
  app.add_flag("--overlap", s.node.overlap,
               "loads overlap forward passes, for every policy (an engine loading KV asynchronously): a request waits "
               "for its own load while the others compute; default: each step's loads are its T_ret");
  app.add_option("--attention", s.attention_text,
                 "prefill pays attention's quadratic term (4 x layers x heads x head_dim flops per causal token pair): "
                 "on | off")
      ->capture_default_str();
  app.add_option("--staging", s.staging_text, "staging memory for deferred writes; beyond it a step waits for writes (verdict drops new KV instead)")->capture_default_str();
  app.add_option("--token-budget", s.node.token_budget, "tokens per step")->capture_default_str();
  app.add_option("--max-running", s.node.max_running, "requests admitted at once")->capture_default_str();
  app.add_option("--queue-depth", s.node.queue_depth, "blocks in flight per tier (completion)")->capture_default_str();
  app.add_option("--slo", s.slo_text, "TTFT deadlines in seconds, comma-separated")->capture_default_str();
  app.add_option("--json", s.json_path,
                 "write the full results as JSON here (--nodes: per node and aggregate; the gap across static:g when a "
                 "static policy runs)");
  app.add_option("--plot-dir", s.plot_dir, "write TTFT CDF and gap-vs-g PNG plots (gnuplot) into this directory");
}

// The multi-node options (nodes.h), a group of their own in --help: bandwidths are bytes/s or a
// number with a unit, decimal for B (300MB = 3e8 B/s) and binary for iB (300MiB); sizes take
// binary units as --memory does.
void AddNodesOptions(CLI::App& app, NodesOptions& o) {
  auto* nodes_group = app.add_option_group(
      "Many nodes, one PFS",
      "Instead of a trace: N nodes, each reading its steps by completion routing from its own NVMe and one parallel "
      "file system that all share (fairly among the nodes reading it at that instant), with no coordination. "
      "Prints per node its step time, the bound D/(nvme + its PFS share), the PFS share of its bytes, and the "
      "aggregate against every node reading its NVMe alone. Bandwidths: bytes/s (3e8) or with a unit, decimal for B "
      "(300MB = 3e8) and binary for iB (300MiB); a list takes one value for all nodes or one per node. "
      "--json, --queue-depth and --seed apply.");
  nodes_group->add_option("--nodes", o.nodes, "number of nodes sharing the PFS (runs the multi-node model)");
  nodes_group->add_option("--nvme-bw", o.nvme_bw, "each node's NVMe read bandwidth (list)")->capture_default_str();
  nodes_group->add_option("--pfs-bw", o.pfs_bw, "the PFS's total read bandwidth, shared by all nodes")->capture_default_str();
  nodes_group->add_option("--pfs-node-cap", o.pfs_node_cap, "most one node takes from the PFS (its link; default: no cap)");
  nodes_group->add_option("--step-bytes", o.step_bytes, "bytes each step reads (list; e.g. 256MiB)")->capture_default_str();
  nodes_group->add_option("--node-load", o.load,
                          "per node, the fraction of time in (0,1] it reads with the PFS to itself: its gap between "
                          "steps is solo step time x (1/load - 1); 1 = back to back (list; default 1)");
  nodes_group->add_option("--node-gap", o.gap, "instead of --node-load: mean seconds between a step's end and the next step (list)")
      ->excludes("--node-load");
  nodes_group->add_option("--gaps", o.gaps, "gap distribution: exponential (independent nodes, --seed) | fixed")
      ->check(CLI::IsMember({"exponential", "fixed"}))
      ->capture_default_str();
  nodes_group->add_option("--window", o.window_s, "simulated seconds (default: 200 solo cycles of the slowest node)");
  nodes_group->add_flag("--no-takeover", o.no_takeover,
                        "no end-of-step handling: the PFS claims to the last block and the NVMe never takes over a PFS "
                        "straggler (one node is then exactly the two-tier completion model; the daemon does both)");
  nodes_group->add_option("--validate-nodes", o.validate_path,
                          "predict the per-node PFS shares measured in this JSON and say whether each is within 5 "
                          "points (exit 1 if not): {\"pfs_bps\": B, \"nodes\": [{\"node\": \"n0\", \"nvme_bps\": b, "
                          "\"step_bytes\": D, \"gap_s\": g, \"pfs_share\": 0.31, \"step_s\": t (optional)}, ...]}, "
                          "optional \"pfs_node_cap_bps\", \"block_bytes\", \"queue_depth\", \"gaps\", \"seed\", "
                          "\"window_s\", \"takeover\" (else the command line's); kvsim --nodes --json writes this format")
      ->check(CLI::ExistingFile);
}

// The options of a tier over several drives (drives_mode.h), a group of their own.
void AddDrivesOptions(CLI::App& app, DrivesOptions& o) {
  auto* g = app.add_option_group(
      "A tier over several drives",
      "Instead of a trace: steps read by completion routing from a tier over N drives (each chunk on one drive) "
      "and a tier holding every chunk (a PFS under replication all), with chunks placed on the drives in turn "
      "(as the daemon does) or by hash. Prints time over the bound D/(sum of all) per placement, and the speed "
      "against a tier on one drive with the other tier. --queue-depth and --seed apply.");
  g->add_option("--drives", o.drives, "drives in the tier (runs this model)");
  g->add_option("--drive-bw", o.drive_bw, "each drive's read bandwidth (bytes/s or with a unit)")->capture_default_str();
  g->add_option("--replica-bw", o.replica_bw, "the tier holding every chunk (e.g. the PFS); 0: none")->capture_default_str();
  g->add_option("--drive-step", o.step_bytes, "bytes per step")->capture_default_str();
  g->add_option("--drive-chunk", o.chunk_bytes, "bytes per chunk (whole MiB)")->capture_default_str();
  g->add_option("--drive-requests", o.requests, "requests (prefixes) per step")->capture_default_str();
  g->add_option("--drive-steps", o.steps, "steps simulated per placement")->capture_default_str();
}

int Main(int argc, char** argv) {
  CLI::App app{"kvsim: trace-driven simulator of a serving node whose prefix KV beyond GPU+host memory "
               "comes back from storage tiers; prints per-policy throughput, TTFT and retrieval gap"};
  CommandLine cl;
  AddServingOptions(app, cl);
  AddNodesOptions(app, cl.nodes);
  AddDrivesOptions(app, cl.drives);
  CLI11_PARSE(app, argc, argv);

  const ServingOptions& s = cl.serving;
  if (!cl.validate_path.empty()) return Validate(cl.validate_path, s.node.chunk_latency_s);
  if (!cl.nodes.validate_path.empty()) return ValidateNodes(cl.nodes, s.node.queue_depth, s.seed, s.json_path);
  if (cl.nodes.nodes > 0) return RunNodes(cl.nodes, s.node.queue_depth, s.seed, s.json_path);
  if (cl.drives.drives > 0) return RunDrives(cl.drives, s.node.queue_depth, s.seed);
  if (s.trace_path.empty() && s.synthetic.empty()) {
    std::cerr << "kvsim: --trace or --synthetic is required (or --validate, --nodes, --validate-nodes, --drives)\n";
    return 2;
  }
  return RunServing(s);
}

}  // namespace
}  // namespace kvsim

int main(int argc, char** argv) { return kvsim::Main(argc, argv); }
