// kvtorture: torture runs against a real kvstreamd. `crash` kills it with SIGKILL under load and
// checks a ledger of acknowledged versions after every restart; `stall` and `slow` make a tier
// stop answering or turn slow in the middle of reads (through a hook command) and check that the
// steps go on without it. Each is bounded by its options: tests/run.sh runs short versions,
// tests/torture/*.sh take flags for long ones.
#include <CLI/CLI.hpp>

#include "crash.h"
#include "kvstream/policies.h"
#include "restart.h"
#include "stall.h"

int main(int argc, char** argv) {
  CLI::App app{"kvtorture: kill -9 cycles, stalled and slow tiers against a real kvstreamd"};
  app.require_subcommand(1);

  kvtorture::CrashOptions crash;
  auto* c = app.add_subcommand("crash", "kill -9 cycles (and power cuts) under load with a ledger of acknowledged versions");
  c->add_option("--daemon", crash.daemon, "the kvstreamd binary")->required();
  c->add_option("--config", crash.config, "its YAML configuration")->required();
  c->add_option("--socket", crash.socket, "the control socket that configuration names")->required();
  c->add_option("--log", crash.log, "the daemon's stderr is appended here")->capture_default_str();
  c->add_option("--cycles", crash.cycles, "kill -9 cycles")->capture_default_str();
  c->add_option("--keys", crash.keys, "keys rewritten by the writers")->capture_default_str();
  c->add_option("--writers", crash.writers, "writer sessions (each owns its keys)")->capture_default_str();
  c->add_option("--readers", crash.readers, "reader sessions checking every chunk they get")->capture_default_str();
  c->add_option("--min-seconds", crash.min_seconds, "shortest load before a kill")->capture_default_str();
  c->add_option("--max-seconds", crash.max_seconds, "longest load before a kill")->capture_default_str();
  c->add_option("--seed", crash.seed, "random seed")->capture_default_str();
  c->add_option("--cut-command", crash.cut_command, "shell command cutting the power after each kill (kvfaultfs)");
  c->add_option("--power-on-command", crash.power_on_command, "shell command bringing the power back");
  c->add_option("--sync-command", crash.sync_command, "shell command making everything durable (a sync point)");
  c->add_option("--sync-seconds", crash.sync_seconds, "seconds between sync points")->capture_default_str();
  c->add_flag("--synced-floor", crash.synced_floor,
              "fsync: none: a power cut may take back what was acknowledged since the last sync point");

  kvtorture::StallOptions stall;
  std::string chunk_text = "4MiB";
  auto* s = app.add_subcommand("stall", "a tier stops answering mid-step: the step must go on without it");
  auto* slow = app.add_subcommand("slow", "a tier turns very slow: steps must stay near the other tier alone");
  for (CLI::App* sub : {s, slow}) {
    sub->add_option("--socket", stall.socket, "kvstreamd's control socket")->required();
    sub->add_option("--chunks", stall.chunks, "chunks per step")->capture_default_str();
    sub->add_option("--chunk-size", chunk_text, "bytes per chunk")->capture_default_str();
    sub->add_option("--hook", stall.hook, "shell command that makes the tier misbehave");
  }
  s->add_option("--hook-after-ms", stall.hook_after_ms, "when the hook runs, into the step")->capture_default_str();
  s->add_option("--undo", stall.undo, "shell command ending the misbehaviour if the step hangs (then the run fails)");
  s->add_option("--expect-stalled", stall.expect_stalled, "tier health must name stalled");
  s->add_option("--step-limit", stall.step_limit_s, "seconds the step may take")->capture_default_str();
  s->add_option("--health-limit", stall.health_limit_s, "seconds until health names the tier")->capture_default_str();
  s->add_option("--persist-limit", stall.persist_limit_s, "seconds a concurrent persist may take")->capture_default_str();
  slow->add_option("--steps", stall.steps, "steps measured alone and then with the slow tier")->capture_default_str();
  slow->add_option("--ratio-limit", stall.ratio_limit, "largest step time / the first tier alone")->capture_default_str();
  kvtorture::FillOptions fill;
  std::string fill_size = "4KiB";
  auto* f = app.add_subcommand("fill", "write valid chunk files straight into tier directories");
  f->add_option("dirs", fill.dirs, "tier directories")->required();
  f->add_option("--chunks", fill.chunks, "chunk files per directory")->capture_default_str();
  f->add_option("--chunk-size", fill_size, "payload bytes per chunk")->capture_default_str();
  kvtorture::RestartOptions restart;
  auto* r = app.add_subcommand("restart", "time kvstreamd from start to serving: every header read, then from "
                                          "the index saved at a clean shutdown");
  r->add_option("--daemon", restart.daemon, "the kvstreamd binary")->required();
  r->add_option("--config", restart.config, "its YAML configuration")->required();
  r->add_option("--socket", restart.socket, "the control socket that configuration names")->required();
  r->add_option("--log", restart.log, "the daemon's stderr is appended here")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  if (c->parsed()) return kvtorture::RunCrash(crash);
  if (r->parsed()) return kvtorture::RunRestart(restart);
  if (f->parsed()) {
    auto size = kvstream::ParseBytes(fill_size);
    if (!size.ok() || *size == 0) {
      std::fprintf(stderr, "kvtorture: --chunk-size: not a size\n");
      return 2;
    }
    fill.chunk_bytes = *size;
    return kvtorture::RunFill(fill);
  }
  auto bytes = kvstream::ParseBytes(chunk_text);
  if (!bytes.ok() || *bytes < 16) {
    std::fprintf(stderr, "kvtorture: --chunk-size: not a size of at least 16 bytes\n");
    return 2;
  }
  stall.chunk_bytes = *bytes;
  return s->parsed() ? kvtorture::RunStall(stall) : kvtorture::RunSlow(stall);
}
