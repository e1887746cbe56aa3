#include "ddprun/agent/failure_summary.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <sstream>

#include <fmt/format.h>

#include "ddprun/agent/signals.hpp"

namespace ddprun::agent {
namespace {

std::string format_time(std::chrono::system_clock::time_point t) {
  const auto secs = std::chrono::system_clock::to_time_t(t);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d_%H:%M:%S", &tm);
  return fmt::format("{}.{:03}", buf, ms);
}

std::string indent_continuation(const std::string& text) {
  std::string out;
  for (char ch : text) {
    out.push_back(ch);
    if (ch == '\n') out += "  ";
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == '\n')) out.pop_back();
  return out;
}

std::string block(size_t index, const WorkerFailure& f, const std::string& host) {
  return fmt::format(
      "[{}]:\n  time      : {}\n  host      : {}\n  rank      : {} (local_rank: {})\n"
      "  exitcode  : {} (pid: {})\n  error_file: {}\n  traceback : {}",
      index, format_time(f.time), f.host.empty() ? host : f.host, f.rank, f.local_rank, f.exitcode,
      f.pid, f.error_file.empty() ? "<N/A>" : f.error_file,
      indent_continuation(describe_failure(f)));
}

}  // namespace

namespace {

std::string describe_exit(const WorkerFailure& f) {
  if (f.error) {
    if (!f.error->traceback.empty()) return f.error->message + "\n" + f.error->traceback;
    if (!f.error->message.empty()) return f.error->message;
  }
  if (f.exitcode < 0) {
    const int signo = -f.exitcode;
    std::string text =
        fmt::format("Signal {} ({}) received by PID {}", signo, signal_name(signo), f.pid);
    if (f.oom_killed) {
      text +=
          "; the kernel's out-of-memory killer killed it (its cgroup's memory.events counts it)";
    } else if (signo == 9 && !f.sigkill_sent_by_ddprun) {
      text +=
          "; ddprun did not send it: the kernel's out-of-memory killer is the usual sender "
          "(see `dmesg | grep -i oom`)";
    }
    return text;
  }
  return "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html";
}

}  // namespace

std::string describe_failure(const WorkerFailure& f) {
  if (f.ended_because.empty()) return describe_exit(f);
  return f.ended_because + "\n" + describe_exit(f);
}

namespace {

int64_t failure_second(const WorkerFailure& f) {
  if (!f.error_file.empty() && f.error && f.error->timestamp) return *f.error->timestamp;
  return std::chrono::duration_cast<std::chrono::seconds>(f.time.time_since_epoch()).count();
}

}  // namespace

bool failed_earlier(const WorkerFailure& a, const WorkerFailure& b) {
  const int64_t sa = failure_second(a), sb = failure_second(b);
  if (sa != sb) return sa < sb;
  if (a.time != b.time) return a.time < b.time;
  return a.rank < b.rank;
}

std::string format_failure_summary(const std::string& entrypoint, const std::string& host,
                                   const std::vector<WorkerFailure>& failures) {
  if (failures.empty()) return {};
  std::vector<WorkerFailure> sorted = failures;
  std::stable_sort(sorted.begin(), sorted.end(), failed_earlier);
  std::string others;
  for (size_t i = 1; i < sorted.size(); ++i) others += block(i, sorted[i], host) + "\n";
  if (others.empty()) others = "  <NO_OTHER_FAILURES>\n";
  const std::string root = block(0, sorted[0], host);
  const std::string title = entrypoint + " FAILED";

  size_t width = title.size();
  for (const std::string& part : {others, root}) {
    std::istringstream lines(part);
    for (std::string line; std::getline(lines, line);) width = std::max(width, line.size());
  }
  width = std::min<size_t>(width, 60);
  const std::string eq(width, '='), dash(width, '-');
  return fmt::format("{}\n{}\n{}\nFailures:\n{}{}\nRoot Cause (first observed failure):\n{}\n{}\n",
                     eq, title, dash, others, dash, root, eq);
}

}  // namespace ddprun::agent
