#include "model/loader.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

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
