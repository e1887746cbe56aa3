// The cases marked "measured" were answered by torch.cuda.device_count() on a one-GPU H100
// machine (scripts/gpu-test.sh checks ddprun against it there); the others extend them to more
// GPUs by the same rules.
#include <catch2/catch.hpp>

#include "visible_gpus.hpp"

using ddprun::launcher::visible_gpu_count;

namespace {
const std::vector<std::string> kUuids = {"GPU-eb607d78-20b8-4f9a-2476-8789d98f68f8",
                                         "GPU-62a5cd2d-ab5d-ee29-62bf-f0add5fc6126"};
}

TEST_CASE("gpus: without CUDA_VISIBLE_DEVICES every device is visible", "[gpus]") {
  CHECK(visible_gpu_count(std::nullopt, 8) == 8);
  CHECK(visible_gpu_count(std::nullopt, 0) == 0);
}

TEST_CASE("gpus: CUDA_VISIBLE_DEVICES narrows the devices to the ordinals it lists", "[gpus]") {
  CHECK(visible_gpu_count("0", 1) == 1);  // measured
  CHECK(visible_gpu_count("", 1) == 0);   // measured
  CHECK(visible_gpu_count("0,1", 8) == 2);
  CHECK(visible_gpu_count("7,0, 3", 8) == 3);
}

TEST_CASE("gpus: an ordinal is read like strtoul reads it", "[gpus]") {
  for (const char* v : {"+0", " 0", "0 ", "0x", "00"})
    CHECK(visible_gpu_count(v, 1) == 1);     // measured
  CHECK(visible_gpu_count("gpu0", 1) == 0);  // measured
}

TEST_CASE("gpus: the list ends at the first entry that names no device", "[gpus]") {
  CHECK(visible_gpu_count("-1", 1) == 0);     // measured
  CHECK(visible_gpu_count("0,-1", 1) == 1);   // measured
  CHECK(visible_gpu_count("1", 1) == 0);      // measured: out of range
  CHECK(visible_gpu_count("1,0", 1) == 0);    // measured
  CHECK(visible_gpu_count("0,1", 1) == 1);    // measured
  CHECK(visible_gpu_count("abc", 1) == 0);    // measured
  CHECK(visible_gpu_count("0,abc", 1) == 1);  // measured
  CHECK(visible_gpu_count("0,1,-1,2", 8) == 2);
  CHECK(visible_gpu_count("0,", 8) == 1);
}

TEST_CASE("gpus: an entry named twice makes no device visible", "[gpus]") {
  CHECK(visible_gpu_count("0,0", 1) == 0);  // measured
  CHECK(visible_gpu_count("1,2,01", 8) == 0);
}

TEST_CASE("gpus: UUID prefixes name the GPU they match", "[gpus]") {
  CHECK(visible_gpu_count(kUuids[0], 1, {kUuids[0]}) == 1);         // measured
  CHECK(visible_gpu_count("GPU-eb60", 1, {kUuids[0]}) == 1);        // measured
  CHECK(visible_gpu_count(kUuids[0] + ",0", 1, {kUuids[0]}) == 1);  // measured
  CHECK(visible_gpu_count("0," + kUuids[0], 1, {kUuids[0]}) == 1);  // measured
  CHECK(visible_gpu_count("GPU-ffffffff", 1, {kUuids[0]}) == 0);    // measured
  CHECK(visible_gpu_count("GPU-62a5,GPU-eb60", 2, kUuids) == 2);
  CHECK(visible_gpu_count("GPU-", 2, kUuids) == 0);                   // ambiguous
  CHECK(visible_gpu_count("GPU-eb60,GPU-eb607d78", 2, kUuids) == 0);  // the same GPU twice
  CHECK(visible_gpu_count("GPU-62a5,GPU-0bad,GPU-eb60", 2, kUuids) == 1);
}

TEST_CASE("gpus: UUIDs the driver does not list count as named, never more than exist", "[gpus]") {
  CHECK(visible_gpu_count("GPU-62a5cd2d,GPU-0badf00d", 8) == 2);
  CHECK(visible_gpu_count("MIG-62a5cd2d", 8, kUuids) == 1);
  CHECK(visible_gpu_count("0,1,2", 2) == 2);
}
