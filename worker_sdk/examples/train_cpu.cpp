// Data-parallel training of a small two-layer MLP on CPU with ddp::GradientSync over Gloo.
//
//   ddprun --standalone --nproc_per_node=2 --no_python ./train_cpu [steps]
//
// Each rank draws its own shard of a synthetic regression task (each step's batch from a seed of
// its own), the model starts from rank 0's weights (broadcast), gradients are averaged every step,
// and at the end every rank checks that all ranks hold bit-identical parameters; it exits 1 if not.
// The parameters are saved every step as an in-memory checkpoint (ddp/checkpoint.hpp), as
// replicated buffers (the same on every rank: the node holds them once): restarted after a
// failure, the job resumes from the step every rank holds instead of starting over. With
// KILL_AT=RANK:STEP that rank SIGKILLs itself just after saving that step, in the first attempt.
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "ddp/checkpoint.hpp"
#include "ddp/gradient_sync.hpp"
#include "ddp/init.hpp"
#include "ddp/run_main.hpp"

namespace {

constexpr int kIn = 16, kHidden = 32, kBatch = 64;

struct Mlp {
  std::vector<float> w1 = std::vector<float>(kHidden * kIn), b1 = std::vector<float>(kHidden),
                     w2 = std::vector<float>(kHidden), b2 = std::vector<float>(1);
  std::vector<std::vector<float>*> params() { return {&w1, &b1, &w2, &b2}; }
};

// One forward and backward pass over a batch; returns the mean squared error and fills `grads`.
float step(const Mlp& m, const std::vector<float>& x, const std::vector<float>& y, Mlp& grads) {
  for (auto* g : grads.params()) std::fill(g->begin(), g->end(), 0.0f);
  float loss = 0;
  std::vector<float> h(kHidden);
  for (int n = 0; n < kBatch; ++n) {
    const float* xn = &x[n * kIn];
    for (int j = 0; j < kHidden; ++j) {
      float a = m.b1[j];
      for (int i = 0; i < kIn; ++i) a += m.w1[j * kIn + i] * xn[i];
      h[j] = std::tanh(a);
    }
    float out = m.b2[0];
    for (int j = 0; j < kHidden; ++j) out += m.w2[j] * h[j];
    const float err = out - y[n];
    loss += err * err / kBatch;
    const float dout = 2 * err / kBatch;
    grads.b2[0] += dout;
    for (int j = 0; j < kHidden; ++j) {
      grads.w2[j] += dout * h[j];
      const float da = dout * m.w2[j] * (1 - h[j] * h[j]);
      grads.b1[j] += da;
      for (int i = 0; i < kIn; ++i) grads.w1[j * kIn + i] += da * xn[i];
    }
  }
  return loss;
}

int train(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 300;
  auto pg = ddp::init_process_group(ddp::Backend::kGloo);
  const int rank = pg->rank(), world = pg->size();

  Mlp model, grads;
  std::mt19937 init_rng(rank * 7919 + 1);  // deliberately different: rank 0's broadcast must win
  std::normal_distribution<float> normal(0.0f, 0.3f);
  for (auto* p : model.params()) {
    for (float& v : *p) v = normal(init_rng);
    pg->broadcast(p->data(), p->size(), ddp::DType::kFloat32, 0);
  }

  std::vector<std::span<std::byte>> state;
  for (auto* p : model.params()) state.push_back(std::as_writable_bytes(std::span(*p)));
  int first_step = 0;
  if (const auto saved = ddp::checkpoint::load(state)) {
    first_step = static_cast<int>(*saved) + 1;
    if (rank == 0) std::printf("resumed from step %d\n", static_cast<int>(*saved));
  }
  const char* kill_at = std::getenv("KILL_AT");
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const bool first_attempt = attempt == nullptr || std::string(attempt) == "0";

  ddp::GradientSync sync(*pg);
  std::vector<size_t> ids;
  for (auto* g : grads.params())
    ids.push_back(sync.add(g->data(), g->size(), ddp::DType::kFloat32));

  std::vector<float> w_true(kIn);
  for (int i = 0; i < kIn; ++i) w_true[i] = std::sin(0.7f * i);
  std::vector<float> x(kBatch * kIn), y(kBatch);
  const float lr = 0.05f;
  float first = 0, loss = 0;
  for (int s = first_step; s < steps; ++s) {
    std::mt19937 data_rng(1000 + rank + 7919 * s);  // this rank's shard, this step's batch
    std::normal_distribution<float> unit(0.0f, 1.0f);
    for (int n = 0; n < kBatch; ++n) {
      float t = 0;
      for (int i = 0; i < kIn; ++i) t += w_true[i] * (x[n * kIn + i] = unit(data_rng));
      y[n] = std::tanh(t) + 0.05f * unit(data_rng);
    }
    loss = step(model, x, y, grads);
    if (s == first_step) first = loss;
    // Backward produces the last layer's gradients first: mark them ready in that order.
    for (size_t k = ids.size(); k-- > 0;) sync.mark_ready(ids[k]);
    sync.finish();
    auto ps = model.params(), gs = grads.params();
    for (size_t k = 0; k < ps.size(); ++k) {
      for (size_t i = 0; i < ps[k]->size(); ++i) (*ps[k])[i] -= lr * (*gs[k])[i];
    }
    ddp::checkpoint::save(s, state, state.size());  // every buffer the same on every rank
    if (first_attempt && kill_at != nullptr &&
        std::to_string(rank) + ":" + std::to_string(s) == kill_at) {
      std::raise(SIGKILL);
    }
    if (rank == 0 && (s % 50 == 0 || s == steps - 1)) {
      std::printf("step %4d  loss %.5f\n", s, loss);
      std::fflush(stdout);
    }
  }

  std::vector<float> flat;
  for (auto* p : model.params()) flat.insert(flat.end(), p->begin(), p->end());
  std::vector<float> all(flat.size() * world);
  pg->all_gather(flat.data(), all.data(), flat.size(), ddp::DType::kFloat32);
  bool identical = true;
  for (int r = 1; r < world; ++r) {
    identical &=
        std::memcmp(all.data(), all.data() + r * flat.size(), flat.size() * sizeof(float)) == 0;
  }
  std::printf("rank %d/%d: loss %.4f -> %.4f, parameters %s across ranks\n", rank, world, first,
              loss, identical ? "bit-identical" : "DIFFER");
  // A resumed run starts from a trained model: its first loss is no longer the one to beat.
  return identical && (first_step > 0 || loss < first) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) { return ddp::run_main(argc, argv, train); }
