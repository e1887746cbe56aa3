// libddp side of scripts/bench/allreduce.sh; run under ddprun. Rank 0 prints one line per result.
//   allreduce_bench busbw MIB...        float32 all-reduce (sum): "allreduce BYTES MEDIAN_SECONDS"
//   allreduce_bench gradsync COUNTS     GradientSync step over tensors of the element counts in
//   file
//                                       COUNTS, registered as caller buffers ("gradsync_copied S")
//                                       and in place ("gradsync S"), and one fused all-reduce of
//                                       the same bytes ("fused S")
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "ddp/gradient_sync.hpp"
#include "ddp/init.hpp"
#include "ddp/run_main.hpp"

using Clock = std::chrono::steady_clock;

namespace {

// Median seconds of `op` over at least 3 and at most 20 runs (stopping after ~2 s), after 2
// warm-ups. Every rank runs the same number of iterations: rank 0 decides and broadcasts.
double median_seconds(ddp::ProcessGroup& pg, const std::function<void()>& op) {
  op();
  op();
  std::vector<double> times;
  const auto start = Clock::now();
  for (int i = 0; i < 20; ++i) {
    pg.barrier();
    const auto t0 = Clock::now();
    op();
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    int more = i + 1 < 3 || Clock::now() - start < std::chrono::seconds(2);
    pg.broadcast(&more, 1, ddp::DType::kInt32, 0);
    if (!more) break;
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int bench(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: allreduce_bench busbw MIB... | gradsync COUNTS_FILE\n");
    return 2;
  }
  auto pg = ddp::init_process_group(ddp::Backend::kGloo);
  const std::string mode = argv[1];
  if (mode == "busbw") {
    for (int a = 2; a < argc; ++a) {
      const size_t bytes = static_cast<size_t>(std::atof(argv[a]) * (1 << 20));
      std::vector<float> buf(bytes / sizeof(float), 1.0f);
      const double t = median_seconds(*pg, [&] {
        pg->all_reduce(buf.data(), buf.size(), ddp::DType::kFloat32, ddp::ReduceOp::kSum);
      });
      if (pg->rank() == 0) std::printf("allreduce %zu %.6f\n", bytes, t);
    }
    return 0;
  }
  std::ifstream in(argv[2]);
  std::vector<size_t> counts;
  for (size_t c; in >> c;) counts.push_back(c);
  // Both ways to register: caller-owned buffers (copied into buckets) and in-place gradients.
  std::vector<std::vector<float>> grads;
  ddp::GradientSync copied(*pg), in_place(*pg);
  size_t total = 0;
  for (size_t c : counts) {
    grads.emplace_back(c, 1.0f);
    copied.add(grads.back().data(), c, ddp::DType::kFloat32);
    in_place.add_in_place(c, ddp::DType::kFloat32);
    total += c;
  }
  for (size_t i = 0; i < counts.size(); ++i) {
    std::fill_n(static_cast<float*>(in_place.data(i)), counts[i], 1.0f);
  }
  const auto step_of = [&](ddp::GradientSync& sync) {
    return median_seconds(*pg, [&] {
      for (size_t i = counts.size(); i-- > 0;) sync.mark_ready(i);
      sync.finish();
    });
  };
  const double step_copied = step_of(copied);
  const double step = step_of(in_place);
  std::vector<float> fused(total, 1.0f);
  const double one = median_seconds(
      *pg, [&] { pg->all_reduce(fused.data(), total, ddp::DType::kFloat32, ddp::ReduceOp::kAvg); });
  if (pg->rank() == 0) {
    std::printf("gradsync_copied %.6f\ngradsync %.6f\nfused %.6f\n", step_copied, step, one);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return ddp::run_main(argc, argv, bench); }
