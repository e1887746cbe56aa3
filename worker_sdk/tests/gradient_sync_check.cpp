// Run under `ddprun --standalone --nproc_per_node=N --no_python gradient_sync_check` (Gloo, host
// buffers) or nccl_gradient_sync_check (NCCL, device buffers written late on the default stream;
// see check_buffers.hpp). Ragged gradients of two dtypes in small buckets, some in caller buffers
// and some in place, marked ready in a different order on every rank, with parameters unused on
// some ranks or all, for several steps: every gradient must end as the average over ranks
// (unused = 0) computed here independently. Exits 1 on any mismatch.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <vector>

#include "check_buffers.hpp"
#include "ddp/gradient_sync.hpp"
#include "ddp/init.hpp"
#include "ddp/run_main.hpp"

using namespace ddp;
using ddp_check::DeviceBuffer;

namespace {

double value(int rank, int step, size_t grad, size_t i) {
  return static_cast<double>((rank + 1) * 10 + step * 3 + grad + i % 5);
}

// Gradient 3 is unused everywhere; gradient 1 only on odd ranks.
bool used(int rank, size_t grad) { return grad != 3 && !(grad == 1 && rank % 2 == 1); }

// Alternating dtypes in runs of two, so buckets must split on type as well as size.
DType type_of(size_t grad) { return (grad / 2) % 2 == 0 ? DType::kFloat32 : DType::kFloat64; }

void put(DType t, std::vector<char>& host, size_t i, double v) {
  if (t == DType::kFloat32) {
    reinterpret_cast<float*>(host.data())[i] = static_cast<float>(v);
  } else {
    reinterpret_cast<double*>(host.data())[i] = v;
  }
}

double get(DType t, const std::vector<char>& host, size_t i) {
  return t == DType::kFloat32 ? reinterpret_cast<const float*>(host.data())[i]
                              : reinterpret_cast<const double*>(host.data())[i];
}

int check_all(int, char**) {
  auto pg =
      init_process_group(ddp_check::kBackend, InitOptions{std::chrono::seconds(60), "", "default"});
  const int rank = pg->rank(), world = pg->size();
  const std::vector<size_t> counts = {1, 1000, 300000, 7, 65536, 3, 1 << 20};
  GradientSync sync(*pg, GradientSyncOptions{64 << 10, 1 << 20});
  std::vector<std::unique_ptr<DeviceBuffer>> grads(counts.size());
  std::vector<std::vector<char>> host(counts.size());
  std::vector<size_t> ids;
  for (size_t g = 0; g < counts.size(); ++g) {
    host[g].resize(counts[g] * dtype_size(type_of(g)));
    if (g % 3 == 0) {  // every third gradient lives in its bucket
      ids.push_back(sync.add_in_place(counts[g], type_of(g)));
    } else {
      grads[g] = std::make_unique<DeviceBuffer>(host[g].size());
      ids.push_back(sync.add(grads[g]->get(), counts[g], type_of(g)));
    }
  }
  for (size_t g = 0; g < counts.size(); g += 3) {
    grads[g] = std::make_unique<DeviceBuffer>(sync.data(ids[g]), host[g].size());
  }
  int mismatches = 0;
  std::mt19937 rng(1000 + rank);
  for (int step = 0; step < 3; ++step) {
    std::vector<size_t> order(counts.size());
    for (size_t g = 0; g < order.size(); ++g) order[g] = g;
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t g : order) {
      for (size_t i = 0; i < counts[g]; ++i) put(type_of(g), host[g], i, value(rank, step, g, i));
      grads[g]->upload(host[g].data());
      if (used(rank, g)) sync.mark_ready(ids[g]);
    }
    sync.finish();
    for (size_t g = 0; g < counts.size(); ++g) {
      grads[g]->download(host[g].data());
      for (size_t i = 0; i < counts[g]; i += 1 + counts[g] / 97) {
        double want = 0;
        for (int r = 0; r < world; ++r) want += used(r, g) ? value(r, step, g, i) : 0.0;
        want /= world;
        const double got = get(type_of(g), host[g], i);
        if (std::abs(got - want) > 1e-4 * std::max(1.0, std::abs(want)) && ++mismatches < 10) {
          std::fprintf(stderr, "MISMATCH step %d grad %zu [%zu]: %f != %f\n", step, g, i, got,
                       want);
        }
      }
    }
  }
  std::printf("rank %d/%d: %s, %zu buckets, %s\n", rank, world, ddp_check::kBackendName,
              sync.bucket_count(), mismatches ? "FAILED" : "gradients averaged correctly");
  return mismatches ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, check_all); }
