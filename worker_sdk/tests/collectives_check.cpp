// Run under `ddprun --standalone --nproc_per_node=N --no_python collectives_check` (Gloo, host
// buffers) or nccl_collectives_check (NCCL, device buffers; see check_buffers.hpp). Every rank
// checks every collective, dtype and reduction at sizes 0, 1, odd and 1 MiB (and at 64 MiB, two
// types, with Gloo a sum only) against values it computes on its own in double precision from the
// other ranks' (deterministic) inputs. Exits 1 on any mismatch.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "check_buffers.hpp"
#include "ddp/errors.hpp"
#include "ddp/init.hpp"
#include "ddp/run_main.hpp"

using namespace ddp;
using namespace std::chrono_literals;
using ddp_check::DeviceBuffer;

namespace {

int failures = 0;

void check(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    if (failures <= 20) std::fprintf(stderr, "MISMATCH: %s\n", what.c_str());
  }
}

// Small integers keep every reduction exact in every dtype (products stay below 2^8).
double input(int rank, size_t i, ReduceOp op) {
  return op == ReduceOp::kProduct ? 1 + (rank + i) % 3 : 1 + (rank * 3 + i) % 7;
}

void store_as(DType t, void* base, size_t i, double v) {
  switch (t) {
    case DType::kFloat32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DType::kFloat64:
      static_cast<double*>(base)[i] = v;
      break;
    case DType::kFloat16:
      static_cast<float16*>(base)[i] = float16::from_float(static_cast<float>(v));
      break;
    case DType::kBFloat16:
      static_cast<bfloat16*>(base)[i] = bfloat16::from_float(static_cast<float>(v));
      break;
    case DType::kInt32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(v);
      break;
    case DType::kInt64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
  }
}

double load_from(DType t, const void* base, size_t i) {
  switch (t) {
    case DType::kFloat32:
      return static_cast<const float*>(base)[i];
    case DType::kFloat64:
      return static_cast<const double*>(base)[i];
    case DType::kFloat16:
      return static_cast<const float16*>(base)[i].to_float();
    case DType::kBFloat16:
      return static_cast<const bfloat16*>(base)[i].to_float();
    case DType::kInt32:
      return static_cast<const int32_t*>(base)[i];
    case DType::kInt64:
      return static_cast<const int64_t*>(base)[i];
  }
  return 0;
}

double expected_reduction(ReduceOp op, DType t, int world, size_t i) {
  double acc = input(0, i, op);
  for (int r = 1; r < world; ++r) {
    const double v = input(r, i, op);
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kAvg:
        acc += v;
        break;
      case ReduceOp::kProduct:
        acc *= v;
        break;
      case ReduceOp::kMin:
        acc = std::min(acc, v);
        break;
      case ReduceOp::kMax:
        acc = std::max(acc, v);
        break;
    }
  }
  if (op == ReduceOp::kAvg) {
    acc = (t == DType::kInt32 || t == DType::kInt64) ? std::trunc(acc / world) : acc / world;
  }
  return acc;
}

bool close_enough(DType t, double got, double want) {
  // Averages are the only inexact results; half types keep 8-11 bits of mantissa.
  const double tol = t == DType::kBFloat16 ? 1e-2 : t == DType::kFloat16 ? 1e-3 : 1e-6;
  return std::fabs(got - want) <= tol * std::max(1.0, std::fabs(want));
}

const DType kTypes[] = {DType::kFloat32,  DType::kFloat64, DType::kFloat16,
                        DType::kBFloat16, DType::kInt32,   DType::kInt64};
const ReduceOp kOps[] = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMin, ReduceOp::kMax,
                         ReduceOp::kProduct};

std::string label(const char* op, DType t, size_t n) {
  return std::string(op) + " " + dtype_name(t) + " n=" + std::to_string(n);
}

