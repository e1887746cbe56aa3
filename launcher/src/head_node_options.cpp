#include <cctype>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>

#include <fmt/format.h>

#include "command_line_parts.hpp"
#include "option_values.hpp"

namespace ddprun::launcher {
namespace {

bool valid_variable_name(const std::string& name) {
  if (name.empty() || std::isdigit(static_cast<unsigned char>(name[0]))) return false;
  for (char ch : name) {
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '_') return false;
  }
  return true;
}

}  // namespace

std::string random_run_id() {
  std::random_device rd;
  std::mt19937_64 gen(rd());
  return fmt::format("{:016x}{:016x}", gen(), gen());
}

void parse_head_node(OptionTexts& o, LaunchConfig& c) {
  const std::string &hostfile = o["hostfile"], &host_list = o["hosts"];
  const std::string &include = o["include"], &exclude = o["exclude"], &ssh_port = o["ssh_port"];
  c.ssh_identity = o["ssh_identity"];
  c.ssh_options = o.lists["ssh_option"];
  c.env_vars = o.lists["env"];
  if (hostfile.empty() && host_list.empty()) {
    if (!include.empty() || !exclude.empty() || !ssh_port.empty() || !c.ssh_identity.empty() ||
        !c.ssh_options.empty() || !c.env_vars.empty()) {
      throw UsageError(
          "--include, --exclude, --ssh_port, --ssh_identity, --ssh_option and --env belong to a "
          "head-node launch: give --hostfile or -H");
    }
    return;
  }
  if (!hostfile.empty() && !host_list.empty()) throw UsageError("give --hostfile or -H, not both");
  if (o.flag("head_control")) {
    throw UsageError("--head_control: an agent started by a head has no hosts");
  }
  try {
    if (!hostfile.empty()) {
      std::ifstream in(hostfile);
      if (!in) {
        throw UsageError(
            fmt::format("--hostfile {}: cannot read it: {}", hostfile, std::strerror(errno)));
      }
      std::stringstream text;
      text << in.rdbuf();
      c.hosts = parse_hostfile(text.str(), hostfile);
    } else {
      c.hosts = parse_host_list(host_list);
    }
    c.hosts = select_hosts(c.hosts, include, exclude);
  } catch (const std::invalid_argument& e) {
    throw UsageError(e.what());
  }
  for (const char* dest : {"nnodes", "node_rank", "rdzv_endpoint", "standalone"}) {
    if (o.given.contains(dest)) {
      throw UsageError(fmt::format("--{} is decided by the hosts of a head-node launch", dest));
    }
  }
  if (o.given.contains("rdzv_backend") && o["rdzv_backend"] != "static") {
    throw UsageError(fmt::format(
        "a head-node launch meets on a static store on the first host; --rdzv_backend={} is not "
        "supported with --hostfile or -H",
        o["rdzv_backend"]));
  }
  if (!ssh_port.empty()) {
    const long port = parse_integer(ssh_port, "--ssh_port");
    if (port < 1 || port > 65535) throw UsageError("argument --ssh_port: not a TCP port");
    c.ssh_port = static_cast<int>(port);
  }
  for (const auto& e : c.env_vars) {
    const std::string name = e.substr(0, e.find('='));
    if (!valid_variable_name(name)) {
      throw UsageError(fmt::format("--env '{}': '{}' is not a variable name", e, name));
    }
  }
  o.text["nnodes"] = std::to_string(c.hosts.size());
  o.fill("rdzv_id", random_run_id());
  const std::string& first = c.hosts.front().host;
  o.fill("master_addr", first.substr(first.find('@') + 1));  // user@host: the host
  // Two jobs on the same hosts must not meet on one port: a random one unless given.
  std::random_device rd;
  o.fill("master_port", std::to_string(20000 + static_cast<int>(rd() % 10000)));
}

}  // namespace ddprun::launcher
