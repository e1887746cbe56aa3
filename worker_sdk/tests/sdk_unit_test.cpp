#include <cmath>
#include <limits>

#include <catch2/catch.hpp>

#include "ddp/errors.hpp"
#include "ddp/types.hpp"
#include "ddp/worker_env.hpp"

using namespace ddp;

TEST_CASE("sdk env: the launcher's variables are parsed", "[sdk]") {
  const auto w = WorkerEnv::from({{"RANK", "3"},
                                  {"WORLD_SIZE", "8"},
                                  {"LOCAL_RANK", "1"},
                                  {"LOCAL_WORLD_SIZE", "2"},
                                  {"MASTER_ADDR", "10.0.0.1"},
                                  {"MASTER_PORT", "29500"},
                                  {"TORCHELASTIC_RESTART_COUNT", "2"},
                                  {"TORCHELASTIC_RUN_ID", "job"}});
  CHECK(w.rank == 3);
  CHECK(w.world_size == 8);
  CHECK(w.local_rank == 1);
  CHECK(w.local_world_size == 2);
  CHECK(w.master_addr == "10.0.0.1");
  CHECK(w.master_port == 29500);
  CHECK(w.restart_count == 2);
  CHECK(w.run_id == "job");
}

TEST_CASE("sdk env: a missing or malformed variable is an error that names it", "[sdk]") {
  const std::map<std::string, std::string> good = {{"RANK", "0"},
                                                   {"WORLD_SIZE", "2"},
                                                   {"LOCAL_RANK", "0"},
                                                   {"MASTER_ADDR", "h"},
                                                   {"MASTER_PORT", "1"}};
  for (const auto& [name, bad] :
       std::vector<std::pair<std::string, std::string>>{{"RANK", ""},
                                                        {"RANK", "x"},
                                                        {"RANK", "2"},
                                                        {"WORLD_SIZE", "0"},
                                                        {"MASTER_PORT", "70000"},
                                                        {"LOCAL_RANK", "-1"},
                                                        {"MASTER_ADDR", ""}}) {
    auto env = good;
    env[name] = bad;
    INFO(name << "=" << bad);
    CHECK_THROWS_WITH(WorkerEnv::from(env), Catch::Contains(name));
  }
  auto env = good;
  env.erase("MASTER_PORT");
  CHECK_THROWS_AS(WorkerEnv::from(env), EnvError);
}

TEST_CASE("sdk types: half and bfloat16 round to nearest even", "[sdk]") {
  CHECK(float16::from_float(1.0f).bits == 0x3C00);
  CHECK(float16::from_float(65504.0f).bits == 0x7BFF);
  CHECK(float16::from_float(1e6f).bits == 0x7C00);                // overflow: inf
  CHECK(float16::from_float(1.0f + 1.0f / 2048).bits == 0x3C00);  // tie: to even
  CHECK(float16::from_float(5.9604645e-8f).bits == 0x0001);       // smallest subnormal
  CHECK(float16{0x3555}.to_float() == Approx(0.333251953125));
  CHECK(std::isnan(float16::from_float(std::numeric_limits<float>::quiet_NaN()).to_float()));
  CHECK(bfloat16::from_float(1.0f).bits == 0x3F80);
  CHECK(bfloat16::from_float(1.0f + 1.0f / 256).bits == 0x3F80);  // tie: to even
  CHECK(bfloat16{0x4049}.to_float() == 3.140625f);
}

TEST_CASE("sdk types: reductions and the average's division per dtype", "[sdk]") {
  int32_t a[3] = {1, -5, 7}, b[3] = {4, 2, -7}, out[3];
  reduce_into(DType::kInt32, ReduceOp::kMax, out, a, b, 3);
  CHECK((out[0] == 4 && out[1] == 2 && out[2] == 7));
  reduce_into(DType::kInt32, ReduceOp::kProduct, out, a, b, 3);
  CHECK((out[0] == 4 && out[1] == -10 && out[2] == -49));
  divide(DType::kInt32, out, 3, 4);
  CHECK((out[0] == 1 && out[1] == -2 && out[2] == -12));
  bfloat16 h[2] = {bfloat16::from_float(1.5f), bfloat16::from_float(2.0f)};
  reduce_into(DType::kBFloat16, ReduceOp::kSum, h, h, h, 2);
  CHECK(h[0].to_float() == 3.0f);
  divide(DType::kBFloat16, h, 2, 2);
  CHECK(h[1].to_float() == 2.0f);
}
