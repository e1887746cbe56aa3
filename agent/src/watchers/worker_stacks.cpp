#include "watchers/worker_stacks.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <vector>

#include <fmt/format.h>

namespace ddprun::agent {
namespace {

constexpr std::string_view kDumpStart = "Fatal Python error:";
constexpr std::string_view kFileLine = "  File \"";

// `  File "/a/b/train.py", line 14 in load_batch` -> "train.py:14 in load_batch".
std::optional<std::string> frame_of(std::string_view line) {
  if (!line.starts_with(kFileLine)) return std::nullopt;
  line.remove_prefix(kFileLine.size());
  const size_t quote = line.find("\", line ");
  if (quote == std::string_view::npos) return std::nullopt;
  std::string_view path = line.substr(0, quote);
  if (const size_t slash = path.rfind('/'); slash != std::string_view::npos) {
    path.remove_prefix(slash + 1);
  }
  std::string_view rest = line.substr(quote + 8);  // "14 in load_batch"
  const size_t in = rest.find(" in ");
  if (in == std::string_view::npos) return std::nullopt;
  return fmt::format("{}:{} in {}", path, rest.substr(0, in), rest.substr(in + 4));
}

std::string fold(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += j == i ? std::to_string(ranks[i]) : fmt::format("{}-{}", ranks[i], ranks[j]);
    i = j + 1;
  }
  return out;
}

}  // namespace

std::optional<WorkerStack> last_python_stack(std::string_view output) {
  const size_t start = output.rfind(kDumpStart);
  if (start == std::string_view::npos) return std::nullopt;
  return python_threads_stack(output.substr(start));
}

std::optional<WorkerStack> python_threads_stack(std::string_view dump) {
  WorkerStack stack;
  stack.text = std::string(dump);
  // The main thread's innermost frame: faulthandler lists the threads newest first, so the main
  // thread comes last. (The "current" thread is whichever took the signal: a logger's, perhaps.)
  std::optional<std::string> last_block;
  bool block_open = false;
  for (size_t pos = 0; pos < dump.size();) {
    const size_t end = std::min(dump.find('\n', pos), dump.size());
    const std::string_view line = dump.substr(pos, end - pos);
    pos = end + 1;
    if (line.ends_with("(most recent call first):")) {
      if (line.starts_with("Current thread's C stack")) break;  // native frames follow
      block_open = true;
      continue;
    }
    if (!block_open) continue;
    if (auto f = frame_of(line)) {
      last_block = f;
      block_open = false;  // only a block's innermost frame counts
    }
  }
  if (!last_block) return std::nullopt;
  stack.innermost = *last_block;
  return stack;
}

std::string ranks_by_frame(const std::map<int, std::string>& frame_of_rank) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (const auto& [rank, frame_text] : frame_of_rank) {
    const std::string& frame = frame_text;  // (clang 14 cannot capture a structured binding)
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == frame; });
    if (it == groups.end()) {
      groups.push_back({frame, {rank}});
    } else {
      it->second.push_back(rank);
    }
  }
  std::string out;
  for (const auto& [frame, ranks] : groups) {
    if (!out.empty()) out += "; ";
    out += fmt::format("{} {}: {}", ranks.size() == 1 ? "rank" : "ranks", fold(ranks), frame);
  }
  return out;
}

namespace {

// "data_loader.py:88 in load_batch" -> "`load_batch` (data_loader.py:88)"; other text as it is.
std::string place(const std::string& frame) {
  const size_t in = frame.rfind(" in ");
  if (in == std::string::npos || in == 0 || in + 4 >= frame.size()) return frame;
  return fmt::format("`{}` ({})", frame.substr(in + 4), frame.substr(0, in));
}

}  // namespace

