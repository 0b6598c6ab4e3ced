// A 64-byte aligned f32 buffer (defined in transformer.cpp).
#pragma once
#include <cstdint>

namespace ad::model {

struct Buffer {
  float* data = nullptr;
  int64_t size = 0;
  Buffer() = default;
  explicit Buffer(int64_t n);
  ~Buffer();
  Buffer(Buffer&& o) noexcept : data(o.data), size(o.size) { o.data = nullptr; o.size = 0; }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

}  // namespace ad::model
