#include "ddp/types.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

namespace ddp {
namespace {

uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

template <class T>
struct Arith {  // plain arithmetic types
  static T load(T v) { return v; }
  static T store(T v) { return v; }
};
template <>
struct Arith<float16> {
  static float load(float16 v) { return v.to_float(); }
  static float16 store(float v) { return float16::from_float(v); }
};
template <>
struct Arith<bfloat16> {
  static float load(bfloat16 v) { return v.to_float(); }
  static bfloat16 store(float v) { return bfloat16::from_float(v); }
};

template <class T, class F>
void apply(void* out, const void* a, const void* b, size_t n, F f) {
  const T* pa = static_cast<const T*>(a);
  const T* pb = static_cast<const T*>(b);
  T* po = static_cast<T*>(out);
  for (size_t i = 0; i < n; ++i) {
    po[i] = Arith<T>::store(f(Arith<T>::load(pa[i]), Arith<T>::load(pb[i])));
  }
}

template <class T>
void reduce_typed(ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return apply<T>(out, a, b, n, [](auto x, auto y) { return x + y; });
    case ReduceOp::kProduct:
      return apply<T>(out, a, b, n, [](auto x, auto y) { return x * y; });
    case ReduceOp::kMin:
      return apply<T>(out, a, b, n, [](auto x, auto y) { return std::min(x, y); });
    case ReduceOp::kMax:
      return apply<T>(out, a, b, n, [](auto x, auto y) { return std::max(x, y); });
  }
}

template <class T>
void divide_typed(void* data, size_t n, int64_t divisor) {
  using V = decltype(Arith<T>::load(T{}));
  T* p = static_cast<T*>(data);
  const bool power_of_two = divisor > 0 && (divisor & (divisor - 1)) == 0;
  if (std::is_floating_point_v<V> && power_of_two) {
    // Exact: multiplying by 2^-k rounds exactly like dividing by 2^k, and costs far less.
    const V scale = V(1) / static_cast<V>(divisor);
    for (size_t i = 0; i < n; ++i) p[i] = Arith<T>::store(Arith<T>::load(p[i]) * scale);
    return;
  }
  for (size_t i = 0; i < n; ++i)
    p[i] = Arith<T>::store(Arith<T>::load(p[i]) / static_cast<V>(divisor));
}

}  // namespace

float16 float16::from_float(float f) {
  const uint32_t x = float_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t exp = (x >> 23) & 0xFFu;
  uint32_t mant = x & 0x7FFFFFu;
  float16 h;
  if (exp == 0xFF) {  // inf or nan
    h.bits = static_cast<uint16_t>(sign | 0x7C00u | (mant ? 0x200u : 0u));
    return h;
  }
  int e = static_cast<int>(exp) - 127 + 15;
  if (e >= 31) {
    h.bits = static_cast<uint16_t>(sign | 0x7C00u);
    return h;
  }
  if (e <= 0) {  // subnormal half or zero
    if (e < -10) {
      h.bits = static_cast<uint16_t>(sign);
      return h;
    }
    mant |= 0x800000u;
    const int shift = 14 - e;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    h.bits = static_cast<uint16_t>(sign | half);
    return h;
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into the exponent
  h.bits = static_cast<uint16_t>(sign | half);
  return h;
}

float float16::to_float() const {
  const uint32_t sign = (bits & 0x8000u) << 16;
  const uint32_t exp = (bits >> 10) & 0x1Fu;
  const uint32_t mant = bits & 0x3FFu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return bits_float(sign | 0x7F800000u | (mant << 13));
  return bits_float(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

bfloat16 bfloat16::from_float(float f) {
  const uint32_t x = float_bits(f);
  bfloat16 b;
  if ((x & 0x7F800000u) == 0x7F800000u && (x & 0x7FFFFFu)) {
    b.bits = static_cast<uint16_t>((x >> 16) | 0x40u);  // keep nan a nan
    return b;
  }
  const uint32_t rounding = 0x7FFFu + ((x >> 16) & 1u);
  b.bits = static_cast<uint16_t>((x + rounding) >> 16);
  return b;
}

float bfloat16::to_float() const { return bits_float(static_cast<uint32_t>(bits) << 16); }

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kFloat16:
      return "float16";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
  }
  return "?";
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return "sum";
    case ReduceOp::kAvg:
      return "avg";
    case ReduceOp::kMin:
      return "min";
    case ReduceOp::kMax:
      return "max";
    case ReduceOp::kProduct:
      return "product";
  }
  return "?";
}

void reduce_into(DType type, ReduceOp op, void* out, const void* a, const void* b, size_t n) {
  switch (type) {
    case DType::kFloat32:
      return reduce_typed<float>(op, out, a, b, n);
    case DType::kFloat64:
      return reduce_typed<double>(op, out, a, b, n);
    case DType::kFloat16:
      return reduce_typed<float16>(op, out, a, b, n);
    case DType::kBFloat16:
      return reduce_typed<bfloat16>(op, out, a, b, n);
    case DType::kInt32:
      return reduce_typed<int32_t>(op, out, a, b, n);
    case DType::kInt64:
      return reduce_typed<int64_t>(op, out, a, b, n);
  }
}

void divide(DType type, void* data, size_t n, int64_t divisor) {
  switch (type) {
    case DType::kFloat32:
      return divide_typed<float>(data, n, divisor);
    case DType::kFloat64:
      return divide_typed<double>(data, n, divisor);
    case DType::kFloat16:
      return divide_typed<float16>(data, n, divisor);
    case DType::kBFloat16:
      return divide_typed<bfloat16>(data, n, divisor);
    case DType::kInt32:
      return divide_typed<int32_t>(data, n, divisor);
    case DType::kInt64:
      return divide_typed<int64_t>(data, n, divisor);
  }
}

}  // namespace ddp
