#include "visible_gpus.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

namespace ddprun::launcher {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::vector<std::string_view> split_entries(std::string_view list) {
  std::vector<std::string_view> out;
  for (;;) {
    const size_t comma = list.find(',');
    out.push_back(trim(list.substr(0, comma)));
    if (comma == std::string_view::npos) return out;
    list.remove_prefix(comma + 1);
  }
}

// The ordinal an entry starts with (strtoul's reading: an optional '+', then digits); nullopt if
// it starts with none, or with '-'.
std::optional<long> leading_ordinal(std::string_view s) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  long n = 0;
  size_t digits = 0;
  while (digits < s.size() && std::isdigit(static_cast<unsigned char>(s[digits])) &&
         n < 1'000'000) {
    n = n * 10 + (s[digits++] - '0');
  }
  if (digits == 0) return std::nullopt;
  return n;
}

// The device a UUID entry names: the one UUID it is a prefix of (MIG instances are not listed by
// the driver, nor GPUs where it publishes none: taken as named); nullopt when it names none.
std::optional<std::string> resolve_uuid(std::string_view entry,
                                        const std::vector<std::string>& uuids) {
  if (entry.starts_with("MIG-") || uuids.empty()) return std::string(entry);
  std::optional<std::string> match;
  for (const auto& u : uuids) {
    if (!u.starts_with(entry)) continue;
    if (match) return std::nullopt;  // ambiguous
    match = u;
  }
  return match;
}

}  // namespace

std::vector<std::string> gpu_uuids() {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& gpu : std::filesystem::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    std::ifstream info(gpu.path() / "information");
    for (std::string line; std::getline(info, line);) {
      if (!line.starts_with("GPU UUID:")) continue;
      const auto uuid = trim(std::string_view(line).substr(9));
      if (uuid.starts_with("GPU-")) out.emplace_back(uuid);
    }
  }
  return out;
}

int visible_gpu_count(std::optional<std::string_view> cuda_visible_devices, int physical,
                      const std::vector<std::string>& uuids) {
  if (!cuda_visible_devices) return physical;
  const auto entries = split_entries(*cuda_visible_devices);
  const std::string_view kind = entries.front().substr(0, 4);
  const bool by_uuid = kind == "GPU-" || kind == "MIG-";
  std::vector<std::string> named;
  for (const std::string_view entry : entries) {
    std::optional<std::string> device;
    if (by_uuid) {
      if (entry.starts_with(kind)) device = resolve_uuid(entry, uuids);
    } else if (const auto ordinal = leading_ordinal(entry); ordinal && *ordinal < physical) {
      device = std::to_string(*ordinal);
    }
    if (!device) break;
    if (std::find(named.begin(), named.end(), *device) != named.end()) return 0;
    named.push_back(std::move(*device));
  }
  return std::min(static_cast<int>(named.size()), physical);
}

}  // namespace ddprun::launcher
