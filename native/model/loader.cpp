#include "model/loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace ad::model {

float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: renormalize
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) {
        mant <<= 1;
        --exp;
      }
      mant &= 0x3ff;
      bits = sign | (exp << 23) | (mant << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

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
}  // namespace

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
    } else {
      std::vector<uint16_t> raw(static_cast<size_t>(numel));
      read_exact(fd, raw.data(), src.nbytes, src.offset, src);
      if (src.dtype == DType::BF16)
        for (int64_t i = 0; i < numel; ++i) t.buf.data[i] = bf16_to_f32(raw[i]);
      else
        for (int64_t i = 0; i < numel; ++i) t.buf.data[i] = f16_to_f32(raw[i]);
    }
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return t;
}

}  // namespace ad::model
