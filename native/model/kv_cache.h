// The CPU backend's KV cache: positions live in pages of `page_size` positions, each sequence
// (slot) a page table over one pool of pages. Two layouts:
//   - slots (page_size == capacity, one page per slot, fixed): the layout of training forwards and
//     of every cache created without a page size; copy_prefix copies, exactly as before pages;
//   - paged (page_size < capacity): pages come from a shared pool on demand and go back on
//     truncate; copy_prefix shares the source's full pages (a reference count, no copy) and
//     copies only the partial last one; a write into a shared page copies it first (copy-on-write),
//     so the n samples of one prompt hold its prefix once.
#pragma once
#include <cstdint>
#include <vector>

#include "model/buffer.h"
#include "model/config.h"

namespace ad::model {

// What a cache holds, for schedulers and the memory-saved counter.
struct CacheUsage {
  int page_size = 0;
  int64_t pages = 0, free_pages = 0;
  int64_t page_bytes = 0;          // K and V of every layer for one page
  int64_t shared_bytes = 0;        // now: pages held by more than one slot, counted once per extra holder
  int64_t shared_bytes_total = 0;  // since creation: bytes copy_prefix shared instead of copying
};

class KVCache {
 public:
  // page_size 0: the slot layout (one page of `capacity` positions per slot). Otherwise `pages`
  // pages of `page_size` positions shared by all slots; each slot holds up to `capacity` positions.
  KVCache(const Config& cfg, int slots, int capacity, int page_size = 0, int64_t pages = 0);
  ~KVCache();
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  int slots() const { return slots_; }
  int capacity() const { return capacity_; }
  int page_size() const { return page_size_; }
  bool paged() const { return paged_; }
  int length(int slot) const { return length_[slot]; }
  const std::vector<int32_t>& tokens(int slot) const { return tokens_[slot]; }
  int kv_dim() const { return kv_dim_; }

  // Keys (values) of one slot, positions contiguous with stride kv_dim: the slot layout only.
  float* keys(int layer, int slot);
  float* values(int layer, int slot);
  // Keys (values) of positions [p·page_size, (p+1)·page_size) of a slot (page p must be held).
  float* page_keys(int layer, int slot, int p);
  float* page_values(int layer, int slot, int p);
  float* key_at(int layer, int slot, int pos) { return page_keys(layer, slot, pos / page_size_) + (int64_t)(pos % page_size_) * kv_dim_; }
  float* value_at(int layer, int slot, int pos) { return page_values(layer, slot, pos / page_size_) + (int64_t)(pos % page_size_) * kv_dim_; }

  // New pages a write of `count` positions at the end of `slot` needs (copies of shared pages aside).
  int64_t pages_needed(int slot, int count) const;
  // Holds pages for positions [length, length + count) of each (slot, count), copying shared pages
  // that will be written; throws std::length_error, holding nothing new, when the pool is short.
  void reserve(const std::vector<std::pair<int, int>>& writes);
  void append_tokens(int slot, const int32_t* toks, int n);
  // Makes `dst` hold the first `len` positions of `src` (n samples share one prefill).
  void copy_prefix(int src, int dst, int len);
  void truncate(int slot, int len);
  int64_t bytes() const;
  CacheUsage usage() const;

 private:
  int64_t page_floats() const { return (int64_t)page_size_ * kv_dim_; }
  int take_page();
  int64_t free_pages() const;
  void drop_page(int page);
  void copy_page(int from, int to, int positions);

  int slots_, capacity_, kv_dim_, layers_, page_size_;
  bool paged_;
  int64_t pages_;
  std::vector<Buffer> k_, v_;  // [layer] → pages × page_size × kv_dim
  std::vector<std::vector<int32_t>> table_;  // [slot] → page ids
  std::vector<int32_t> refs_;               // [page] → holders
  std::vector<int32_t> free_;  // pages returned to the pool
  int64_t fresh_ = 0;          // pages [fresh_, pages_) have never been used
  int64_t shared_total_ = 0;
  int64_t extra_refs_ = 0;  // Σ over pages of (holders − 1): the pages sharing saves now
  std::vector<int> length_;
  std::vector<std::vector<int32_t>> tokens_;
};

}  // namespace ad::model
