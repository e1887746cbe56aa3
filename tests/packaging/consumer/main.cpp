// Sums the ranks with the installed libddp; exits 1 on a wrong answer.
#include <cstdio>

#include <ddp/init.hpp>
#include <ddp/run_main.hpp>

int main(int argc, char** argv) {
  return ddp::run_main(argc, argv, [](int, char**) {
    auto pg = ddp::init_process_group(ddp::Backend::kGloo);
    int value = pg->rank() + 1;
    pg->all_reduce(&value, 1, ddp::DType::kInt32, ddp::ReduceOp::kSum);
    const int want = pg->size() * (pg->size() + 1) / 2;
    std::printf("rank %d: sum %d (want %d)\n", pg->rank(), value, want);
    return value == want ? 0 : 1;
  });
}
