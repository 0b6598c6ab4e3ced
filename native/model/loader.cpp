#include "model/loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "cpu/gemm_kernels.h"  // bf16_value, half_to_float: inline, so the widening loop vectorizes

namespace ad::model {

namespace {
void read_exact(int fd, void* dst, int64_t nbytes, int64_t offset, const TensorSource& src) {
  char* p = static_cast<char*>(dst);
  while (nbytes > 0) {
    ssize_t got = ::pread(fd, p, static_cast<size_t>(std::min<int64_t>(nbytes, 1 << 30)), offset);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw std::runtime_error("could not read tensor " + src.name + " from " + src.file + ": " +
                               (got == 0 ? std::string("unexpected end of file") : std::strerror(errno)));
    p += got;
    nbytes -= got;
    offset += got;
  }
}

// IEEE bits whose exponent is all ones (NaN, ±Inf). A block is tested with no early exit (the
// compiler vectorizes it into an OR), and only a block with a hit is searched element by element.
template <typename Bits, Bits kExponent>
int64_t first_all_ones_exponent(const Bits* v, int64_t n) {
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < n; start += kBlock) {
    const int64_t end = std::min(n, start + kBlock);
    unsigned hit = 0;
    for (int64_t i = start; i < end; ++i) hit |= (v[i] & kExponent) == kExponent;
    if (!hit) continue;
    for (int64_t i = start; i < end; ++i)
      if ((v[i] & kExponent) == kExponent) return i;
  }
  return -1;
}

using AliasedBits32 = uint32_t __attribute__((may_alias));  // a float's bits, read in place

// Widens 16-bit values to f32 and tests their exponents in the same pass, a block at a time (no
// early exit inside a block, so the loop vectorizes); a block with a hit is searched for the first.
template <float (*Widen)(uint16_t), uint16_t kExponent>
void widen_checked(const uint16_t* raw, float* out, int64_t numel, const TensorSource& src) {
  constexpr int64_t kBlock = 4096;
  for (int64_t start = 0; start < numel; start += kBlock) {
    const int64_t end = std::min(numel, start + kBlock);
    unsigned hit = 0;
    for (int64_t i = start; i < end; ++i) {
      out[i] = Widen(raw[i]);
      hit |= (raw[i] & kExponent) == kExponent;
    }
    if (!hit) continue;
    for (int64_t i = start; i < end; ++i)
      if ((raw[i] & kExponent) == kExponent) throw NonFiniteTensor(src, i, numel, out[i]);
  }
}
}  // namespace

NonFiniteTensor::NonFiniteTensor(const TensorSource& src, int64_t index_, int64_t numel_, float value_)
    : std::runtime_error("tensor " + src.name + " in " + src.file + " holds " + (value_ != value_ ? std::string("NaN") : value_ > 0 ? "Infinity" : "-Infinity") +
                         " at element " + std::to_string(index_) + " (of " + std::to_string(numel_) + "): the weights are corrupt or come from a diverged run"),
      file(src.file),
      tensor(src.name),
      index(index_),
      numel(numel_),
      value(value_) {}

int64_t first_non_finite(const float* v, int64_t n) {
  return first_all_ones_exponent<uint32_t, 0x7f800000u>(reinterpret_cast<const AliasedBits32*>(v), n);
}

Tensor read_tensor(const TensorSource& src) {
  int64_t numel = 1;
  for (auto d : src.shape) {
    if (d < 0 || (d > 0 && numel > (int64_t(1) << 40) / d))
      throw std::length_error("tensor " + src.name + " in " + src.file + " has an out-of-range shape " + shape_string(src.shape));
    numel *= d;
  }
  if (src.offset < 0 || src.nbytes < 0) throw std::length_error("tensor " + src.name + " in " + src.file + " has a negative byte range");
  int64_t elem = src.dtype == DType::F32 ? 4 : 2;
  if (numel * elem != src.nbytes)
    throw std::runtime_error("tensor " + src.name + " in " + src.file + " has " + std::to_string(src.nbytes) +
                             " bytes, its shape needs " + std::to_string(numel * elem));
  int fd = ::open(src.file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw std::runtime_error("could not open " + src.file + ": " + std::strerror(errno));
  Tensor t;
  t.shape = src.shape;
  t.buf = Buffer(numel);
  try {
    if (src.dtype == DType::F32) {
      read_exact(fd, t.buf.data, src.nbytes, src.offset, src);
      const int64_t bad = first_non_finite(t.buf.data, numel);
      if (bad >= 0) throw NonFiniteTensor(src, bad, numel, t.buf.data[bad]);
    } else {
      std::vector<uint16_t> raw(static_cast<size_t>(numel));
      read_exact(fd, raw.data(), src.nbytes, src.offset, src);
      if (src.dtype == DType::BF16)
        widen_checked<cpu::gemm::bf16_value, 0x7f80>(raw.data(), t.buf.data, numel, src);
      else
        widen_checked<cpu::gemm::half_to_float, 0x7c00>(raw.data(), t.buf.data, numel, src);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return t;
}

cpu::WeightType weight_type_for(WeightFormat format, TensorId id, DType file_dtype) {
  if (!kept_at_weight_type(id)) return cpu::WeightType::kF32;
  switch (format) {
    case WeightFormat::kF32: return cpu::WeightType::kF32;
    case WeightFormat::kBF16: return cpu::WeightType::kBF16;
    case WeightFormat::kF16: return cpu::WeightType::kF16;
    case WeightFormat::kInt8: return cpu::WeightType::kQ8;
    case WeightFormat::kCheckpoint: break;
  }
  return file_dtype == DType::BF16 ? cpu::WeightType::kBF16 : file_dtype == DType::F16 ? cpu::WeightType::kF16 : cpu::WeightType::kF32;
}

Tensor read_tensor_as(const TensorSource& src, cpu::WeightType type) {
  Tensor t = read_tensor(src);
  if (type == cpu::WeightType::kF32) return t;
  if (t.shape.size() != 2) throw std::invalid_argument("tensor " + src.name + " is not a matrix; only matrices are kept below f32");
  t.stored = cpu::store_weights(t.buf.data, t.shape[0], t.shape[1], type, src.name);
  t.buf = Buffer();
  return t;
}

}  // namespace ad::model