int check_all(int argc, char** argv) {
  // --with-64mib adds 1 MiB buffers to every op and dtype, and 64 MiB ones of a 4-byte and a 2-byte
  // type (results checked at sampled indices): what a size changes, the transport's chunking,
  // depends on bytes, not on the type or the op.
  const bool with_64mib = argc > 1 && std::string(argv[1]) == "--with-64mib";
  auto pg = init_process_group(ddp_check::kBackend, InitOptions{120s, "", "default"});
  const int rank = pg->rank(), world = pg->size();

  for (DType t : kTypes) {
    const size_t esz = dtype_size(t);
    std::vector<size_t> sizes = {0, 1, 1001};
    if (with_64mib) sizes.push_back((1u << 20) / esz);
    if (with_64mib && (t == DType::kFloat32 || t == DType::kBFloat16)) {
      sizes.push_back((64u << 20) / esz);
    }
    for (size_t n : sizes) {
      const size_t stride = n > 100000 ? 4099 : 1;
      // Gloo at 64 MiB with a sum alone: its reductions' loops do not depend on the size, and
      // each op's is checked at 1 MiB (five ops at 64 MiB took most of this check's 170 s on a
      // 2-core machine). NCCL picks its algorithm and kernels by size: every op there.
      const bool big = n * esz >= (64u << 20) && ddp_check::kBackend == ddp::Backend::kGloo;
      for (ReduceOp op : kOps) {
        if (big && op != ReduceOp::kSum) continue;
        std::vector<char> buf(n * esz);
        for (size_t i = 0; i < n; ++i) store_as(t, buf.data(), i, input(rank, i, op));
        DeviceBuffer dbuf(buf.size());
        dbuf.upload(buf.data());
        pg->all_reduce(dbuf.get(), n, t, op);
        dbuf.download(buf.data());
        for (size_t i = 0; i < n; i += stride) {
          check(close_enough(t, load_from(t, buf.data(), i), expected_reduction(op, t, world, i)),
                label("all_reduce", t, n) + " " + reduce_op_name(op) + " i=" + std::to_string(i));
        }
        // reduce_scatter: chunk r of the reduction of everyone's n*world inputs.
        std::vector<char> in(n * world * esz), out(n * esz);
        for (size_t i = 0; i < n * world; ++i) store_as(t, in.data(), i, input(rank, i, op));
        DeviceBuffer din(in.size()), dout(out.size());
        din.upload(in.data());
        pg->reduce_scatter(din.get(), dout.get(), n, t, op);
        dout.download(out.data());
        for (size_t i = 0; i < n; i += stride) {
          check(close_enough(t, load_from(t, out.data(), i),
                             expected_reduction(op, t, world, rank * n + i)),
                label("reduce_scatter", t, n) + " " + reduce_op_name(op));
        }
      }
      for (int root = 0; root < world; ++root) {
        std::vector<char> buf(n * esz);
        for (size_t i = 0; i < n; ++i) store_as(t, buf.data(), i, input(rank, i, ReduceOp::kSum));
        DeviceBuffer dbuf(buf.size());
        dbuf.upload(buf.data());
        pg->broadcast(dbuf.get(), n, t, root);
        dbuf.download(buf.data());
        for (size_t i = 0; i < n; i += stride) {
          check(load_from(t, buf.data(), i) == input(root, i, ReduceOp::kSum),
                label("broadcast", t, n) + " root " + std::to_string(root));
        }
      }
      std::vector<char> in(n * esz), out(n * world * esz);
      for (size_t i = 0; i < n; ++i) store_as(t, in.data(), i, input(rank, i, ReduceOp::kSum));
      DeviceBuffer din(in.size()), dout(out.size());
      din.upload(in.data());
      pg->all_gather(din.get(), dout.get(), n, t);
      dout.download(out.data());
      for (int r = 0; r < world; ++r) {
        for (size_t i = 0; i < n; i += stride) {
          check(load_from(t, out.data(), r * n + i) == input(r, i, ReduceOp::kSum),
                label("all_gather", t, n));
        }
      }
    }
  }

  // Several operations in flight at once, two of them 64 MiB.
  const size_t big = (64u << 20) / sizeof(float);
  std::vector<float> a(big), b(big), c(1000);
  for (size_t i = 0; i < big; ++i) a[i] = b[i] = static_cast<float>(input(rank, i, ReduceOp::kSum));
  for (size_t i = 0; i < c.size(); ++i) c[i] = static_cast<float>(rank);
  DeviceBuffer da(big * sizeof(float)), db(big * sizeof(float)), dc(c.size() * sizeof(float));
  da.upload(a.data());
  db.upload(b.data());
  dc.upload(c.data());
  Work wa = pg->all_reduce_async(da.get(), big, DType::kFloat32, ReduceOp::kSum);
  Work wc = pg->all_reduce_async(dc.get(), c.size(), DType::kFloat32, ReduceOp::kMax);
  Work wb = pg->all_reduce_async(db.get(), big, DType::kFloat32, ReduceOp::kMin);
  wa.wait();
  wb.wait();
  wc.wait();
  da.download(a.data());
  db.download(b.data());
  dc.download(c.data());
  for (size_t i = 0; i < big; i += 4097) {
    check(a[i] == expected_reduction(ReduceOp::kSum, DType::kFloat32, world, i), "64 MiB sum");
    check(b[i] == expected_reduction(ReduceOp::kMin, DType::kFloat32, world, i), "64 MiB min");
  }
  check(c[999] == world - 1, "async max");
  pg->barrier();

  // A peer that does not take part: the collective ends in TimeoutError, not a hang.
  if (world > 1) {
    if (rank == 0) {
      const auto start = std::chrono::steady_clock::now();
      bool timed_out = false;
      try {
        pg->barrier(300ms);
      } catch (const TimeoutError& e) {
        timed_out = true;
      }
      check(timed_out, "barrier without peers must time out");
      check(std::chrono::steady_clock::now() - start < 10s, "timeout is bounded");
    } else {
      std::this_thread::sleep_for(2s);  // stays alive (and silent) past rank 0's timeout
    }
  }

  std::printf("rank %d/%d: %s %s (%d mismatches)\n", rank, world, ddp_check::kBackendName,
              failures ? "FAILED" : "all collectives ok", failures);
  return failures ? 1 : 0;
}
}  // namespace

int main(int argc, char** argv) { return run_main(argc, argv, check_all); }
