#include "model/kv_cache.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <unordered_map>

namespace ad::model {

KVCache::KVCache(const Config& cfg, int slots, int capacity, int page_size, int64_t pages)
    : slots_(slots), capacity_(capacity), kv_dim_(cfg.kv_dim()), layers_(cfg.layers), page_size_(page_size ? page_size : capacity),
      paged_(page_size != 0), pages_(page_size ? pages : slots), table_(slots), length_(slots, 0), tokens_(slots) {
  if (slots <= 0 || capacity <= 0) throw std::invalid_argument("KV cache needs at least one slot and one position");
  if (page_size < 0 || page_size > capacity) throw std::invalid_argument("a KV cache page holds 1 … capacity positions");
  if (paged_ && (pages <= 0 || pages > (int64_t(1) << 31) - 1)) throw std::invalid_argument("a paged KV cache needs 1 … 2³¹−1 pages");
  for (int l = 0; l < layers_; ++l) {
    k_.emplace_back(pages_ * page_floats());
    v_.emplace_back(pages_ * page_floats());
  }
  if (!paged_) {
    refs_.assign(pages_, 1);
    for (int s = 0; s < slots; ++s) table_[s].push_back(s);  // the slot layout: slot s owns page s for good
    fresh_ = pages_;
  }
}

KVCache::~KVCache() = default;

float* KVCache::keys(int layer, int slot) {
  if (paged_) throw std::logic_error("keys(layer, slot) needs the slot layout");
  return k_[layer].data + (int64_t)slot * page_floats();
}
float* KVCache::values(int layer, int slot) {
  if (paged_) throw std::logic_error("values(layer, slot) needs the slot layout");
  return v_[layer].data + (int64_t)slot * page_floats();
}
float* KVCache::page_keys(int layer, int slot, int p) { return k_[layer].data + (int64_t)table_[slot][p] * page_floats(); }
float* KVCache::page_values(int layer, int slot, int p) { return v_[layer].data + (int64_t)table_[slot][p] * page_floats(); }

// Returned pages first, then pages never used (the pool's bookkeeping grows as pages are first used).
int KVCache::take_page() {
  int p;
  if (!free_.empty()) {
    p = free_.back();
    free_.pop_back();
  } else {
    p = static_cast<int>(fresh_++);
    refs_.push_back(0);
  }
  refs_[p] = 1;
  return p;
}

int64_t KVCache::free_pages() const { return static_cast<int64_t>(free_.size()) + (pages_ - fresh_); }

void KVCache::drop_page(int page) {
  if (refs_[page] > 1) --extra_refs_;
  if (--refs_[page] == 0) free_.push_back(page);
}

void KVCache::copy_page(int from, int to, int positions) {
  const int64_t n = (int64_t)positions * kv_dim_;
  for (int l = 0; l < layers_; ++l) {
    std::memcpy(k_[l].data + to * page_floats(), k_[l].data + from * page_floats(), sizeof(float) * n);
    std::memcpy(v_[l].data + to * page_floats(), v_[l].data + from * page_floats(), sizeof(float) * n);
  }
}

int64_t KVCache::pages_needed(int slot, int count) const {
  if (!paged_ || count <= 0) return 0;
  const int64_t held = static_cast<int64_t>(table_[slot].size());
  return std::max<int64_t>(0, (static_cast<int64_t>(length_[slot]) + count + page_size_ - 1) / page_size_ - held);
}

void KVCache::reserve(const std::vector<std::pair<int, int>>& writes) {
  if (!paged_) return;
  // New pages, plus a copy of each shared page a slot writes into — but the last holder of a
  // shared page writes in place (the others' copies have left it alone), so count copies in order.
  int64_t need = 0;
  std::unordered_map<int32_t, int32_t> copied;  // shared page → holders that will have copied it
  for (const auto& [slot, count] : writes) {
    need += pages_needed(slot, count);
    const size_t first = length_[slot] / page_size_;
    if (count > 0 && first < table_[slot].size()) {
      const int32_t page = table_[slot][first];
      if (refs_[page] - copied[page] > 1) ++need, ++copied[page];
    }
  }
  if (need > free_pages())
    throw std::length_error("the KV cache has " + std::to_string(free_pages()) + " free pages; this step needs " + std::to_string(need));
  for (const auto& [slot, count] : writes) {
    auto& table = table_[slot];
    const int len = length_[slot];
    const size_t first = len / page_size_;
    if (first < table.size() && refs_[table[first]] > 1) {  // copy-on-write
      const int fresh = take_page();
      copy_page(table[first], fresh, len % page_size_);
      drop_page(table[first]);
      table[first] = fresh;
    }
    const size_t want = (static_cast<size_t>(len) + count + page_size_ - 1) / page_size_;
    while (table.size() < want) table.push_back(take_page());
  }
}

void KVCache::append_tokens(int slot, const int32_t* toks, int n) {
  tokens_[slot].insert(tokens_[slot].end(), toks, toks + n);
  length_[slot] += n;
}

void KVCache::copy_prefix(int src, int dst, int len) {
  if (src < 0 || src >= slots_ || dst < 0 || dst >= slots_) throw std::out_of_range("KV cache slot out of range");
  if (len < 0 || len > length_[src]) throw std::out_of_range("copy_prefix: source slot is shorter than the requested prefix");
  if (src == dst) {
    truncate(dst, len);
    return;
  }
  if (!paged_) {
    for (int l = 0; l < layers_; ++l) {
      std::memcpy(keys(l, dst), keys(l, src), sizeof(float) * len * kv_dim_);
      std::memcpy(values(l, dst), values(l, src), sizeof(float) * len * kv_dim_);
    }
  } else {
    // Full pages are shared; a partial last page is shared too and copied on dst's first write.
    const size_t held = (static_cast<size_t>(len) + page_size_ - 1) / page_size_;
    std::vector<int32_t> table(table_[src].begin(), table_[src].begin() + held);
    for (int32_t p : table) ++refs_[p];
    extra_refs_ += static_cast<int64_t>(table.size());
    for (int32_t p : table_[dst]) drop_page(p);
    table_[dst] = std::move(table);
    shared_total_ += static_cast<int64_t>(len / page_size_) * usage().page_bytes;
  }
  tokens_[dst].assign(tokens_[src].begin(), tokens_[src].begin() + len);
  length_[dst] = len;
}

void KVCache::truncate(int slot, int len) {
  if (slot < 0 || slot >= slots_ || len < 0 || len > length_[slot]) throw std::out_of_range("truncate beyond the slot's length");
  if (paged_) {
    auto& table = table_[slot];
    const size_t keep = (static_cast<size_t>(len) + page_size_ - 1) / page_size_;
    while (table.size() > keep) {
      drop_page(table.back());
      table.pop_back();
    }
  }
  tokens_[slot].resize(len);
  length_[slot] = len;
}

int64_t KVCache::bytes() const { return static_cast<int64_t>(layers_) * 2 * pages_ * page_floats() * 4; }

CacheUsage KVCache::usage() const {
  CacheUsage u;
  u.page_size = page_size_;
  u.pages = pages_;
  u.free_pages = paged_ ? free_pages() : 0;
  u.page_bytes = static_cast<int64_t>(layers_) * 2 * page_floats() * 4;
  u.shared_bytes = extra_refs_ * u.page_bytes;
  u.shared_bytes_total = shared_total_;
  return u;
}

}  // namespace ad::model
