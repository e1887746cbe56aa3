// ddprun-node-probe: one node's part in ddprun's --node_check, started by the agent after a round
// formed and before its workers start (and, its links only, by the straggler check while they
// train). It times a fixed compute kernel (taking turns with the
// nodes that share its host, host_turn.hpp), then, every node starting each phase together, its
// link with a partner node in each phase (pairing.hpp) by all-reducing a fixed buffer over Gloo
// through the round's worker store, and writes what it measured to the report file, one line each:
//
//   compute <cpu|gpu> <seconds per kernel: on the CPU, the median of its blocks' means>
//   link <phase> <partner's node rank> <seconds per all-reduce, the fastest> <bytes reduced>
//   link <phase> <partner's node rank> failed <bytes>     (not done within the phase's time)
//
//   ddprun-node-probe --rank R --nodes N --store HOST:PORT --run RUN_ID --round K
//                     --report FILE --timeout-ms MS [--gpu DEVICE] [--pass P] [--link-kib K]
//                     [--measure all|links]
//
// --pass: which measurement of the round this is: an even one measures (0 the node check's before
// the workers start, 2, 4, ... the straggler check's while they train), an odd one confirms the
// one before, longer, before a node it found slow is acted on: its store keys are its own, and an
// odd pass runs kConfirmFactor times as many blocks and all-reduces.
// --link-kib: the buffer each link all-reduces, KiB (default 4096, long against a moment's load;
// the straggler check's measurement while the workers train uses less, to be over sooner on a
// slow link).
// --measure links: the links only, no compute line (the straggler check's measurement while the
// workers train: their step times say how long each node computes, and a kernel run beside them
// would only be slowed by them and delay the links' figures).
// --gpu: the compute kernel is a cuBLAS matrix product on that CUDA device (gpu_kernel.hpp), where
// this build has CUDA and the machine cuBLAS; else the CPU kernel, saying why on stderr.
//
// Exit status 0 with the report written; 1 with the reason on stderr; 2 for bad arguments.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "cpu_kernel.hpp"
#include "cpu_wait.hpp"
#ifdef DDP_PROBE_WITH_CUDA
#include "gpu_kernel.hpp"
#endif
#include "ddp/errors.hpp"
#include "ddp/init.hpp"
#include "ddprun/store/errors.hpp"
#include "ddprun/store/store_client.hpp"
#include "host_turn.hpp"
#include "pairing.hpp"

namespace {

using namespace ddp::node_probe;

// The compute kernel's runs, in blocks of about 70 ms of one core here: each block long against
// the 0.1 s period of a CPU quota (a throttled node is slow in every block, not only in some
// runs), and the median block leaves out a moment's load from elsewhere.
constexpr int kComputeBlocks = 3;
constexpr int kComputeRunsPerBlock = 12;
// All-reduces per link after one to warm up, kLinkGap apart: the fastest is the link's (load from
// elsewhere only ever adds time, and a moment's load misses some of them; a rate limit holds for
// every one).
constexpr int kLinkRuns = 8;
constexpr auto kLinkGap = std::chrono::milliseconds(5);
constexpr int kLinkKib = 4096;  // 4 MiB: long against a moment's load
constexpr int kConfirmFactor = 3;

struct Args {
  int rank = -1;
  int nodes = 0;
  std::string store_host;
  int store_port = 0;
  std::string run;
  int round = 0;
  std::string report;
  std::chrono::milliseconds timeout{30'000};
  int gpu = -1;  // --gpu: the CUDA device for the compute kernel; -1 none
  int pass = 0;  // --pass
  size_t link_floats = size_t{kLinkKib} * 1024 / sizeof(float);  // --link-kib
  bool compute = true;                                           // --measure all (links: false)

  int repeat() const { return pass % 2 == 0 ? 1 : kConfirmFactor; }
  // What this pass's store keys begin with.
  std::string scope() const {
    return "round_" + std::to_string(round) + (pass == 0 ? "" : ".pass" + std::to_string(pass));
  }
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "ddprun-node-probe: %s\nusage: ddprun-node-probe --rank R --nodes N --store "
               "HOST:PORT --run RUN_ID --round K --report FILE --timeout-ms MS [--gpu DEVICE] "
               "[--pass P] [--link-kib K] [--measure all|links]\n",
               why.c_str());
  std::exit(2);
}

int number(const std::string& flag, const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0 || v > 1'000'000'000) {
    usage(flag + " needs a non-negative integer, not '" + text + "'");
  }
  return static_cast<int>(v);
}

