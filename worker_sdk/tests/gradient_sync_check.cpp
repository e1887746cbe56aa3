// Run under `ddprun --standalone --nproc_per_node=N --no_python gradient_sync_check`. Ragged
// gradients of two dtypes in small buckets, some in caller buffers and some in place, marked ready
// in a different order on every rank, with parameters unused on some ranks or all, for several
// steps: every gradient must end as the average over ranks (unused = 0) computed here
// independently. Exits 1 on any mismatch.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "ddp/gradient_sync.hpp"
#include "ddp/init.hpp"

using namespace ddp;

namespace {

double value(int rank, int step, size_t grad, size_t i) {
  return static_cast<double>((rank + 1) * 10 + step * 3 + grad + i % 5);
}

// Gradient 3 is unused everywhere; gradient 1 only on odd ranks.
bool used(int rank, size_t grad) { return grad != 3 && !(grad == 1 && rank % 2 == 1); }

}  // namespace

int main() {
  auto pg =
      init_process_group(Backend::kGloo, InitOptions{std::chrono::seconds(60), "", "default"});
  const int rank = pg->rank(), world = pg->size();
  const std::vector<size_t> counts = {1, 1000, 300000, 7, 65536, 3, 1 << 20};
  std::vector<std::vector<float>> f32_own(counts.size());
  std::vector<std::vector<double>> f64_own(counts.size());
  std::vector<float*> f32(counts.size(), nullptr);
  std::vector<double*> f64(counts.size(), nullptr);
  GradientSync sync(*pg, GradientSyncOptions{64 << 10, 1 << 20});
  std::vector<size_t> ids;
  for (size_t g = 0; g < counts.size(); ++g) {
    // Alternate dtypes in runs of two, so buckets must split on type as well as size; every third
    // gradient lives in its bucket.
    const bool is32 = (g / 2) % 2 == 0;
    const DType t = is32 ? DType::kFloat32 : DType::kFloat64;
    if (g % 3 == 0) {
      ids.push_back(sync.add_in_place(counts[g], t));
    } else if (is32) {
      f32_own[g].resize(counts[g]);
      ids.push_back(sync.add(f32_own[g].data(), counts[g], t));
    } else {
      f64_own[g].resize(counts[g]);
      ids.push_back(sync.add(f64_own[g].data(), counts[g], t));
    }
  }
  for (size_t g = 0; g < counts.size(); ++g) {
    const bool is32 = (g / 2) % 2 == 0;
    void* p = g % 3 == 0 ? sync.data(ids[g])
              : is32     ? static_cast<void*>(f32_own[g].data())
                         : static_cast<void*>(f64_own[g].data());
    if (is32) {
      f32[g] = static_cast<float*>(p);
    } else {
      f64[g] = static_cast<double*>(p);
    }
  }
  int mismatches = 0;
  std::mt19937 rng(1000 + rank);
  for (int step = 0; step < 3; ++step) {
    std::vector<size_t> order(counts.size());
    for (size_t g = 0; g < order.size(); ++g) order[g] = g;
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t g : order) {
      for (size_t i = 0; i < counts[g]; ++i) {
        const double v = value(rank, step, g, i);
        if (f32[g]) f32[g][i] = static_cast<float>(v);
        if (f64[g]) f64[g][i] = v;
      }
      if (used(rank, g)) sync.mark_ready(ids[g]);
    }
    sync.finish();
    for (size_t g = 0; g < counts.size(); ++g) {
      for (size_t i = 0; i < counts[g]; i += 1 + counts[g] / 97) {
        double want = 0;
        for (int r = 0; r < world; ++r) want += used(r, g) ? value(r, step, g, i) : 0.0;
        want /= world;
        const double got = f32[g] ? f32[g][i] : f64[g][i];
        if (std::abs(got - want) > 1e-4 * std::max(1.0, std::abs(want)) && ++mismatches < 10) {
          std::fprintf(stderr, "MISMATCH step %d grad %zu [%zu]: %f != %f\n", step, g, i, got,
                       want);
        }
      }
    }
  }
  std::printf("rank %d/%d: %zu buckets, %s\n", rank, world, sync.bucket_count(),
              mismatches ? "FAILED" : "gradients averaged correctly");
  return mismatches ? 1 : 0;
}
