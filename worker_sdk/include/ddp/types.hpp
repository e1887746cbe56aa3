#pragma once
// Element types and reductions of the collectives.
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace ddp {

enum class DType { kFloat32, kFloat64, kFloat16, kBFloat16, kInt32, kInt64 };
// kAvg divides the sum by the world size (integer types: truncating division).
enum class ReduceOp { kSum, kAvg, kMin, kMax, kProduct };

size_t dtype_size(DType t);
const char* dtype_name(DType t);
const char* reduce_op_name(ReduceOp op);

// IEEE half and bfloat16 storage, converted through float with round-to-nearest-even.
struct float16 {
  uint16_t bits = 0;
  static float16 from_float(float f);
  float to_float() const;
};
struct bfloat16 {
  uint16_t bits = 0;
  static bfloat16 from_float(float f);
  float to_float() const;
};

// out[i] = a[i] (op) b[i] for n elements of `type` (kAvg reduces as kSum). out may alias a or b.
void reduce_into(DType type, ReduceOp op, void* out, const void* a, const void* b, size_t n);
// data[i] /= divisor for n elements of `type` (the second half of kAvg).
void divide(DType type, void* data, size_t n, int64_t divisor);

}  // namespace ddp