Args parse(int argc, char** argv) {
  std::map<std::string, std::string> given;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) usage(std::string(argv[i]) + " needs a value");
    given[argv[i]] = argv[i + 1];
  }
  Args a;
  for (const auto& [flag, value] : given) {
    if (flag == "--rank") {
      a.rank = number(flag, value);
    } else if (flag == "--nodes") {
      a.nodes = number(flag, value);
    } else if (flag == "--store") {
      const auto colon = value.rfind(':');
      if (colon == std::string::npos || colon == 0) usage("--store needs HOST:PORT");
      a.store_host = value.substr(0, colon);
      a.store_port = number(flag, value.substr(colon + 1));
    } else if (flag == "--run") {
      a.run = value;
    } else if (flag == "--round") {
      a.round = number(flag, value);
    } else if (flag == "--report") {
      a.report = value;
    } else if (flag == "--gpu") {
      a.gpu = number(flag, value);
    } else if (flag == "--pass") {
      a.pass = number(flag, value);
    } else if (flag == "--link-kib") {
      const int kib = number(flag, value);
      if (kib < 1 || kib > 1024 * 1024) usage("--link-kib must be from 1 to 1048576");
      a.link_floats = static_cast<size_t>(kib) * 1024 / sizeof(float);
    } else if (flag == "--measure") {
      if (value != "all" && value != "links") usage("--measure must be all or links");
      a.compute = value == "all";
    } else if (flag == "--timeout-ms") {
      a.timeout = std::chrono::milliseconds(number(flag, value));
    } else {
      usage("unknown argument " + flag);
    }
  }
  if (a.nodes < 1 || a.rank >= a.nodes || a.rank < 0) usage("--rank must be below --nodes");
  if (a.store_host.empty() || a.report.empty() || a.run.empty()) {
    usage("--store, --run and --report are required");
  }
  return a;
}

