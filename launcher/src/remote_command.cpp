#include "remote_command.hpp"

#include <set>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "python_interpreter.hpp"

namespace ddprun::launcher {

std::string shell_quote(std::string_view s) {
  std::string out = "'";
  for (char ch : s) {
    if (ch == '\'') {
      out += "'\\''";
    } else {
      out += ch;
    }
  }
  out += "'";
  return out;
}

EnvList parse_env_file(std::string_view text, const std::string& source) {
  EnvList out;
  size_t line_no = 0;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    if (line.empty() || line.front() == '#') continue;
    if (line.starts_with("export ")) line.remove_prefix(7);
    const size_t eq = line.find('=');
    const std::string_view key = line.substr(0, eq);
    bool valid = eq != std::string_view::npos && !key.empty() && !std::isdigit(key.front());
    for (char ch : key)
      valid = valid && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_');
    if (!valid) {
      throw std::invalid_argument(
          fmt::format("{} line {}: '{}' is not KEY=VALUE", source, line_no, line));
    }
    out.emplace_back(std::string(key), std::string(line.substr(eq + 1)));
  }
  return out;
}

EnvList forwarded_environment(const LaunchConfig& c, const agent::Environment& env,
                              const EnvList& env_files) {
  EnvList out;
  const auto set = [&](const std::string& key, const std::string& value) {
    for (auto& [k, v] : out) {
      if (k == key) {
        v = value;
        return;
      }
    }
    out.emplace_back(key, value);
  };
  for (const auto& [key, value] : env) {
    for (const char* prefix : {"NCCL_", "PYTHON", "CUDA_", "UCX_"}) {
      if (key.starts_with(prefix)) set(key, value);
    }
    // The head's interpreter, at the same path on every host as ddprun itself.
    if (key == kInstalledInterpreterVariable) set(key, value);
  }
  for (const auto& [key, value] : env_files) set(key, value);
  for (const auto& e : c.env_vars) {
    const size_t eq = e.find('=');
    if (eq != std::string::npos) {
      set(e.substr(0, eq), e.substr(eq + 1));
      continue;
    }
    auto it = env.find(e);
    if (it == env.end()) {
      throw std::invalid_argument(
          fmt::format("--env {}: {} is not set here; give --env {}=VALUE", e, e, e));
    }
    set(e, it->second);
  }
  return out;
}

std::string host_nproc(const LaunchConfig& c, size_t index) {
  const HostSlots& host = c.hosts.at(index);
  if (!c.given.contains("nproc_per_node") && host.slots) return std::to_string(*host.slots);
  return c.nproc_per_node;
}

std::vector<std::string> agent_arguments(const LaunchConfig& c, size_t index) {
  // What the head decides for every host (set below), and what only the head reads.
  static const std::set<std::string> kHeads = {
      "head_control", "no_slurm",         "rdzv_backend", "nnodes",         "node_rank",
      "master_addr",  "master_port",      "rdzv_id",      "nproc_per_node", "max_restarts",
      "role",         "shutdown_timeout", "hosts",        "hostfile",       "include",
      "exclude",      "ssh_port",         "ssh_identity", "ssh_option",     "env"};
  std::vector<std::string> args;
  if (c.dialect == Dialect::kDistributedLaunch) args.emplace_back("launch");
  args.insert(args.end(), {
                              "--head_control",
                              "--no_slurm",
                              "--rdzv_backend=static",
                              fmt::format("--nnodes={}", c.hosts.size()),
                              fmt::format("--node_rank={}", index),
                              fmt::format("--master_addr={}", c.rdzv.endpoint_host),
                              fmt::format("--master_port={}", c.rdzv.store_port),
                              fmt::format("--rdzv_id={}", c.rdzv.run_id),
                              fmt::format("--nproc_per_node={}", host_nproc(c, index)),
                              fmt::format("--max_restarts={}", c.rdzv.max_restarts),
                              fmt::format("--role={}", c.role),
                              fmt::format("--shutdown_timeout={}", c.shutdown_timeout.count()),
                          });
  // Every other option as it was given (PET_* ones too: the hosts need not have them), parsed by
  // each host for its own workers (its --nproc_per_node may differ from this one's).
  for (const LaunchConfig::GivenText& g : c.as_given) {
    if (kHeads.contains(g.dest)) continue;
    args.push_back(g.flag ? "--" + g.dest : fmt::format("--{}={}", g.dest, g.text));
  }
  args.push_back(c.training_script);
  args.insert(args.end(), c.training_script_args.begin(), c.training_script_args.end());
  return args;
}

std::string remote_shell_command(const std::string& cwd, const EnvList& env,
                                 const std::string& ddprun_path,
                                 const std::vector<std::string>& args) {
  std::string out = "cd -- " + shell_quote(cwd) + " && exec";
  if (!env.empty()) {
    out += " env --";
    for (const auto& [k, v] : env) out += " " + shell_quote(k + "=" + v);
  }
  out += " " + shell_quote(ddprun_path);
  for (const auto& a : args) out += " " + shell_quote(a);
  return out;
}

std::vector<std::string> ssh_command(const LaunchConfig& c, const std::string& host,
                                     const std::string& command, int connect_timeout_s) {
  std::vector<std::string> argv = {"ssh"};
  for (const auto& o : c.ssh_options) {
    argv.push_back("-o");
    argv.push_back(o);
  }
  const std::string ours[] = {"BatchMode=yes", fmt::format("ConnectTimeout={}", connect_timeout_s),
                              "ServerAliveInterval=10"};
  for (const std::string& o : ours) {
    argv.push_back("-o");
    argv.push_back(o);
  }
  if (c.ssh_port != 0) {
    argv.push_back("-p");
    argv.push_back(std::to_string(c.ssh_port));
  }
  if (!c.ssh_identity.empty()) {
    argv.push_back("-i");
    argv.push_back(c.ssh_identity);
  }
  argv.push_back(host);
  argv.push_back(command);
  return argv;
}

}  // namespace ddprun::launcher