std::string hang_culprit(const std::map<int, std::string>& frame_of_rank,
                         const std::map<int, int>& node_of_rank) {
  if (frame_of_rank.size() < 2) return {};
  std::map<std::string, int> count;
  for (const auto& [rank, frame] : frame_of_rank) ++count[frame];
  const auto most = std::max_element(
      count.begin(), count.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  const size_t n = frame_of_rank.size();
  if (static_cast<size_t>(most->second) == n) {
    return fmt::format("all {} ranks are in the same place: {}", n, place(most->first));
  }
  if (static_cast<size_t>(most->second) * 2 <= n) {
    return fmt::format("no place holds most of the {} ranks: no rank stands out", n);
  }
  constexpr size_t kNamed = 8;
  std::vector<std::string> apart;
  for (const auto& [rank, frame] : frame_of_rank) {
    if (frame == most->first) continue;
    if (apart.size() == kNamed) {
      apart.push_back("...");
      break;
    }
    const auto node = node_of_rank.find(rank);
    apart.push_back(fmt::format(
        "rank {}{} is in {}", rank,
        node == node_of_rank.end() ? "" : fmt::format(" on node {}", node->second), place(frame)));
  }
  std::string named;
  for (const std::string& a : apart) named += (named.empty() ? "" : ", ") + a;
  return fmt::format("{}; the {} others are in {}", named, most->second, place(most->first));
}

std::string frames_to_text(const std::map<int, std::string>& frame_of_rank) {
  std::string out;
  for (auto [rank, frame] : frame_of_rank) {
    std::replace(frame.begin(), frame.end(), '\n', ' ');
    out += fmt::format("{}\t{}\n", rank, frame);
  }
  return out;
}

std::map<int, std::string> frames_from_text(std::string_view text) {
  std::map<int, std::string> out;
  while (!text.empty()) {
    const auto end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    const auto tab = line.find('\t');
    if (tab == std::string_view::npos || tab == 0) continue;
    int rank = 0;
    const auto [next, ec] = std::from_chars(line.data(), line.data() + tab, rank);
    if (ec != std::errc() || next != line.data() + tab || rank < 0) continue;
    out[rank] = std::string(line.substr(tab + 1));
  }
  return out;
}

namespace {

// One frame line of a gdb backtrace: "#3  0x55d3 in main (argc=4, argv=0x7ffe) at /src/a.cpp:37",
// "#0  __GI___clock_nanosleep (clock_id=0, ...) at ../sysdeps/unix/clock_nanosleep.c:71" or
// "#1  0x7f04 in poll () from /lib/x86_64-linux-gnu/libc.so.6".
struct GdbFrame {
  std::string function;
  std::string file;  // "" when gdb has no source for it
  std::string line;
};

std::optional<GdbFrame> parse_gdb_frame(std::string_view line) {
  if (line.size() < 2 || line[0] != '#' || !std::isdigit(static_cast<unsigned char>(line[1]))) {
    return std::nullopt;
  }
  const size_t space = line.find_first_of(' ');
  if (space == std::string_view::npos) return std::nullopt;  // "#3" alone: gdb cut off mid-line
  auto rest = line.substr(space);
  rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
  if (rest.starts_with("0x")) {
    const auto in = rest.find(" in ");
    if (in == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(in + 4);
  }
  GdbFrame f;
  f.function = std::string(rest.substr(0, rest.find(" (")));
  if (const auto at = rest.rfind(") at "); at != std::string_view::npos) {
    const auto where = rest.substr(at + 5);
    const auto colon = where.rfind(':');
    f.file = std::string(where.substr(0, colon));
    if (colon != std::string_view::npos) f.line = std::string(where.substr(colon + 1));
  }
  return f;
}

bool own_code(const std::string& file) {
  return !file.empty() && !file.starts_with("/usr/") && !file.starts_with("../sysdeps/") &&
         !file.starts_with("./");
}

std::string frame_text(const GdbFrame& f) {
  if (f.file.empty()) return f.function;
  const auto slash = f.file.rfind('/');
  return fmt::format("{}:{} in {}", slash == std::string::npos ? f.file : f.file.substr(slash + 1),
                     f.line, f.function);
}

}  // namespace

std::optional<WorkerStack> gdb_stack(std::string_view output, int pid) {
  // The main thread's block: its header names the process's own id as its LWP (or, for a program
  // without threads, the process).
  const std::string lwp = fmt::format("(LWP {})", pid);
  const std::string process = fmt::format("(process {}", pid);
  std::vector<GdbFrame> frames, first_thread;
  bool in_main = false;
  int headers = 0;
  size_t start = 0;
  while (start < output.size()) {
    const auto end = std::min(output.find('\n', start), output.size());
    const std::string_view line = output.substr(start, end - start);
    start = end + 1;
    if (line.starts_with("Thread ")) {
      ++headers;
      in_main =
          line.find(lwp) != std::string_view::npos || line.find(process) != std::string_view::npos;
      continue;
    }
    const auto frame = parse_gdb_frame(line);
    if (!frame) continue;
    if (in_main) frames.push_back(*frame);
    if (headers <= 1) first_thread.push_back(*frame);
  }
  if (frames.empty()) frames = std::move(first_thread);
  if (frames.empty()) return std::nullopt;
  WorkerStack stack;
  stack.text = std::string(output);
  const auto own = std::find_if(frames.begin(), frames.end(),
                                [](const GdbFrame& f) { return own_code(f.file); });
  const auto sourced =
      std::find_if(frames.begin(), frames.end(), [](const GdbFrame& f) { return !f.file.empty(); });
  stack.innermost = frame_text(own != frames.end()       ? *own
                               : sourced != frames.end() ? *sourced
                                                         : frames.front());
  return stack;
}

}  // namespace ddprun::agent
