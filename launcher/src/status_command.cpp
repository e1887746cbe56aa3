#include "status_command.hpp"

#include <algorithm>
#include <ctime>
#include <iostream>
#include <map>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include "ddprun/agent/failure_json.hpp"
#include "ddprun/agent/signals.hpp"
#include "ddprun/store/errors.hpp"
#include "launch_config.hpp"
#include "option_values.hpp"
#include "rendezvous_options.hpp"

namespace ddprun::launcher {
namespace {

// How long `ddprun status` waits for a store that does not answer, unless --rdzv_conf
// join_timeout says otherwise.
constexpr std::chrono::seconds kStatusWait{10};

// The earliest failure of the latest failed round, every node's records together.
std::optional<agent::WorkerFailure> root_cause(const rendezvous::JobStatus& s) {
  std::optional<agent::WorkerFailure> first;
  for (const auto& record : s.last_failures) {
    for (auto& f : agent::failures_from_json(record)) {
      if (!first || f.time < first->time) first = std::move(f);
    }
  }
  return first;
}

// "exit code 1: <the worker's error message>" / "killed by SIGKILL".
std::string what_happened(const agent::WorkerFailure& f) {
  std::string out = f.exitcode >= 0 ? fmt::format("exit code {}", f.exitcode)
                                    : fmt::format("killed by {}", agent::signal_name(-f.exitcode));
  if (f.error && !f.error->message.empty()) out += ": " + f.error->message;
  return out;
}

int64_t ms_of(std::chrono::system_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
}

std::string local_time(int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  ::localtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

nlohmann::json node_json(const rendezvous::NodeStatus& n) {
  nlohmann::json j = {{"id", n.id}, {"host", n.host}, {"nproc", n.nproc}, {"present", n.present}};
  if (n.node_rank >= 0) {
    j["node_rank"] = n.node_rank;
    j["ranks"] = {n.first_rank, n.last_rank};
  }
  j["since_ms"] = n.since_ms ? nlohmann::json(*n.since_ms) : nlohmann::json(nullptr);
  const auto checkpoints = nlohmann::json::parse(n.checkpoints, nullptr, false);
  j["checkpoints"] = checkpoints.is_object() ? checkpoints : nlohmann::json(nullptr);
  const auto restart = nlohmann::json::parse(n.last_restart, nullptr, false);
  j["last_restart"] = restart.is_object() ? restart : nlohmann::json(nullptr);
  return j;
}

// A duration as people read it: "0.4 ms", "120 ms", "2.31 s".
std::string duration_text(double seconds) {
  if (seconds < 0.01) return fmt::format("{:.1f} ms", seconds * 1e3);
  if (seconds < 1) return fmt::format("{:.0f} ms", seconds * 1e3);
  return fmt::format("{:.2f} s", seconds);
}

// A node's checkpoints in one line: each rank's newest step in memory (ranks at the same step
// together) with the slowest save among them, the bytes held, the newest step persisted; "" when
// its agent said nothing (a job without checkpoints, or an agent that has not saved yet).
std::string checkpoints_line(const std::string& account) {
  const auto a = nlohmann::json::parse(account, nullptr, false);
  if (!a.is_object() || !a.contains("ranks") || !a["ranks"].is_array()) return "";
  std::map<std::string, std::pair<std::vector<int>, double>> by_step;  // step -> ranks, save time
  for (const auto& r : a["ranks"]) {
    if (!r.is_object()) continue;
    const std::string step = r.contains("step") && r["step"].is_number_integer()
                                 ? std::to_string(r["step"].get<int64_t>())
                                 : "none";
    auto& [ranks, slowest] = by_step[step];
    ranks.push_back(r.value("rank", -1));
    slowest = std::max(slowest, r.value("save_seconds", 0.0));
  }
  std::vector<std::string> parts;
  for (const auto& [step, v] : by_step) {
    parts.push_back(fmt::format("step {} on rank{} {} (save {})", step,
                                v.first.size() > 1 ? "s" : "", fmt::join(v.first, ","),
                                duration_text(v.second)));
  }
  std::string line = fmt::format("checkpoints: {}; {:.1f} MiB in memory", fmt::join(parts, "; "),
                                 a.value("bytes", 0.0) / (1 << 20));
  if (a.contains("memory") && a["memory"].is_object()) {
    const auto& m = a["memory"];
    const auto mib = [&m](const char* part) { return m.value(part, 0.0) / (1 << 20); };
    line += fmt::format(
        " (the node's checkpoints {:.1f} MiB{}: regions {:.1f}, kept for peers {:.1f}, held for "
        "peers {:.1f}, restore {:.1f}, staging {:.1f})",
        mib("total"),
        m.contains("limit") && m["limit"].is_number()
            ? fmt::format(" of a {:.1f} MiB budget", m["limit"].get<double>() / (1 << 20))
            : std::string(),
        mib("regions"), mib("kept"), mib("peers"), mib("restore"), mib("staging"));
  }
  if (a.contains("persisted") && a["persisted"].is_object()) {
    line +=
        fmt::format("; step {} persisted (copied in {})", a["persisted"].value("step", int64_t{-1}),
                    duration_text(a["persisted"].value("seconds", 0.0)));
  }
  if (a.contains("replica") && a["replica"].is_object()) {
    const auto& r = a["replica"];
    if (r.contains("safe_step") && r["safe_step"].is_number_integer()) {
      line +=
          fmt::format("; safe up to step {} (copied to {}, {} step(s) behind, every {} step(s))",
                      r["safe_step"].get<int64_t>(), r.value("peer", "?"), r.value("lag", 0),
                      r.value("stride", 1));
    } else {
      line += fmt::format("; nothing copied to {} yet", r.value("peer", "?"));
    }
    if (r.value("behind", false)) line += " (BEHIND: the safe step is not advancing)";
    if (r.contains("asks_to_keep") && r["asks_to_keep"].is_number_integer()) {
      line += fmt::format("; asks every node to keep step {}", r["asks_to_keep"].get<int64_t>());
    }
    if (r.contains("kept_for_others") && r["kept_for_others"].is_array() &&
        !r["kept_for_others"].empty()) {
      line += fmt::format("; the round's nodes ask to keep step(s) {} (copies behind)",
                          r["kept_for_others"].dump());
    }
    if (r.contains("holds") && r["holds"].is_object()) {
      std::vector<std::string> held;
      for (const auto& [origin, steps] : r["holds"].items()) {
        held.push_back(fmt::format("node {} (step {})", origin, steps.dump()));
      }
      if (!held.empty()) line += fmt::format("; holds copies of {}", fmt::join(held, ", "));
    }
  }
  if (a.contains("restored") && a["restored"].is_object()) {
    const auto& r = a["restored"];
    std::vector<std::string> from;
    for (const auto& rank : r.value("ranks", nlohmann::json::array())) {
      from.push_back(fmt::format("rank {} from {}", rank.value("rank", -1),
                                 rank.value("from", std::string("?"))));
    }
    line += fmt::format("; restored step {}{}{}", r.value("step", int64_t{-1}),
                        r.value("reshard", false) ? fmt::format(" resharded from {} ranks",
                                                                r.value("saved_world_size", 0))
                                                  : "",
                        from.empty() ? fmt::format(" from {}", r.value("from", std::string("?")))
                                     : fmt::format(" ({})", fmt::join(from, ", ")));
  }
  return line;
}

// The latest node check in one line: which nodes it kept out and why, or that none.
std::string node_check_line(const std::string& verdict) {
  const auto v = nlohmann::json::parse(verdict, nullptr, false);
  if (!v.is_object() || !v.contains("slow") || !v["slow"].is_array()) return "";
  const auto members = v.value("members", std::vector<std::string>());
  std::vector<std::string> out;
  for (const auto& s : v["slow"]) {
    if (!s.is_object()) continue;
    const int rank = s.value("node_rank", -1);
    const std::string node = rank >= 0 && rank < static_cast<int>(members.size())
                                 ? members[static_cast<size_t>(rank)]
                                 : std::to_string(rank);
    const double ratio = s.value("ratio", 0.0);
    out.push_back(fmt::format("node {} kept out ({}{})", node, s.value("probe", "?"),
                              ratio > 0 ? fmt::format(" {:.2f}x the median", ratio) : ""));
  }
  return fmt::format(
      "node check of round {} ({} nodes, --node_check_factor {:g}): {}", v.value("round", -1),
      v.value("nodes", 0), v.value("factor", 0.0),
      out.empty() ? "every node within the factor" : fmt::format("{}", fmt::join(out, "; ")));
}

// The latest straggler verdict in one line; "" when there was none.
std::string straggler_line(const std::string& verdict) {
  const auto v = nlohmann::json::parse(verdict, nullptr, false);
  if (!v.is_object()) return "";
  const std::string action = v.value("action", "report");
  const double link_ratio = v.value("link_ratio", 0.0);
  const std::string cause =
      v.value("cause", std::string()) == "link"
          ? (link_ratio > 0
                 ? fmt::format("its link {:.2f}x slower than the round's median", link_ratio)
                 : std::string("its link far slower than the round's median"))
          : fmt::format("computing {:.2f}x the others' median, waiting {:.2f}x",
                        v.value("compute_ratio", 0.0), v.value("wait_ratio", 0.0));
  return fmt::format(
      "straggler in round {}: node {} ({}) held every step back by {:.0f}% ({}) for {} steps: {}",
      v.value("round", -1), v.value("node_rank", -1), v.value("node", "?"),
      v.value("held_back", 0.0) * 100, cause, v.value("steps", 0),
      action == "replace"
          ? "replaced"
          : "reported" + (v.contains("not_replaced")
                              ? " (not replaced: " + v.value("not_replaced", std::string()) + ")"
                              : std::string()));
}

// A node's last restart in one line, phase by phase; "" when its agent has not restarted.
std::string restart_line(const std::string& phases) {
  const auto p = nlohmann::json::parse(phases, nullptr, false);
  if (!p.is_object()) return "";
  const auto seconds = [&p](const char* key) {
    const auto it = p.find(key);
    return it != p.end() && it->is_number() ? duration_text(it->get<double>()) : std::string("-");
  };
  const auto progress = p.find("first_progress_s");
  return fmt::format(
      "last restart ({}, restart {}): {} in all; detected {}, workers stopped {}, round {} "
      "formed {}, workers started {}, {}",
      p.value("cause", "?"), p.value("restart_count", 0), seconds("total_s"),
      seconds("detection_s"), seconds("stopping_s"), p.value("round", 0), seconds("rendezvous_s"),
      seconds("starting_s"),
      progress != p.end() && progress->is_number()
          ? "first progress " + duration_text(progress->get<double>())
          : std::string("no progress"));
}

}  // namespace

nlohmann::json status_json(const rendezvous::JobStatus& s, const std::string& run_id,
                           const std::string& backend) {
  nlohmann::json j = {{"run_id", run_id},       {"backend", backend},
                      {"found", s.found},       {"round", s.round},
                      {"forming", s.forming},   {"world_size", s.world_size},
                      {"restarts", s.restarts}, {"nnodes", s.nnodes},
                      {"closed", s.closed},     {"closed_reason", s.closed_reason}};
  j["max_restarts"] = s.max_restarts ? nlohmann::json(*s.max_restarts) : nlohmann::json(nullptr);
  j["nodes"] = nlohmann::json::array();
  for (const auto& n : s.nodes) j["nodes"].push_back(node_json(n));
  j["spares"] = nlohmann::json::array();
  for (const auto& n : s.spares) j["spares"].push_back(node_json(n));
  j["leader"] = nullptr;
  if (!s.leader.empty()) {
    j["leader"] = nlohmann::json::object();
    j["leader"]["id"] = s.leader;
    j["leader"]["host"] = s.leader_host;
  }
  const auto node_check = nlohmann::json::parse(s.node_check, nullptr, false);
  j["node_check"] = node_check.is_object() ? node_check : nlohmann::json(nullptr);
  const auto straggler = nlohmann::json::parse(s.straggler, nullptr, false);
  j["straggler"] = straggler.is_object() ? straggler : nlohmann::json(nullptr);
  j["last_failure"] = nullptr;
  if (auto f = root_cause(s)) {
    nlohmann::json r = {{"rank", f->rank},           {"local_rank", f->local_rank},
                        {"host", f->host},           {"pid", f->pid},
                        {"time_ms", ms_of(f->time)}, {"message", what_happened(*f)}};
    if (f->exitcode >= 0) {
      r["exitcode"] = f->exitcode;
    } else {
      r["signal"] = agent::signal_name(-f->exitcode);
    }
    j["last_failure"] = std::move(r);
  }
  return j;
}

std::string status_table(const rendezvous::JobStatus& s, const std::string& run_id,
                         const std::string& where) {
  std::string out;
  const std::string budget = s.max_restarts ? fmt::format("{} of {}", s.restarts, *s.max_restarts)
                                            : std::to_string(s.restarts);
  const std::string state = s.closed      ? fmt::format("closed ({})", s.closed_reason)
                            : s.round < 0 ? "forming its first round"
                            : s.forming   ? fmt::format("round {}, forming the next", s.round)
                                          : fmt::format("round {}", s.round);
  out += fmt::format("job {} at {}: {}; world size {}; restarts {}{}\n", run_id, where, state,
                     s.world_size, budget,
                     s.nnodes.empty() ? "" : fmt::format("; --nnodes={}", s.nnodes));
  if (!s.nodes.empty()) {
    out +=
        fmt::format("  {:<5} {:<24} {:>5}  {:<11} {}\n", "node", "host", "nproc", "ranks", "since");
    for (const auto& n : s.nodes) {
      out += fmt::format("  {:<5} {:<24} {:>5}  {:<11} {}{}\n", n.node_rank, n.host, n.nproc,
                         fmt::format("{}-{}", n.first_rank, n.last_rank),
                         n.since_ms ? local_time(*n.since_ms) : "-", n.present ? "" : "  (gone)");
      if (const std::string line = checkpoints_line(n.checkpoints); !line.empty()) {
        out += fmt::format("        {}\n", line);
      }
      if (const std::string line = restart_line(n.last_restart); !line.empty()) {
        out += fmt::format("        {}\n", line);
      }
    }
  }
  for (const auto& n : s.spares) {
    out += fmt::format("  spare {:<24} {:>5}  {:<11} {}\n", n.host, n.nproc, "-",
                       n.since_ms ? local_time(*n.since_ms) : "-");
  }
  if (const std::string line = node_check_line(s.node_check); !line.empty()) out += line + "\n";
  if (const std::string line = straggler_line(s.straggler); !line.empty()) out += line + "\n";
  if (!s.leader.empty()) {
    out += fmt::format("rounds decided by {}{}\n", s.leader,
                       s.leader_host.empty() ? " (gone)" : " on " + s.leader_host);
  }
  if (auto f = root_cause(s)) {
    out += fmt::format("last failure: rank {} (local rank {}{}) at {}: {}\n", f->rank,
                       f->local_rank, f->host.empty() ? "" : " on " + f->host,
                       local_time(ms_of(f->time)), what_happened(*f));
  }
  return out;
}

int run_status(const std::vector<std::string>& args, const agent::Environment& env) {
  CLI::App app{"ddprun status: a live job's state, read from its rendezvous store"};
  std::string endpoint, run_id, backend = "c10d", conf;
  bool json = false;
  app.add_option("--rdzv_endpoint,--rdzv-endpoint", endpoint,
                 "the job's store (c10d, static: HOST:PORT) or etcd members")
      ->required();
  app.add_option("--rdzv_id,--rdzv-id", run_id, "the job's run id")->required();
  app.add_option("--rdzv_backend,--rdzv-backend", backend, "c10d (default), etcd-v3 or static");
  app.add_option("--rdzv_conf,--rdzv-conf", conf, "etcd: TLS files, etcd_prefix; join_timeout");
  app.add_flag("--json", json, "one JSON object");
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitSuccess;
  } catch (const CLI::ParseError& e) {
    std::cerr << "ddprun status: error: " << e.what() << std::endl;
    return kExitUsage;
  }
  // The same endpoints, TLS and prefix a job of these options uses, as a node that would join it;
  // a bounded default wait for a store that is not there.
  RendezvousOptions job;
  job.backend = backend;
  job.run_id = run_id;
  job.conf = conf;
  job.client_only = true;
  rendezvous::RendezvousConfig rdzv;
  try {
    if (backend == "static") {
      const size_t colon = endpoint.rfind(':');
      if (colon == std::string::npos) {
        throw UsageError(
            "--rdzv_backend=static needs --rdzv_endpoint=HOST:PORT (node 0's --master_addr and "
            "--master_port)");
      }
      job.min_nodes = job.max_nodes = 2;
      job.node_rank = 1;
      job.master_addr = endpoint.substr(0, colon);
      const long port = parse_integer(endpoint.substr(colon + 1), "--rdzv_endpoint");
      if (port < 1 || port > 65535) throw UsageError("argument --rdzv_endpoint: not a TCP port");
      job.master_port = static_cast<int>(port);
    } else {
      job.max_nodes = 2;
      job.endpoint = endpoint;
    }
    rdzv = rendezvous_config(job);
    if (conf.find("join_timeout") == std::string::npos) rdzv.join_timeout = kStatusWait;
  } catch (const UsageError& e) {
    std::cerr << "ddprun status: error: " << e.what() << std::endl;
    return kExitUsage;
  }
  rendezvous::JobStatus s;
  try {
    s = rendezvous::read_job_status(rdzv);
  } catch (const std::exception& e) {
    std::cerr << "ddprun status: error: cannot read the job's store: " << e.what() << std::endl;
    return kExitLaunchError;
  }
  if (json) {
    std::cout << status_json(s, run_id, backend).dump() << std::endl;
  } else if (s.found) {
    std::cout << status_table(s, run_id, endpoint);
  }
  if (!s.found) {
    std::cerr << fmt::format("ddprun status: no job '{}' at {}", run_id, endpoint) << std::endl;
    return kExitLaunchError;
  }
  return kExitSuccess;
}

}  // namespace ddprun::launcher