std::string decimal(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per all-reduce of a.link_floats floats with `partner`, the fastest of kLinkRuns (times
// the pass's repeat) after one to warm up.
double link_seconds(const Args& a, int phase, int partner,
                    std::chrono::steady_clock::time_point deadline) {
  ddp::WorkerEnv env;
  env.rank = a.rank < partner ? 0 : 1;
  env.world_size = 2;
  env.master_addr = a.store_host;
  env.master_port = a.store_port;
  env.run_id = a.run;
  env.restart_count = a.round;
  ddp::InitOptions o;
  o.timeout =
      std::max(std::chrono::milliseconds(1), std::chrono::duration_cast<std::chrono::milliseconds>(
                                                 deadline - std::chrono::steady_clock::now()));
  o.group_name = "node_check/" + a.scope() + "/phase" + std::to_string(phase) + "/" +
                 std::to_string(std::min(a.rank, partner)) + "-" +
                 std::to_string(std::max(a.rank, partner));
  const auto group = ddp::init_process_group(ddp::Backend::kGloo, env, o);
  std::vector<float> data(a.link_floats, 1.0f);
  std::vector<double> runs;
  for (int i = 0; i <= kLinkRuns * a.repeat(); ++i) {
    const auto start = std::chrono::steady_clock::now();
    group->all_reduce(data.data(), data.size(), ddp::DType::kFloat32, ddp::ReduceOp::kSum);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (i > 0) runs.push_back(took);
    std::this_thread::sleep_for(kLinkGap);
  }
  return *std::min_element(runs.begin(), runs.end());
}

// The compute line of the report: the kernel's kind and seconds per run (on the CPU, the median of
// kComputeBlocks blocks' means, not counting waits for CPUs other processes held: cpu_wait.hpp),
// timed in the host's turn (waited for until `turn_until`; a GPU's set-up before it).
std::string compute_line(const Args& a, std::chrono::steady_clock::time_point turn_until) {
#ifdef DDP_PROBE_WITH_CUDA
  if (a.gpu >= 0) {
    try {
      GpuGemm gemm(a.gpu);  // CUDA's and cuBLAS's set-up: outside the host's turn
      const HostTurn turn(turn_until);
      return "compute gpu " + decimal(gemm.seconds()) + "\n";
    } catch (const std::exception& e) {
      std::fprintf(stderr, "ddprun-node-probe: node %d: GPU %d: %s; the CPU kernel instead\n",
                   a.rank, a.gpu, e.what());
    }
  }
#else
  if (a.gpu >= 0) {
    std::fprintf(stderr, "ddprun-node-probe: built without CUDA; the CPU kernel instead\n");
  }
#endif
  const HostTurn turn(turn_until);
  std::vector<double> blocks;
  for (int b = 0; b < kComputeBlocks * a.repeat(); ++b) {
    // Its time, less any wait for a CPU that other processes held (a quota's is kept).
    const CpuWait waited;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kComputeRunsPerBlock; ++i) cpu_gemm_seconds();
    const auto took = std::chrono::steady_clock::now() - start - waited.elapsed();
    blocks.push_back(std::chrono::duration<double>(took).count() / kComputeRunsPerBlock);
  }
  return "compute cpu " + decimal(median(blocks)) + "\n";
}

// Every node reaching `stage` of the check, or the deadline passing (then it goes on: a node that
// never came shows as a link that failed).
void together(ddprun::store::StoreClient& store, const Args& a, const std::string& stage,
              std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  try {
    store.barrier("ddprun/node_check/" + a.run + "/" + a.scope() + "/" + stage, a.nodes,
                  std::max(left, std::chrono::milliseconds(1)));
  } catch (const ddprun::store::StoreError& e) {
    std::fprintf(stderr, "ddprun-node-probe: node %d: not every node reached %s: %s\n", a.rank,
                 stage.c_str(), e.what());
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + a.timeout;
  try {
    ddprun::store::ClientOptions options;
    options.timeout = a.timeout;
    ddprun::store::StoreClient store(a.store_host, static_cast<uint16_t>(a.store_port), options);
    // The host's turn is waited for a fifth of the time at most (a stopped holder not at all): a
    // probe hung in its turn leaves the others time to measure and still meet, at each phase's
    // start, the nodes that did not wait (each waits a quarter of the time left for the first
    // phase's partners). The nodes that share a host take their turns in less: 8 CPU kernels
    // about 1.7 s, a confirmation's three times as long about 5 s, against 6 s of the default
    // --node_check_timeout's 30.
    std::string report = a.compute ? compute_line(a, start + a.timeout / 5) : std::string();
    for (int phase = 0; phase < kPhases; ++phase) {
      // Each phase left, and its start, may take an equal share of the time left: a node that
      // never comes costs its phase, not the others.
      auto now = std::chrono::steady_clock::now();
      together(store, a, "phase_" + std::to_string(phase),
               now + (deadline - now) / (kPhases - phase + 1));
      const int other = partner(a.rank, a.nodes, phase);
      if (other < 0) continue;
      now = std::chrono::steady_clock::now();
      const auto phase_deadline = now + (deadline - now) / (kPhases - phase);
      try {
        const double seconds = link_seconds(a, phase, other, phase_deadline);
        report += "link " + std::to_string(phase) + " " + std::to_string(other) + " " +
                  decimal(seconds) + " " + std::to_string(a.link_floats * sizeof(float)) + "\n";
      } catch (const ddp::Error& e) {
        report += "link " + std::to_string(phase) + " " + std::to_string(other) + " failed " +
                  std::to_string(a.link_floats * sizeof(float)) + "\n";
        std::fprintf(stderr, "ddprun-node-probe: node %d, phase %d, with node %d: %s\n", a.rank,
                     phase, other, e.what());
      }
    }
    const std::string partial = a.report + ".partial";
    std::ofstream(partial) << report;
    if (std::rename(partial.c_str(), a.report.c_str()) != 0) {
      std::perror(("ddprun-node-probe: " + a.report).c_str());
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {  // the store unreachable, the report unwritable
    std::fprintf(stderr, "ddprun-node-probe: node %d: %s\n", a.rank, e.what());
    return 1;
  }
}
