// The CUDA transformer (see model_cuda.h). Each method mirrors the CPU method of the same name
// in native/model/transformer.cpp and backward.cpp; comments there explain the math.
#include "cuda/model_cuda.h"

#include "cuda/device_profiler.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "cuda/ops_layers.h"
#include "cuda/ops_lora.h"
#include "kernels/rope.h"
#include "kernels/sampling_split.h"
#include "model/tensor_table.h"

namespace ad::cuda {

namespace {

void ops_check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) {
    std::string detail = ops_last_error();
    if (detail.empty()) detail = cudaGetErrorString(err);
    throw std::runtime_error(std::string("CUDA ") + what + " failed: " + detail);
  }
}

template <class T>
void upload(DeviceArray<T>& dst, const T* src, int64_t n, cudaStream_t s) {
  T* p = dst.ensure(std::max<int64_t>(n, 1));
  if (n > 0) ADL_CHECK(cudaMemcpyAsync(p, src, sizeof(T) * n, cudaMemcpyHostToDevice, s));
}

template <class T>
void download(T* dst, const T* src, int64_t n, cudaStream_t s) {
  if (dst && n > 0) ADL_CHECK(cudaMemcpyAsync(dst, src, sizeof(T) * n, cudaMemcpyDeviceToHost, s));
}

template <class T>
void copy_d2d(DeviceArray<T>& dst, const T* src, int64_t n, cudaStream_t s) {
  T* p = dst.ensure(std::max<int64_t>(n, 1));
  if (n > 0) ADL_CHECK(cudaMemcpyAsync(p, src, sizeof(T) * n, cudaMemcpyDeviceToDevice, s));
}

// ---- the work of the profiled launch sites (DeviceWork, device_profiler.h), from their shapes.
// Elementwise sites count ~the FLOPs of their arithmetic, as the CPU profiler does.
constexpr int kBf16 = 2, kF32 = 4;

// A linear over T rows, y (=|+=) x·Wᵀ: bf16 x and W, f32 y.
DeviceWork linear_work(int64_t T, int64_t in, int64_t out, bool accumulate) { return gemm_work(T, out, in, kBf16, kBf16, kF32, accumulate); }

// Its backward: dx (=|+=) dy·W, and dW += dyᵀ·x when the base trains.
DeviceWork linear_bwd_work(int64_t T, int64_t in, int64_t out, bool accumulate_dx, bool weight_grad) {
  const DeviceWork dx = gemm_work(T, in, out, kBf16, kBf16, kF32, accumulate_dx);
  return weight_grad ? dx + gemm_work(out, in, T, kBf16, kBf16, kF32, true) : dx;
}

// Attention over a batch's spans: row i of a span sees pos0 + i + 1 keys; each span's keys and
// values are read once (bf16). FLOPs per (query, key) pair and head: 4·hd forward (Q·Kᵀ, P·V),
// 10·hd backward (its five products: S recomputed, dP, dV, dQ, dK — FlashAttention-2's count).
DeviceWork attention_work(const model::Config& c, const std::vector<SlotSpan>& spans, int64_t T, bool backward) {
  double pairs = 0, keys = 0;
  for (const SlotSpan& sp : spans) {
    pairs += double(sp.rows) * sp.pos0 + double(sp.rows) * (sp.rows + 1) / 2;
    keys += sp.pos0 + sp.rows;
  }
  const double kv = keys * 2.0 * c.kv_dim() * kBf16, per_dim = pairs * c.heads * c.head_dim;
  if (!backward) return {2.0 * T * c.q_dim() * kBf16 + kv, 4.0 * per_dim};  // q in, out
  // q, out (bf16), dout, dq (f32), dk, dv (f32), lse and delta per head
  return {T * (c.q_dim() * (2.0 * kBf16 + 2.0 * kF32) + 2.0 * c.kv_dim() * kF32 + 2.0 * c.heads * kF32) + kv, 10.0 * per_dim};
}

// RMSNorm forward over `rows` rows of n: f32 in, bf16 out (and a taped f32 copy of the input).
DeviceWork rmsnorm_work(int64_t rows, int64_t n, bool taped) { return stream_work(double(rows) * n, kF32 + kBf16 + (taped ? 2 * kF32 : 0), 4); }
// Its backward: x and dy read, dx read and written (accumulated), f32.
DeviceWork rmsnorm_bwd_work(int64_t rows, int64_t n) { return stream_work(double(rows) * n, 4 * kF32, 10); }
// An f32 → bf16 cast of n elements.
DeviceWork cast_work(int64_t n) { return stream_work(double(n), kF32 + kBf16, 0); }

// Logits rows per chunk: a chunk's logits (bytes_per_logit: f32 logits, plus their bf16 gradient
// in the backward, plus a reference's) take ≤ 1/8 of the device memory free now, clamped to
// [256 MiB, 2 GiB] — few large chunks keep the LM-head products' tiles full and read the f32
// weight gradient fewer times (at 256 MiB a 0.6B model's backward spent 28% of its step there) —
// and ≤ 32768 rows (logit_stats takes at most 65535 rows per call).
int64_t logits_chunk(int64_t rows, int64_t vocab, int64_t bytes_per_logit) {
  int64_t budget = 256ll << 20;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess)
    budget = std::clamp<int64_t>(static_cast<int64_t>(free_bytes / 8), 256ll << 20, 2ll << 30);
  else
    cudaGetLastError();
  const int64_t by_memory = budget / (bytes_per_logit * std::max<int64_t>(vocab, 1));
  return std::max<int64_t>(1, std::min<int64_t>({rows, by_memory, int64_t{32768}}));
}

}  // namespace

// ------------------------------------------------------------------ DeviceArray

namespace {
// Bytes every DeviceArray of this process holds now, and the most since the last reset.
std::atomic<int64_t> g_allocated{0}, g_peak_allocated{0};

void count_allocation(int64_t bytes) {
  const int64_t now = g_allocated.fetch_add(bytes) + bytes;
  int64_t peak = g_peak_allocated.load();
  while (now > peak && !g_peak_allocated.compare_exchange_weak(peak, now)) {
  }
}
}  // namespace

int64_t device_arrays_allocated() { return g_allocated.load(); }
int64_t device_arrays_peak() { return g_peak_allocated.load(); }
void device_arrays_reset_peak() { g_peak_allocated.store(g_allocated.load()); }

template <class T>
DeviceArray<T>::~DeviceArray() {
  release();
}
template <class T>
void DeviceArray<T>::release() {
  if (p_) {
    cudaFree(p_);  // no throw from destructors; errors here are reported by the next call
    count_allocation(-static_cast<int64_t>(sizeof(T)) * n_);
  }
  p_ = nullptr;
  n_ = 0;
}
template <class T>
T* DeviceArray<T>::ensure(int64_t n) {
  if (n <= n_ && p_) return p_;
  release();
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, sizeof(T) * static_cast<size_t>(std::max<int64_t>(n, 1)));
  if (err != cudaSuccess) {
    cudaGetLastError();
    throw std::runtime_error("out of device memory allocating " + std::to_string(sizeof(T) * n) + " bytes (" +
                             cudaGetErrorString(err) + ")");
  }
  p_ = static_cast<T*>(p);
  n_ = std::max<int64_t>(n, 1);
  count_allocation(static_cast<int64_t>(sizeof(T)) * n_);
  return p_;
}
template class DeviceArray<float>;
template class DeviceArray<bf16>;
template class DeviceArray<int32_t>;
template class DeviceArray<int64_t>;
template class DeviceArray<uint64_t>;
template class DeviceArray<double>;
template class DeviceArray<unsigned char>;
template class DeviceArray<SamplingParams>;
template class DeviceArray<GradClip>;
template class DeviceArray<AttentionTile>;
template class DeviceArray<float2>;
template class DeviceArray<AdamWTensor>;

// ------------------------------------------------------------------ KV cache

CudaCache::CudaCache(CudaModel& model, int slots, int capacity)
    : owner_(&model), slots_(slots), capacity_(capacity), kv_dim_(model.config().kv_dim()), layers_(model.config().layers),
      length_(slots > 0 ? slots : 0, 0), tokens_(slots > 0 ? slots : 0) {
  if (slots <= 0 || capacity <= 0) throw std::invalid_argument("KV cache needs at least one slot and one position");
  model.activate();
  layer_elems_ = static_cast<int64_t>(slots) * capacity * kv_dim_;
  k_.ensure(layer_elems_ * layers_);
  v_.ensure(layer_elems_ * layers_);
}

void CudaCache::append_tokens(int slot, const int32_t* toks, int n) {
  tokens_[slot].insert(tokens_[slot].end(), toks, toks + n);
  length_[slot] += n;
}

void CudaCache::copy_prefix(int src, int dst, int len) {
  if (src < 0 || src >= slots_ || dst < 0 || dst >= slots_) throw std::out_of_range("KV cache slot out of range");
  if (len > length_[src]) throw std::out_of_range("copy_prefix: source slot is shorter than the requested prefix");
  if (src == dst) {
    truncate(dst, len);
    return;
  }
  owner_->activate();
  for (int l = 0; l < layers_; ++l) cache_copy_positions(KVLayer{keys(l), values(l), capacity_, kv_dim_}, src, dst, len, owner_->stream());
  ADL_CHECK(cudaStreamSynchronize(owner_->stream()));
  tokens_[dst].assign(tokens_[src].begin(), tokens_[src].begin() + len);
  length_[dst] = len;
}

void CudaCache::truncate(int slot, int len) {
  if (slot < 0 || slot >= slots_ || len < 0 || len > length_[slot]) throw std::out_of_range("truncate beyond the slot's length");
  tokens_[slot].resize(len);
  length_[slot] = len;
}

void CudaCache::clear() {
  for (int s = 0; s < slots_; ++s) truncate(s, 0);
}

int64_t CudaCache::bytes() const { return 2 * layer_elems_ * layers_ * static_cast<int64_t>(sizeof(bf16)); }

// ------------------------------------------------------------------ weights

CudaModel::CudaModel(const model::Config& cfg, int device) : cfg_(cfg), device_(device) {
  if (cfg_.vocab <= 0 || cfg_.hidden <= 0 || cfg_.intermediate <= 0 || cfg_.layers <= 0 || cfg_.heads <= 0 || cfg_.kv_heads <= 0 ||
      cfg_.head_dim <= 0)
    throw std::invalid_argument("the model configuration has a non-positive dimension");
  if (cfg_.head_dim % 2 != 0) throw std::invalid_argument("head_dim must be even for RoPE");
  if (cfg_.head_dim > 256) throw std::invalid_argument("the CUDA backend supports head_dim up to 256");
  if (cfg_.heads % cfg_.kv_heads != 0) throw std::invalid_argument("num_attention_heads must be a multiple of num_key_value_heads");
  if (cfg_.hidden > 12288) throw std::invalid_argument("the CUDA backend supports hidden sizes up to 12288");
  activate();
  ops_check(gemm_init(), "GEMM initialization");
  ADL_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {  // the destructor does not run when the constructor throws: free the stream here
    std::vector<double> inv(cfg_.head_dim / 2);
    for (int i = 0; i < cfg_.head_dim / 2; ++i) inv[i] = kernels::rope_inv_freq(i, cfg_.head_dim, cfg_.rope_theta, cfg_.rope_scaling);
    upload(inv_freq_, inv.data(), static_cast<int64_t>(inv.size()), stream_);
    sync();
  } catch (...) {
    cudaStreamDestroy(stream_);
    stream_ = nullptr;
    throw;
  }
}

CudaModel::~CudaModel() {
  cudaSetDevice(device_);
  if (stream_) {
    cudaStreamSynchronize(stream_);
    cudaStreamDestroy(stream_);
  }
}

void CudaModel::activate() const { ADL_CHECK(cudaSetDevice(device_)); }

void CudaModel::sync() {
  cudaError_t err = cudaStreamSynchronize(stream_);
  if (err != cudaSuccess) layers_check(err, "cudaStreamSynchronize (a kernel of this step failed)");
}

void CudaModel::set_tensor(const std::string& name, const std::vector<int64_t>& shape, const float* host) {
  activate();
  int64_t n = 1;
  for (auto d : shape) n *= d;
  Param& p = params_[name];
  p.shape = shape;
  p.n = n;
  p.role = name == model::tensor_name(model::TensorId::kScore) ? Role::kScore : Role::kBase;
  upload(p.w32, host, n, stream_);
  if (shape.size() >= 2) cast_f32_to_bf16(p.w32.get(), p.w16.ensure(n), n, stream_);
  sync();
  finalized_ = false;
}

CudaModel::Param* CudaModel::find(const std::string& name) {
  auto it = params_.find(name);
  return it == params_.end() ? nullptr : &it->second;
}

CudaModel::Param& CudaModel::param(const std::string& name) {
  Param* p = find(name);
  if (!p) throw std::invalid_argument("missing tensor " + name);
  return *p;
}

static void check_shape(const std::string& name, const std::vector<int64_t>& have, const std::vector<int64_t>& want) {
  if (have != want) throw std::invalid_argument("tensor " + name + " has the wrong shape; expected " + model::shape_string(want));
}

const float* CudaModel::f32_of(const std::string& name, const std::vector<int64_t>& shape) {
  Param& p = param(name);
  check_shape(name, p.shape, shape);
  return p.w32.get();
}

const bf16* CudaModel::bf16_of(const std::string& name, const std::vector<int64_t>& shape) {
  Param& p = param(name);
  check_shape(name, p.shape, shape);
  return p.w16.get();
}

// Where finalize() keeps a table entry's device pointer: bf16 for matrices (the GEMMs' inputs),
// f32 for norm weights and biases.
void CudaModel::bind(const model::ModelTensor& t) {
  using model::TensorId;
  Layer* w = t.layer >= 0 ? &layers_[t.layer] : nullptr;
  const std::vector<int64_t>& shape = t.shape;
  auto matrix = [&]() { return bf16_of(t.name, shape); };
  auto vector = [&]() { return f32_of(t.name, shape); };
  switch (t.spec->id) {
    case TensorId::kEmbed: embed_ = matrix(); return;
    case TensorId::kFinalNorm: final_norm_ = vector(); return;
    case TensorId::kLmHead: lm_head_ = matrix(); return;
    case TensorId::kAttnNorm: w->attn_norm = vector(); return;
    case TensorId::kWq: w->wq = matrix(); return;
    case TensorId::kWk: w->wk = matrix(); return;
    case TensorId::kWv: w->wv = matrix(); return;
    case TensorId::kBq: w->bq = vector(); return;
    case TensorId::kBk: w->bk = vector(); return;
    case TensorId::kBv: w->bv = vector(); return;
    case TensorId::kWo: w->wo = matrix(); return;
    case TensorId::kBo: w->bo = vector(); return;
    case TensorId::kQNorm: w->q_norm = vector(); return;
    case TensorId::kKNorm: w->k_norm = vector(); return;
    case TensorId::kMlpNorm: w->mlp_norm = vector(); return;
    case TensorId::kWGate: w->wg = matrix(); return;
    case TensorId::kWUp: w->wu = matrix(); return;
    case TensorId::kWDown: w->wd = matrix(); return;
    case TensorId::kScore:
      score_ = matrix();
      score_labels_ = static_cast<int>(shape[0]);
      return;
    case TensorId::kCount: break;
  }
  throw std::invalid_argument("the CUDA backend has no place for tensor " + t.name);
}

void CudaModel::finalize() {
  const model::Config& c = cfg_;
  layers_.assign(c.layers, Layer{});
  embed_ = lm_head_ = score_ = nullptr;
  score_labels_ = 0;
  final_norm_ = nullptr;
  for (const model::ModelTensor& t : model::model_tensors(c))
    if (t.need == model::Need::REQUIRED || find(t.name)) bind(t);
  lm_head_name_ = model::tensor_name(c.tie_embeddings ? model::TensorId::kEmbed : model::TensorId::kLmHead);
  if (c.tie_embeddings) lm_head_ = embed_;
  finalized_ = true;
}

int64_t CudaModel::parameter_bytes() const {
  int64_t n = 0;
  for (const auto& kv : params_) n += kv.second.n * (kv.second.w16.get() ? 6 : 4);
  return n;
}

std::vector<std::string> CudaModel::tensor_names() const {
  std::vector<std::string> out;
  for (const auto& kv : params_) out.push_back(kv.first);
  return out;
}

const std::vector<int64_t>& CudaModel::tensor_shape(const std::string& name) const {
  auto it = params_.find(name);
  if (it == params_.end()) throw std::invalid_argument("the model has no parameter named " + name);
  return it->second.shape;
}

void CudaModel::read_tensor(const std::string& name, float* host, int64_t n) {
  activate();
  Param* p = find(name);
  if (!p) throw std::invalid_argument("the model has no parameter named " + name);
  if (n != p->n) throw std::invalid_argument("parameter " + name + " has " + std::to_string(p->n) + " elements, got " + std::to_string(n));
  download(host, p->w32.get(), n, stream_);
  sync();
}

void CudaModel::write_tensor(const std::string& name, const float* host, int64_t n) {
  activate();
  Param* p = find(name);
  if (!p) throw std::invalid_argument("the model has no parameter named " + name);
  if (n != p->n) throw std::invalid_argument("parameter " + name + " has " + std::to_string(p->n) + " elements, got " + std::to_string(n));
  upload(p->w32, host, n, stream_);
  if (p->w16.get()) cast_f32_to_bf16(p->w32.get(), p->w16.get(), n, stream_);
  sync();
}

// ------------------------------------------------------------------ forward

namespace {
// AUTODIDACT_SPLIT_SAMPLING=0 keeps every batch on the one-block-per-row sampler (read at every
// step, as AUTODIDACT_ATTENTION, so a benchmark can compare the two in one process).
bool split_sampling_allowed() {
  const char* env = std::getenv("AUTODIDACT_SPLIT_SAMPLING");
  return !(env && std::string(env) == "0");
}

// Rows spread across blocks when the batch is too small to fill the device and every row can
// split (ops.h sample_tokens_split: the same tokens).
bool split_sampling(const std::vector<SamplingParams>& params, int64_t vocab) {
  if (!split_sampling_allowed() || sample_split_chunks(static_cast<int64_t>(params.size()), vocab) < 2) return false;
  return std::all_of(params.begin(), params.end(), [&](const SamplingParams& p) { return split::splits(p, vocab); });
}

bool tensor_core_attention_allowed() {
  const char* env = std::getenv("AUTODIDACT_ATTENTION");
  return !(env && std::string(env) == "warp");
}
}  // namespace

void CudaModel::plan_attention(AttentionPlan& plan, std::vector<SlotSpan> spans, bool with_keys) {
  const model::Config& c = cfg_;
  plan.tensor_cores = tensor_core_attention_allowed() && attention_tc_supported(c.head_dim, c.heads, c.kv_heads);
  plan.spans = std::move(spans);
  plan.n_q_tiles = plan.n_k_tiles = plan.max_keys = 0;
  if (!plan.tensor_cores) return;
  for (const SlotSpan& s : plan.spans) plan.max_keys = std::max(plan.max_keys, s.pos0 + s.rows);
  plan.tile_rows = attention_q_tile_rows(c.heads, c.kv_heads);
  const std::vector<AttentionTile> q = plan_attention_q_tiles(plan.spans, plan.tile_rows);
  plan.n_q_tiles = static_cast<int>(q.size());
  upload(plan.q_tiles, q.data(), static_cast<int64_t>(q.size()), stream_);
  if (with_keys) {
    const std::vector<AttentionTile> k = plan_attention_key_tiles(plan.spans);
    plan.n_k_tiles = static_cast<int>(k.size());
    upload(plan.k_tiles, k.data(), static_cast<int64_t>(k.size()), stream_);
  }
}

void CudaModel::attention_forward(const bf16* q, const KVLayer& kv, int64_t T, bf16* out, float* lse) {
  const model::Config& c = cfg_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (!attention_.tensor_cores) {
    attention_fwd(q, kv, TokenMap{d_slot_.get(), d_pos_.get()}, T, c.heads, c.kv_heads, c.head_dim, scale, out, lse, stream_);
    return;
  }
  const size_t work = attention_fwd_work_floats(T, c.heads, c.head_dim);
  attention_tc_fwd(q, kv, attention_.q_tiles.get(), attention_.n_q_tiles, attention_.tile_rows, T, attention_.max_keys, c.heads,
                   c.kv_heads, c.head_dim, scale, out, lse, attention_work_.ensure(static_cast<int64_t>(work)), work, stream_);
}

void CudaModel::linear_nt(const bf16* x, int64_t T, const bf16* W, int64_t in, int64_t out, const float* bias, float* y,
                          bool accumulate) {
  GemmArgs a;
  a.layout = GemmLayout::NT;
  a.M = T;
  a.N = out;
  a.K = in;
  a.A = x;
  a.lda = in;
  a.B = W;
  a.ldb = in;
  a.C = y;
  a.ldc = out;
  a.c_type = DType::F32;
  a.beta = accumulate ? 1.f : 0.f;
  a.bias = bias;
  ops_check(gemm(a, stream_), "GEMM (x·Wᵀ)");
}

void CudaModel::lm_head(const bf16* hidden, int64_t rows, float* logits) {
  linear_nt(hidden, rows, lm_head_, cfg_.hidden, cfg_.vocab, nullptr, logits, false);
}

// One decoder layer on the T rows of x_ (residual in, residual out), as Transformer::forward_layer.
void CudaModel::forward_layer(int l, CudaCache& cache, int64_t T, LayerTape* lt) {
  const model::Config& c = cfg_;
  const int64_t H = c.hidden, I = c.intermediate, qd = c.q_dim(), kvd = c.kv_dim();
  const Layer& w = layers_[l];
  float* x = x_.get();
  bf16* xn = lt ? lt->xn1.ensure(T * H) : xn_b_.get();
  {
    ADC_PROFILE_WORK("fwd.attn_norm", stream_, rmsnorm_work(T, H, lt));
    if (lt) copy_d2d(lt->x_in, x, T * H, stream_);
    rmsnorm_fwd(x, w.attn_norm, xn, nullptr, nullptr, T, static_cast<int>(H), c.rms_eps, stream_);
  }
  float* q32 = lt ? lt->q_raw.ensure(T * qd) : q32_.get();
  float* k32 = lt ? lt->k_raw.ensure(T * kvd) : k32_.get();
  {
    ADC_PROFILE_WORK("fwd.qkv_proj", stream_, linear_work(T, H, qd, false) + linear_work(T, H, kvd, false) + linear_work(T, H, kvd, false));
    linear_nt(xn, T, w.wq, H, qd, w.bq, q32, false);
    linear_nt(xn, T, w.wk, H, kvd, w.bk, k32, false);
    linear_nt(xn, T, w.wv, H, kvd, w.bv, v32_.get(), false);
    if (has_lora()) {
      lora_forward(l, model::kQ, xn, T, q32);
      lora_forward(l, model::kK, xn, T, k32);
      lora_forward(l, model::kV, xn, T, v32_.get());
    }
  }
  bf16* qb = lt ? lt->q.ensure(T * qd) : q_b_.get();
  const TokenMap map{d_slot_.get(), d_pos_.get()};
  const KVLayer kv{cache.keys(l), cache.values(l), cache.capacity(), static_cast<int>(kvd)};
  {
    // q, k, v f32 in; q bf16 out, k, v bf16 into the cache; the RoPE table row
    ADC_PROFILE_WORK("fwd.qk_norm_rope", stream_,
                     stream_work(double(T), (qd + 2.0 * kvd) * (kF32 + kBf16) + c.head_dim * kF32, (w.q_norm ? 7.0 : 3.0) * (qd + kvd)));
    qk_rope_to_cache(q32, k32, v32_.get(), w.q_norm, w.k_norm, rope_now_, map, T, c.heads, c.kv_heads, c.head_dim, c.rms_eps, qb,
                     kv, stream_);
  }
  bf16* att = lt ? lt->att.ensure(T * qd) : att_b_.get();
  float* lse = lt ? lt->lse.ensure(T * c.heads) : nullptr;
  {
    ADC_PROFILE_WORK("fwd.attention", stream_, attention_work(c, attention_.spans, T, false));
    attention_forward(qb, kv, T, att, lse);
  }
  {
    ADC_PROFILE_WORK("fwd.o_proj", stream_, linear_work(T, qd, H, true));
    linear_nt(att, T, w.wo, qd, H, w.bo, x, true);
    if (has_lora()) lora_forward(l, model::kO, att, T, x);
  }
  bf16* xn2 = lt ? lt->xn2.ensure(T * H) : xn_b_.get();
  {
    ADC_PROFILE_WORK("fwd.mlp_norm", stream_, rmsnorm_work(T, H, lt));
    if (lt) copy_d2d(lt->x_mid, x, T * H, stream_);
    rmsnorm_fwd(x, w.mlp_norm, xn2, nullptr, nullptr, T, static_cast<int>(H), c.rms_eps, stream_);
  }
  float* g = lt ? lt->gate.ensure(T * I) : g32_.get();
  float* u = lt ? lt->up.ensure(T * I) : u32_.get();
  {
    ADC_PROFILE_WORK("fwd.gate_up_proj", stream_, linear_work(T, H, I, false) + linear_work(T, H, I, false));
    linear_nt(xn2, T, w.wg, H, I, nullptr, g, false);
    linear_nt(xn2, T, w.wu, H, I, nullptr, u, false);
    if (has_lora()) {
      lora_forward(l, model::kGate, xn2, T, g);
      lora_forward(l, model::kUp, xn2, T, u);
    }
  }
  {
    ADC_PROFILE_WORK("fwd.swiglu", stream_, stream_work(double(T) * I, 2 * kF32 + kBf16, 6));
    swiglu_fwd(g, u, h_b_.get(), T * I, stream_);
  }
  ADC_PROFILE_WORK("fwd.down_proj", stream_, linear_work(T, I, H, true));
  linear_nt(h_b_.get(), T, w.wd, I, H, nullptr, x, true);
  if (has_lora()) lora_forward(l, model::kDown, h_b_.get(), T, x);
}

int64_t CudaModel::forward(CudaCache& cache, const std::vector<model::BatchEntry>& batch, const int32_t* tokens, bool tape) {
  if (!finalized_) throw std::logic_error("the CUDA model is not finalized");
  if (cache.owner() != this) throw std::invalid_argument("this KV cache belongs to another model");
  const model::Config& c = cfg_;
  int64_t T = 0;
  std::vector<int> seen(cache.slots(), 0);
  for (const auto& e : batch) {
    if (e.slot < 0 || e.slot >= cache.slots()) throw std::out_of_range("batch names a KV cache slot that does not exist");
    if (seen[e.slot]++) throw std::invalid_argument("a KV cache slot appears twice in one batch");
    if (e.count <= 0) throw std::invalid_argument("every batch entry needs at least one token");
    if (e.adapter != model::kBaseOnly && (e.adapter < 0 || e.adapter >= std::max<int>(static_cast<int>(adapter_sets_.size()), 1)))
      throw std::out_of_range("batch entry names adapter " + std::to_string(e.adapter) + ", which is not attached");
    if (cache.length(e.slot) + e.count > cache.capacity())
      throw std::out_of_range("sequence would exceed the KV cache capacity (" + std::to_string(cache.capacity()) + " positions)");
    T += e.count;
  }
  for (int64_t t = 0; t < T; ++t)
    if (tokens[t] < 0 || tokens[t] >= c.vocab)
      throw std::out_of_range("token id " + std::to_string(tokens[t]) + " is outside the vocabulary (" + std::to_string(c.vocab) + ")");
  std::vector<int32_t> token_slot(T), token_pos(T), out_rows;
  std::vector<SlotSpan> spans;
  {
    int64_t t = 0;
    for (const auto& e : batch) {
      spans.push_back({e.slot, static_cast<int>(t), cache.length(e.slot), e.count});
      for (int i = 0; i < e.count; ++i, ++t) {
        token_slot[t] = e.slot;
        token_pos[t] = cache.length(e.slot) + i;
        if ((e.out_mode == 2 && i >= e.out_from) || (e.out_mode == 1 && i == e.count - 1)) out_rows.push_back(static_cast<int32_t>(t));
      }
    }
  }
  const int64_t R = static_cast<int64_t>(out_rows.size());
  const int64_t H = c.hidden, I = c.intermediate, qd = c.q_dim(), kvd = c.kv_dim();
  activate();
  // scratch
  x_.ensure(T * H);
  xn_b_.ensure(T * H);
  q32_.ensure(T * qd);
  k32_.ensure(T * kvd);
  v32_.ensure(T * kvd);
  q_b_.ensure(T * qd);
  att_b_.ensure(T * qd);
  g32_.ensure(T * I);
  u32_.ensure(T * I);
  h_b_.ensure(T * I);
  hid_b_.ensure(std::max<int64_t>(R, 1) * H);
  upload(d_tokens_, tokens, T, stream_);
  upload(d_slot_, token_slot.data(), T, stream_);
  upload(d_pos_, token_pos.data(), T, stream_);
  upload(d_out_rows_, out_rows.data(), R, stream_);
  plan_attention(attention_, spans, false);
  runs_ = model::adapter_runs(batch);

  if (tape) {
    tape_.valid = false;
    tape_.T = T;
    tape_.R = R;
    tape_.tokens.assign(tokens, tokens + T);
    tape_.token_slot = token_slot;
    tape_.token_pos = token_pos;
    tape_.out_rows = out_rows;
    tape_.adapter_runs = runs_;
    plan_attention(tape_.attention, spans, true);
    if (static_cast<int>(tape_.layers.size()) != c.layers) tape_.layers = std::vector<LayerTape>(c.layers);
  }
  auto kernels = [&] {
    {
      // bf16 embedding rows to f32 x; the RoPE table (cos, sin per half dimension) from each position
      ADC_PROFILE_WORK("fwd.embed_rope_table", stream_, stream_work(double(T), H * (kBf16 + kF32) + c.head_dim * kF32 + 2 * 4, 0));
      embed_gather(embed_, d_tokens_.get(), T, static_cast<int>(H), x_.get(), stream_);
      DeviceArray<float2>& cs = tape ? tape_.rope_cs : rope_cs_;
      rope_now_ = cs.ensure(T * (c.head_dim / 2));
      rope_table(d_pos_.get(), inv_freq_.get(), T, c.head_dim, cs.get(), stream_);
    }
    for (int l = 0; l < c.layers; ++l) {
      LayerTape* lt = tape ? &tape_.layers[l] : nullptr;
      if (tape && tape_.checkpointed) {  // keep the layer's input only; the rest goes to one shared tape
        copy_d2d(tape_.layers[l].x_in, x_.get(), T * H, stream_);
        lt = &tape_.work;
      }
      forward_layer(l, cache, T, lt);
    }
    {
      ADC_PROFILE_WORK("fwd.final_norm", stream_, rmsnorm_work(R, H, false) + stream_work(double(T) * H, tape ? 2 * kF32 : 0, 0));
      if (tape) copy_d2d(tape_.x_final, x_.get(), T * H, stream_);
      rmsnorm_gather_fwd(x_.get(), d_out_rows_.get(), R, final_norm_, hid_b_.get(), nullptr, static_cast<int>(H), c.rms_eps, stream_);
    }
  };
  const bool decode = std::all_of(batch.begin(), batch.end(), [](const model::BatchEntry& e) { return e.count == 1; });
  if (decode && !tape && !has_lora() && !device_profiler_enabled() && cuda_graphs_allowed()) {
    auto key = [&] { return decode_graph_key(cache, T, R); };
    graphs_.run(key(), stream_, kernels, key);
  } else {
    kernels();
  }
  sync();
  int64_t t = 0;
  for (const auto& e : batch) {
    cache.append_tokens(e.slot, tokens + t, e.count);
    t += e.count;
  }
  return R;
}

// What a decode forward's launches depend on beyond the contents of device memory (graphs.h):
// its sizes, its attention launch shape, and the address of every buffer its kernels touch.
DecodeGraphKey CudaModel::decode_graph_key(const CudaCache& cache, int64_t T, int64_t R) const {
  const model::Config& c = cfg_;
  DecodeGraphKey k;
  k.rows = T;
  k.out_rows = R;
  k.capacity = cache.capacity();
  k.tensor_cores = attention_.tensor_cores;
  if (attention_.tensor_cores) {
    k.q_tiles = attention_.n_q_tiles;
    k.tile_rows = attention_.tile_rows;
    const AttentionSplit split = attention_tc_fwd_split(attention_.n_q_tiles, T, attention_.max_keys, c.heads, c.kv_heads, c.head_dim,
                                                        attention_fwd_work_floats(T, c.heads, c.head_dim));
    k.splits = split.splits;
    k.split_tiles = split.split_tiles;
  }
  k.gemm_generation = gemm_workspace_generation();
  k.buffers = {embed_, final_norm_, inv_freq_.get(), d_tokens_.get(), d_slot_.get(), d_pos_.get(), d_out_rows_.get(), x_.get(),
               xn_b_.get(), q32_.get(), k32_.get(), v32_.get(), q_b_.get(), att_b_.get(), g32_.get(), u32_.get(), h_b_.get(),
               hid_b_.get(), rope_cs_.get(), attention_work_.get(), attention_.q_tiles.get()};
  for (const Layer& w : layers_)
    k.buffers.insert(k.buffers.end(), {w.attn_norm, w.mlp_norm, w.q_norm, w.k_norm, w.bq, w.bk, w.bv, w.bo, w.wq, w.wk, w.wv, w.wo,
                                       w.wg, w.wu, w.wd});
  for (int l = 0; l < c.layers; ++l) k.buffers.insert(k.buffers.end(), {cache.keys(l), cache.values(l)});
  return k;
}

// ------------------------------------------------------------------ step (generation / scoring)

void CudaModel::step(CudaCache& cache, ad_cuda_step& s, CudaModel* ref, CudaCache* ref_cache) {
  const int64_t V = cfg_.vocab, H = cfg_.hidden;
  if (s.topk < 0 || s.topk > 64) throw std::invalid_argument("topK statistics must be between 0 and 64");
  std::vector<model::BatchEntry> batch;
  for (int e = 0; e < s.n_entries; ++e) {
    const ad_cuda_entry& en = s.entries[e];
    if (en.out_mode < 0 || en.out_mode > 2) throw std::invalid_argument("outModes entries must be 0, 1 or 2");
    if (en.out_mode == 2 && en.out_from < 0) throw std::invalid_argument("outFrom entries must be ≥ 0");
    batch.push_back({en.slot, en.count, en.out_mode, en.out_from, en.adapter});
  }
  int64_t total = 0;
  for (const auto& e : batch) total += e.count;
  if (total != s.n_tokens) throw std::invalid_argument("tokens.length must equal the sum of counts");
  // Row → entry (for sampling), as the CPU step.
  std::vector<int> row_entry;
  for (size_t e = 0; e < batch.size(); ++e) {
    const int n = batch[e].out_mode == 2 ? std::max(0, batch[e].count - batch[e].out_from) : (batch[e].out_mode == 1 ? 1 : 0);
    for (int i = 0; i < n; ++i) row_entry.push_back(static_cast<int>(e));
  }
  if (static_cast<int64_t>(row_entry.size()) > s.rows_capacity)
    throw std::invalid_argument("the step produces " + std::to_string(row_entry.size()) + " rows, more than the output capacity");
  if (ref) {
    if (ref->config().vocab != V) throw std::invalid_argument("the reference model has another vocabulary size");
    if (!ref_cache || ref_cache->owner() != ref) throw std::invalid_argument("reference.cache belongs to another model");
    if (ref->device() != device_) throw std::invalid_argument("the reference model is on another device");
  }

  const int64_t R = forward(cache, batch, s.tokens, false);
  s.rows = R;
  // The policy's final hidden rows; kept aside when the reference is this same model (its forward
  // below would overwrite hid_b_).
  const bf16* own_hidden = hid_b_.get();
  if (ref == this) {
    copy_d2d(hid_keep_b_, hid_b_.get(), R * H, stream_);
    own_hidden = hid_keep_b_.get();
  }
  if (ref) {
    ref->activate();
    const int64_t rr = ref->forward(*ref_cache, ref == this ? batch : model::without_adapters(batch), s.tokens, false);
    if (rr != R) throw std::runtime_error("reference model produced a different number of rows");
    activate();
  }
  if (R == 0) return;
  const int K = s.topk;
  const int64_t chunk = logits_chunk(R, V, ref ? 8 : 4);
  float* logits = logits_.ensure(chunk * V);
  float* ref_logits = ref ? ref_logits_.ensure(chunk * V) : nullptr;
  float* stats = stat_f_.ensure(chunk * (9 + static_cast<int64_t>(K)));
  int32_t* stat_ids = stat_i_.ensure(std::max<int64_t>(chunk * K, 1));
  const size_t ws = logit_stats_workspace_bytes(chunk, V, K);
  const size_t sws = s.sampling ? std::max(sample_workspace_bytes(chunk, V), sample_split_workspace_bytes(chunk, V)) : 0;
  unsigned char* workspace = workspace_.ensure(static_cast<int64_t>(std::max(ws, sws)) + 256);
  int32_t* d_targets = d_targets_.ensure(chunk);
  std::vector<int32_t> row_targets(chunk);

  for (int64_t r0 = 0; r0 < R; r0 += chunk) {
    const int64_t n = std::min(chunk, R - r0);
    {
      ADC_PROFILE_WORK("step.lm_head", stream_, linear_work(n, H, V, false));
      lm_head(own_hidden + r0 * H, n, logits);
    }
    if (ref) {
      ref->lm_head(ref->hid_b_.get() + r0 * H, n, ref_logits);  // on the reference's stream
      ref->sync();
    }
    for (int64_t i = 0; i < n; ++i) row_targets[i] = s.targets ? s.targets[r0 + i] : -1;
    if (s.sampling) {
      ADC_PROFILE_WORK("step.sampling", stream_, stream_work(double(n) * V, kF32, 0));  // a selection: bytes, no arithmetic counted
      // Rows of entries that sample (out_mode 1), in chunk order; the draw's position is the
      // slot's length after this step (as the CPU step).
      std::vector<SamplingParams> params(n);
      std::vector<uint64_t> positions(n);
      std::vector<int64_t> hist_off(n + 1, 0), gen_off(n + 1, 0);
      std::vector<int32_t> hist, gen;
      for (int64_t i = 0; i < n; ++i) {
        const int e = row_entry[r0 + i];
        const ad_cuda_sampling& sp = s.sampling[e];
        SamplingParams& p = params[i];
        p.temperature = sp.temperature;
        p.top_k = sp.top_k;
        p.top_p = sp.top_p;
        p.min_p = sp.min_p;
        p.repetition_penalty = sp.repetition_penalty;
        p.presence_penalty = sp.presence_penalty;
        p.frequency_penalty = sp.frequency_penalty;
        p.seed = sp.seed;
        p.stream = sp.stream;
        const auto& h = cache.tokens(batch[e].slot);
        positions[i] = h.size();
        const int64_t plen = std::min<int64_t>(std::max(sp.prompt_length, 0), static_cast<int64_t>(h.size()));
        hist.insert(hist.end(), h.begin(), h.end());
        gen.insert(gen.end(), h.begin() + plen, h.end());
        hist_off[i + 1] = static_cast<int64_t>(hist.size());
        gen_off[i + 1] = static_cast<int64_t>(gen.size());
      }
      upload(d_params_, params.data(), n, stream_);
      upload(d_positions_, positions.data(), n, stream_);
      upload(d_hist_, hist.data(), static_cast<int64_t>(hist.size()), stream_);
      upload(d_gen_, gen.data(), static_cast<int64_t>(gen.size()), stream_);
      upload(d_hist_off_, hist_off.data(), n + 1, stream_);
      upload(d_gen_off_, gen_off.data(), n + 1, stream_);
      SampleArgs a;
      a.logits = logits;
      a.dtype = DType::F32;
      a.rows = n;
      a.vocab = V;
      a.row_stride = V;
      a.params = d_params_.get();
      a.positions = d_positions_.get();
      a.history = hist.empty() ? nullptr : d_hist_.get();
      a.history_offsets = hist.empty() ? nullptr : d_hist_off_.get();
      a.generated = gen.empty() ? nullptr : d_gen_.get();
      a.generated_offsets = gen.empty() ? nullptr : d_gen_off_.get();
      a.out_tokens = d_sampled_.ensure(chunk);
      if (split_sampling(params, V)) {
        a.history = a.generated = nullptr;  // no penalties: the ids are not read
        a.history_offsets = a.generated_offsets = nullptr;
        ops_check(sample_tokens_split(a, workspace, sample_split_workspace_bytes(n, V), stream_), "split-row sampling");
      } else {
        ops_check(sample_tokens(a, workspace, sample_workspace_bytes(n, V), stream_), "sampling");
      }
      std::vector<int32_t> sampled(n);
      download(sampled.data(), d_sampled_.get(), n, stream_);
      sync();
      for (int64_t i = 0; i < n; ++i)
        if (batch[row_entry[r0 + i]].out_mode == 1) row_targets[i] = sampled[i];
    }
    ADC_PROFILE_WORK("step.logit_stats", stream_, stream_work(double(n) * V, ref ? 2 * kF32 : kF32, ref ? 8 : 4));
    upload(d_targets_, row_targets.data(), n, stream_);
    LogitStatsArgs la;
    la.logits = logits;
    la.ref = ref_logits;
    la.dtype = DType::F32;
    la.rows = n;
    la.vocab = V;
    la.row_stride = V;
    la.targets = d_targets;
    la.K = K;
    LogitStatsDeviceOut o{stats, stats + chunk, stats + 2 * chunk, stats + 3 * chunk, stats + 4 * chunk,
                          K ? stat_ids : nullptr, K ? stats + 9 * chunk : nullptr,
                          stats + 5 * chunk, stats + 6 * chunk, stats + 7 * chunk, stats + 8 * chunk};
    ops_check(logit_stats(la, o, workspace, ws, stream_), "logit statistics");
    download(s.max_logit ? s.max_logit + r0 : nullptr, o.max_logit, n, stream_);
    download(s.logsumexp ? s.logsumexp + r0 : nullptr, o.logsumexp, n, stream_);
    download(s.entropy ? s.entropy + r0 : nullptr, o.entropy, n, stream_);
    download(s.margin ? s.margin + r0 : nullptr, o.margin, n, stream_);
    download(s.chosen_logprob ? s.chosen_logprob + r0 : nullptr, o.chosen_logprob, n, stream_);
    if (K) {
      download(s.topk_ids ? s.topk_ids + r0 * K : nullptr, o.topk_ids, n * K, stream_);
      download(s.topk_logits ? s.topk_logits + r0 * K : nullptr, o.topk_logits, n * K, stream_);
    }
    if (ref) {
      download(s.k1 ? s.k1 + r0 : nullptr, o.k1, n, stream_);
      download(s.k2 ? s.k2 + r0 : nullptr, o.k2, n, stream_);
      download(s.k3 ? s.k3 + r0 : nullptr, o.k3, n, stream_);
      download(s.kl_exact ? s.kl_exact + r0 : nullptr, o.kl_exact, n, stream_);
    }
    if (s.return_logits && s.logits) download(s.logits + r0 * V, logits, n * V, stream_);
    sync();
    if (s.out_tokens) std::copy(row_targets.begin(), row_targets.begin() + n, s.out_tokens + r0);
  }
}

// ------------------------------------------------------------------ training

void CudaModel::set_trainable(bool base, const std::vector<int>& adapters) {
  activate();
  train_base_ = base;
  for (AdapterSet& set : adapter_sets_) set.trains = false;
  for (int k : adapters) adapter_sets_.at(k).trains = true;
  for (auto& kv : params_) {
    kv.second.grad.release();
    kv.second.m.release();
    kv.second.v.release();
  }
}

bool CudaModel::trains(const Param& p) const {
  switch (p.role) {
    case Role::kBase: return train_base_;
    case Role::kLora: return p.adapter >= 0 && adapter_sets_[p.adapter].trains;
    case Role::kScore: return true;  // with the base, or beside the adapters (as the CPU backend)
  }
  return false;
}

float* CudaModel::grad_of(const std::string& name) {
  Param& p = param(name);
  if (!trains(p)) return nullptr;
  if (!p.grad.get()) {
    p.grad.ensure(p.n);
    ADL_CHECK(cudaMemsetAsync(p.grad.get(), 0, sizeof(float) * p.n, stream_));
  }
  p.written = true;
  return p.grad.get();
}

void CudaModel::zero_grad() {
  activate();
  for (auto& kv : params_) {
    if (kv.second.grad.get()) ADL_CHECK(cudaMemsetAsync(kv.second.grad.get(), 0, sizeof(float) * kv.second.n, stream_));
    kv.second.written = false;
  }
  sync();
}

void CudaModel::train_forward(ad_cuda_train_forward& f, CudaModel* ref) {
  if (f.ref_lora_off && !has_lora()) throw std::invalid_argument("reference 'lora-off' needs LoRA adapters attached");
  if (!lm_head_) throw std::invalid_argument("this model has no LM head (a sequence-classification model scores, it does not generate)");
  const int B = f.n_sequences;
  if (B <= 0) throw std::invalid_argument("lengths and promptLengths must be non-empty and of equal length");
  int capacity = 1;
  std::vector<model::BatchEntry> batch;
  std::vector<int32_t> fed, targets;
  int64_t offset = 0;
  for (int i = 0; i < B; ++i) {
    const int len = f.lengths[i], plen = f.prompt_lengths[i];
    if (plen < 1 || plen >= len) throw std::invalid_argument("every sequence needs a prompt of ≥ 1 token and a completion of ≥ 1 token");
    const int adapter = f.adapters ? f.adapters[i] : 0;
    batch.push_back({i, len - 1, 2, plen - 1, adapter});
    fed.insert(fed.end(), f.tokens + offset, f.tokens + offset + len - 1);
    targets.insert(targets.end(), f.tokens + offset + plen, f.tokens + offset + len);
    capacity = std::max(capacity, len);
    offset += len;
  }
  activate();
  tape_.valid = false;
  score_tape_ = false;
  set_checkpointing(f.checkpoint != 0);
  const int64_t R = forward(reusable_cache(tape_.cache, B, capacity), batch, fed.data(), true);
  if (R > f.rows_capacity) throw std::invalid_argument("more completion rows than the output capacity");
  const int64_t H = cfg_.hidden, V = cfg_.vocab;
  copy_d2d(tape_.hidden, hid_b_.get(), R * H, stream_);
  upload(tape_.targets, targets.data(), R, stream_);
  finish_tape(B);
  f.rows = R;

  // Chosen-token logprob and entropy of each completion row, chunk by chunk.
  auto row_stats = [&](CudaModel& m, const bf16* hidden, float* logp, float* entropy) {
    ADC_PROFILE_WORK("train.row_stats", m.stream_, linear_work(R, H, V, false) + stream_work(double(R) * V, kF32, 4));
    const int64_t chunk = logits_chunk(R, V, 4);
    float* logits = m.logits_.ensure(chunk * V);
    float* st = m.stat_f_.ensure(chunk * 9);
    const size_t ws = logit_stats_workspace_bytes(chunk, V, 0);
    unsigned char* w = m.workspace_.ensure(static_cast<int64_t>(ws) + 256);
    int32_t* tg = m.d_targets_.ensure(chunk);
    for (int64_t r0 = 0; r0 < R; r0 += chunk) {
      const int64_t n = std::min(chunk, R - r0);
      m.lm_head(hidden + r0 * H, n, logits);
      ADL_CHECK(cudaMemcpyAsync(tg, targets.data() + r0, sizeof(int32_t) * n, cudaMemcpyHostToDevice, m.stream_));
      LogitStatsArgs la;
      la.logits = logits;
      la.dtype = DType::F32;
      la.rows = n;
      la.vocab = V;
      la.row_stride = V;
      la.targets = tg;
      LogitStatsDeviceOut o{st, st + chunk, st + 2 * chunk, st + 3 * chunk, st + 4 * chunk, nullptr, nullptr,
                            st + 5 * chunk, st + 6 * chunk, st + 7 * chunk, st + 8 * chunk};
      ops_check(logit_stats(la, o, w, ws, m.stream_), "logit statistics");
      download(logp ? logp + r0 : nullptr, o.chosen_logprob, n, m.stream_);
      download(entropy ? entropy + r0 : nullptr, o.entropy, n, m.stream_);
      m.sync();
    }
  };
  row_stats(*this, tape_.hidden.get(), f.logp, f.entropy);
  tape_.valid = true;
  if (f.ref_lora_off && f.ref_logp) {
    // The reference is this model with its adapters off: the same base weights, no second copy.
    const bool was = lora_enabled_;
    lora_enabled_ = false;
    try {
      forward(reusable_cache(scoring_cache_, B, capacity), batch, fed.data(), false);
    } catch (...) {
      lora_enabled_ = was;
      throw;
    }
    lora_enabled_ = was;
    row_stats(*this, hid_b_.get(), f.ref_logp, nullptr);
  } else if (ref && f.ref_logp) {
    if (ref->config().vocab != V) throw std::invalid_argument("the reference model has another vocabulary");
    ref->activate();
    const int64_t rr = ref->forward(ref->reusable_cache(ref->scoring_cache_, B, capacity), model::without_adapters(batch), fed.data(), false);
    if (rr != R) throw std::runtime_error("reference model produced a different number of rows");
    row_stats(*ref, ref->hid_b_.get(), f.ref_logp, nullptr);
    activate();
  }
}

void CudaModel::finish_tape(int B) {
  // Slot rows for the attention backward: the rows of each slot are contiguous.
  std::vector<int32_t> row0(B, -1), pos0(B, 0), rows(B, 0);
  for (int64_t t = 0; t < tape_.T; ++t) {
    const int s = tape_.token_slot[t];
    if (row0[s] < 0) {
      row0[s] = static_cast<int32_t>(t);
      pos0[s] = tape_.token_pos[t];
    }
    ++rows[s];
  }
  upload(tape_.d_row0, row0.data(), B, stream_);
  upload(tape_.d_pos0, pos0.data(), B, stream_);
  upload(tape_.d_rows, rows.data(), B, stream_);
  upload(tape_.d_tokens, tape_.tokens.data(), tape_.T, stream_);
  upload(tape_.d_slot, tape_.token_slot.data(), tape_.T, stream_);
  upload(tape_.d_pos, tape_.token_pos.data(), tape_.T, stream_);
  upload(tape_.d_out_rows, tape_.out_rows.data(), tape_.R, stream_);
}

void CudaModel::linear_bwd(int l, model::Linear which, const bf16* dy_b, const float* dy32, int64_t T, const bf16* W, int64_t in,
                           int64_t out, const bf16* x, float* dx, bool accumulate_dx) {
  GemmArgs a;  // dx (=|+=) dy·W: [T × out]·[out × in]
  a.layout = GemmLayout::NN;
  a.M = T;
  a.N = in;
  a.K = out;
  a.A = dy_b;
  a.lda = out;
  a.B = W;
  a.ldb = in;
  a.C = dx;
  a.ldc = in;
  a.beta = accumulate_dx ? 1.f : 0.f;
  ops_check(gemm(a, stream_), "GEMM (dy·W)");
  if (has_lora()) lora_backward(l, which, x, T, dy_b, dx);
  if (!train_base_) return;
  const std::string weight = model::tensor_name(model::linear_weight(which), l);
  GemmArgs g;  // dW += dyᵀ·x: [out × T]·[T × in]
  g.layout = GemmLayout::TN;
  g.M = out;
  g.N = in;
  g.K = T;
  g.A = dy_b;
  g.lda = out;
  g.B = x;
  g.ldb = in;
  g.C = grad_of(weight);
  g.ldc = in;
  g.beta = 1.f;
  ops_check(gemm(g, stream_), "GEMM (dyᵀ·x)");
  if (model::linear_has_bias_entry(which)) {
    const std::string bias = model::tensor_name(model::linear_bias(which), l);
    if (find(bias)) column_sum_add(dy32, T, static_cast<int>(out), grad_of(bias), stream_);
  }
}

void CudaModel::train_backward(const float* a, const float* b, int64_t rows) {
  if (!tape_.valid || !tape_.cache || score_tape_) throw std::runtime_error("trainBackward needs a trainForward first");
  if (rows != tape_.R) throw std::runtime_error("a and b must have one coefficient per completion token (" + std::to_string(tape_.R) + ")");
  activate();
  const int64_t R = tape_.R, V = cfg_.vocab, H = cfg_.hidden;
  DeviceArray<float>& da = coef_a_;
  DeviceArray<float>& db = coef_b_;
  upload(da, a, R, stream_);
  upload(db, b, R, stream_);
  float* dh = hid32_.ensure(R * H);
  const int64_t chunk = logits_chunk(R, V, 6);
  float* logits = logits_.ensure(chunk * V);
  bf16* dz = dlogits_b_.ensure(chunk * V);
  float* gW = grad_of(lm_head_name_);
  for (int64_t r0 = 0; r0 < R; r0 += chunk) {
    const int64_t n = std::min(chunk, R - r0);
    // logits recomputed, dz from them (f32 in, bf16 out), dh = dz·W, dW += dzᵀ·h when the head trains
    ADC_PROFILE_WORK("bwd.lm_head_loss", stream_,
                     linear_work(n, H, V, false) + stream_work(double(n) * V, kF32 + kBf16, 8) + gemm_work(n, H, V, kBf16, kBf16, kF32) +
                         (gW ? gemm_work(V, H, n, kBf16, kBf16, kF32, true) : DeviceWork{}));
    const bf16* h = tape_.hidden.get() + r0 * H;
    lm_head(h, n, logits);
    LossBackwardArgs la;  // dz = a·(onehot − p) + b·(−p(log p + H))
    la.logits = logits;
    la.logits_dtype = DType::F32;
    la.dlogits = dz;
    la.dlogits_dtype = DType::BF16;
    la.rows = n;
    la.vocab = V;
    la.row_stride = V;
    la.targets = tape_.targets.get() + r0;
    la.a = da.get() + r0;
    la.b = db.get() + r0;
    ops_check(lm_head_loss_backward(la, stream_), "LM-head loss backward");
    GemmArgs g;  // dh = dz·W: [n × V]·[V × H]
    g.layout = GemmLayout::NN;
    g.M = n;
    g.N = H;
    g.K = V;
    g.A = dz;
    g.lda = V;
    g.B = lm_head_;
    g.ldb = H;
    g.C = dh + r0 * H;
    g.ldc = H;
    ops_check(gemm(g, stream_), "GEMM (dz·W)");
    if (gW) {
      GemmArgs w;  // dW += dzᵀ·h: [V × n]·[n × H]
      w.layout = GemmLayout::TN;
      w.M = V;
      w.N = H;
      w.K = n;
      w.A = dz;
      w.lda = V;
      w.B = h;
      w.ldb = H;
      w.C = gW;
      w.ldc = H;
      w.beta = 1.f;
      ops_check(gemm(w, stream_), "GEMM (dzᵀ·h)");
    }
  }
  tape_.valid = false;  // one backward per forward, whether it succeeds or not
  backward(dh);
}

CudaCache& CudaModel::reusable_cache(std::unique_ptr<CudaCache>& c, int slots, int capacity) {
  if (c && c->slots() >= slots && c->capacity() >= capacity) {
    c->clear();
    return *c;
  }
  c.reset();  // free first: the old and the new cache need not fit together
  const int rounded = (capacity + 255) / 256 * 256;  // slack, so slowly growing lengths do not reallocate each step
  c = std::make_unique<CudaCache>(*this, slots, rounded);
  return *c;
}

void CudaModel::set_checkpointing(bool on) {
  if (on && !tape_.checkpointed)  // what a full tape held is not needed: give it back
    for (LayerTape& lt : tape_.layers) {
      lt.q_raw.release();
      lt.k_raw.release();
      lt.lse.release();
      lt.x_mid.release();
      lt.gate.release();
      lt.up.release();
      lt.xn1.release();
      lt.q.release();
      lt.att.release();
      lt.xn2.release();
    }
  tape_.checkpointed = on;
}

void CudaModel::recompute_layer(int l) {
  ADC_PROFILE("bwd.recompute", stream_);
  const int64_t T = tape_.T, H = cfg_.hidden;
  ADL_CHECK(cudaMemcpyAsync(x_.get(), tape_.layers[l].x_in.get(), sizeof(float) * T * H, cudaMemcpyDeviceToDevice, stream_));
  forward_layer(l, *tape_.cache, T, &tape_.work);  // rewrites the layer's K and V with the same values
}

// Back-propagates d hidden_out rows through the taped forward, as Transformer::backward.
void CudaModel::backward(const float* d_hidden) {
  const model::Config& c = cfg_;
  const int64_t T = tape_.T, R = tape_.R, H = c.hidden, I = c.intermediate, qd = c.q_dim(), kvd = c.kv_dim();
  const float eps = c.rms_eps, scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  CudaCache& cache = *tape_.cache;
  runs_ = tape_.adapter_runs;  // each row back through the adapter its forward applied
  float* dx = dx_.ensure(T * H);
  float* dxn = dxn_.ensure(T * H);
  float* dq = dq_.ensure(T * qd);
  float* dk = dk_.ensure(T * kvd);
  float* dv = dv_.ensure(T * kvd);
  float* datt = datt_.ensure(T * qd);
  float* dh = dh_.ensure(T * I);
  float* delta = delta_.ensure(T * c.heads);
  bf16* dyb = dyb_.ensure(T * std::max(H, qd));
  bf16* dqb = dqb_.ensure(T * qd);
  bf16* dkb = dkb_.ensure(T * kvd);
  bf16* dvb = dvb_.ensure(T * kvd);
  bf16* dhb = dhb_.ensure(T * I);
  bf16* dupb = dupb_.ensure(T * I);
  bf16* hb = h_b_.ensure(T * I);

  // Final norm: only the output rows carry gradient.
  ADL_CHECK(cudaMemsetAsync(dx, 0, sizeof(float) * T * H, stream_));
  rmsnorm_scatter_bwd(tape_.x_final.get(), tape_.d_out_rows.get(), R, final_norm_, d_hidden, dx, grad_of(model::tensor_name(model::TensorId::kFinalNorm)),
                      static_cast<int>(H), eps, stream_);
  const TokenMap map{tape_.d_slot.get(), tape_.d_pos.get()};
  const SlotRows slots{tape_.d_row0.get(), tape_.d_pos0.get(), tape_.d_rows.get()};
  if (tape_.checkpointed) {
    // The recompute's forward state: the taped tokens' slots and positions, attention plan, RoPE.
    copy_d2d(d_slot_, tape_.d_slot.get(), T, stream_);
    copy_d2d(d_pos_, tape_.d_pos.get(), T, stream_);
    plan_attention(attention_, tape_.attention.spans, false);
    rope_now_ = tape_.rope_cs.get();
  }

  for (int l = c.layers - 1; l >= 0; --l) {
    if (tape_.checkpointed) recompute_layer(l);
    const LayerTape& lt = tape_.checkpointed ? tape_.work : tape_.layers[l];
    const Layer& w = layers_[l];
    using model::TensorId;
    using model::tensor_name;
    // ---- MLP: x_out = x_mid + down(silu(gate)·up)
    {
      // SwiGLU recomputed, dy cast to bf16, then the linear's backward
      ADC_PROFILE_WORK("bwd.down_proj", stream_,
                       stream_work(double(T) * I, 2 * kF32 + kBf16, 6) + cast_work(T * H) + linear_bwd_work(T, I, H, false, train_base_));
      swiglu_fwd(lt.gate.get(), lt.up.get(), hb, T * I, stream_);
      cast_f32_to_bf16(dx, dyb, T * H, stream_);
      linear_bwd(l, model::kDown, dyb, dx, T, w.wd, I, H, hb, dh, false);
    }
    {
      // bf16 only: the MLP has no biases, so no f32 column sums. gate, up, dh in (f32); d gate, d up out (bf16)
      ADC_PROFILE_WORK("bwd.swiglu", stream_, stream_work(double(T) * I, 3 * kF32 + 2 * kBf16, 12));
      swiglu_bwd(lt.gate.get(), lt.up.get(), dh, nullptr, nullptr, dhb, dupb, T * I, stream_);
    }
    {
      ADC_PROFILE_WORK("bwd.gate_up_proj", stream_, linear_bwd_work(T, H, I, false, train_base_) + linear_bwd_work(T, H, I, true, train_base_));
      linear_bwd(l, model::kGate, dhb, nullptr, T, w.wg, H, I, lt.xn2.get(), dxn, false);
      linear_bwd(l, model::kUp, dupb, nullptr, T, w.wu, H, I, lt.xn2.get(), dxn, true);
    }
    {
      ADC_PROFILE_WORK("bwd.mlp_norm", stream_, rmsnorm_bwd_work(T, H));
      rmsnorm_bwd(lt.x_mid.get(), w.mlp_norm, dxn, dx, true, grad_of(tensor_name(TensorId::kMlpNorm, l)), T, static_cast<int>(H),
                  eps, stream_);
    }

    // ---- attention: x_mid = x_in + o(attention(q, k, v))
    {
      ADC_PROFILE_WORK("bwd.o_proj", stream_, cast_work(T * H) + linear_bwd_work(T, qd, H, false, train_base_));
      cast_f32_to_bf16(dx, dyb, T * H, stream_);
      linear_bwd(l, model::kO, dyb, dx, T, w.wo, qd, H, lt.att.get(), datt, false);
    }
    const KVLayer kv{cache.keys(l), cache.values(l), cache.capacity(), static_cast<int>(kvd)};
    {
      ADC_PROFILE_WORK("bwd.attention", stream_, attention_work(c, tape_.attention.spans, T, true));
      const AttentionPlan& ap = tape_.attention;
      if (ap.tensor_cores)
        attention_tc_bwd(lt.q.get(), lt.att.get(), datt, lt.lse.get(), kv, ap.q_tiles.get(), ap.n_q_tiles, ap.tile_rows,
                         ap.k_tiles.get(), ap.n_k_tiles, T, c.heads, c.kv_heads, c.head_dim, scale, delta, dq, dk, dv, stream_);
      else
        attention_bwd(lt.q.get(), lt.att.get(), datt, lt.lse.get(), kv, map, slots, T, c.heads, c.kv_heads, c.head_dim, scale,
                      delta, dq, dk, dv, stream_);
    }
    {
      // dq, dk and the raw q, k in (f32), bf16 out, the RoPE table; dv cast to bf16
      ADC_PROFILE_WORK("bwd.qk_norm_rope", stream_,
                       stream_work(double(T), (qd + kvd) * (3.0 * kF32 + kBf16) + c.head_dim * kF32, (w.q_norm ? 14.0 : 4.0) * (qd + kvd)) +
                           cast_work(T * kvd));
      qk_rope_bwd(dq, dk, dqb, dkb, lt.q_raw.get(), lt.k_raw.get(), w.q_norm, w.k_norm, tape_.rope_cs.get(), T, c.heads,
                  c.kv_heads, c.head_dim, eps, w.q_norm ? grad_of(tensor_name(TensorId::kQNorm, l)) : nullptr,
                  w.k_norm ? grad_of(tensor_name(TensorId::kKNorm, l)) : nullptr, stream_);
      cast_f32_to_bf16(dv, dvb, T * kvd, stream_);
    }
    {
      ADC_PROFILE_WORK("bwd.qkv_proj", stream_,
                       linear_bwd_work(T, H, qd, false, train_base_) + linear_bwd_work(T, H, kvd, true, train_base_) +
                           linear_bwd_work(T, H, kvd, true, train_base_));
      linear_bwd(l, model::kQ, dqb, dq, T, w.wq, H, qd, lt.xn1.get(), dxn, false);
      linear_bwd(l, model::kK, dkb, dk, T, w.wk, H, kvd, lt.xn1.get(), dxn, true);
      linear_bwd(l, model::kV, dvb, dv, T, w.wv, H, kvd, lt.xn1.get(), dxn, true);
    }
    ADC_PROFILE_WORK("bwd.attn_norm", stream_, rmsnorm_bwd_work(T, H));
    rmsnorm_bwd(lt.x_in.get(), w.attn_norm, dxn, dx, true, grad_of(tensor_name(TensorId::kAttnNorm, l)), T, static_cast<int>(H), eps, stream_);
  }
  if (train_base_) {
    ADC_PROFILE_WORK("bwd.embed", stream_, stream_work(double(T) * H, 3 * kF32, 1));  // dx rows added into the gradient's rows
    embed_scatter_add(dx, tape_.d_tokens.get(), T, static_cast<int>(H), grad_of(model::tensor_name(model::TensorId::kEmbed)), stream_);
  }
  sync();
}

void CudaModel::optimizer_step(ad_cuda_optimizer& o) {
  activate();
  // Per trained parameter: master, gradient, m, v read; master, m, v and the bf16 copy written; the
  // gradient read again for the clipping norm: 34 bytes, ~12 FLOPs (kernels/adamw.h).
  ADC_PROFILE_WORK("optim.step", stream_, [&] {
    double n = 0;
    for (const auto& kv : params_) n += kv.second.grad.get() ? double(kv.second.n) : 0.0;
    return stream_work(n, 34, 12);
  }());
  GradClip* clip = clip_.ensure(1);
  // Small tensors (norm weights, biases: a launch costs more than their bytes) go as one group
  // through the multi-tensor kernels; the large ones one launch each.
  constexpr int64_t kSmall = 1 << 16;
  std::vector<AdamWTensor> small;
  int64_t small_max = 0;
  // Every moment buffer (m and v on their own) holds its parameter's size before anything is written.
  // Only what a backward wrote since the last step: an adapter no sequence used keeps its values
  // and moments (as the CPU backend; a parameter without a gradient in PyTorch's AdamW).
  const auto stepped = [](const Param& pr) { return pr.grad.get() && pr.written; };
  for (auto& kv : params_) {
    const Param& pr = kv.second;
    if (!stepped(pr) || (!pr.m.get() && !pr.v.get())) continue;
    if (pr.m.size() < pr.n || pr.v.size() < pr.n)
      throw std::length_error("optimizer state of " + kv.first + " has m of " + std::to_string(pr.m.size()) + " and v of " +
                              std::to_string(pr.v.size()) + " elements, the parameter " + std::to_string(pr.n));
  }
  for (auto& kv : params_) {
    Param& pr = kv.second;
    if (!stepped(pr)) continue;
    if (!pr.m.get()) {
      pr.m.ensure(pr.n);
      pr.v.ensure(pr.n);
      ADL_CHECK(cudaMemsetAsync(pr.m.get(), 0, sizeof(float) * pr.n, stream_));
      ADL_CHECK(cudaMemsetAsync(pr.v.get(), 0, sizeof(float) * pr.n, stream_));
    }
    if (pr.n < kSmall) {
      small.push_back({pr.w32.get(), pr.w16.get(), pr.grad.get(), pr.m.get(), pr.v.get(), pr.n, model::weight_decay_applies(kv.first) ? 1 : 0});
      small_max = std::max(small_max, pr.n);
    }
  }
  upload(small_params_, small.data(), static_cast<int64_t>(small.size()), stream_);
  const int n_small = static_cast<int>(small.size());
  ops_check(grad_clip_reset(clip, stream_), "gradient-norm reset");
  for (auto& kv : params_)
    if (stepped(kv.second) && kv.second.n >= kSmall) ops_check(grad_sumsq(kv.second.grad.get(), kv.second.n, clip, stream_), "gradient norm");
  ops_check(grad_sumsq_multi(small_params_.get(), n_small, small_max, clip, stream_), "gradient norm (small tensors)");
  ops_check(grad_clip_finalize(clip, o.clip_grad_norm, stream_), "gradient clipping");
  GradClip host{};
  download(&host, clip, 1, stream_);
  sync();
  o.grad_norm = std::sqrt(host.sumsq);
  o.skipped = (!host.finite || !std::isfinite(o.grad_norm)) ? 1 : 0;
  o.parameters = 0;
  if (!o.skipped) {
    kernels::AdamWParams p{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay,
                           static_cast<float>(1 - std::pow(static_cast<double>(o.beta1), o.step)),
                           static_cast<float>(1 - std::pow(static_cast<double>(o.beta2), o.step)), 1.f};
    for (auto& kv : params_) {
      Param& pr = kv.second;
      if (!stepped(pr)) continue;
      o.parameters += pr.n;
      if (pr.n < kSmall) continue;
      ops_check(adamw_step(pr.w32.get(), pr.w16.get(), pr.grad.get(), pr.m.get(), pr.v.get(), pr.n, p, model::weight_decay_applies(kv.first), clip, stream_),
                "AdamW");
    }
    ops_check(adamw_step_multi(small_params_.get(), n_small, small_max, p, clip, stream_), "AdamW (small tensors)");
  }
  for (auto& kv : params_) {
    if (stepped(kv.second) && kv.second.n >= kSmall)
      ADL_CHECK(cudaMemsetAsync(kv.second.grad.get(), 0, sizeof(float) * kv.second.n, stream_));
    kv.second.written = false;
  }
  ops_check(grad_zero_multi(small_params_.get(), n_small, small_max, stream_), "gradient reset (small tensors)");
  sync();
}

std::vector<std::string> CudaModel::gradient_names() const {
  std::vector<std::string> out;
  for (const auto& kv : params_)
    if (kv.second.grad.get()) out.push_back(kv.first);
  return out;
}

std::vector<std::string> CudaModel::moment_names() const {
  std::vector<std::string> out;
  for (const auto& kv : params_)
    if (kv.second.m.get()) out.push_back(kv.first);
  return out;
}

int64_t CudaModel::read_moments(const std::string& name, float* m_host, float* v_host, int64_t n) {
  activate();
  Param* p = find(name);
  if (!p || !p->m.get()) throw std::invalid_argument("no optimizer state for " + name);
  if (m_host || v_host) {
    if (n != p->n) throw std::invalid_argument("optimizer state of " + name + " has " + std::to_string(p->n) + " elements");
    download(m_host, p->m.get(), n, stream_);
    download(v_host, p->v.get(), n, stream_);
    sync();
  }
  return p->n;
}

void CudaModel::clear_moments() {
  activate();
  sync();  // no step may still read them
  for (auto& kv : params_) {
    kv.second.m.release();
    kv.second.v.release();
  }
}

void CudaModel::write_moments(const std::string& name, const float* m_host, const float* v_host, int64_t n) {
  activate();
  Param* p = find(name);
  if (!p) throw std::invalid_argument("the model has no parameter named " + name);
  if (n != p->n) throw std::invalid_argument("parameter " + name + " has " + std::to_string(p->n) + " elements, got " + std::to_string(n));
  upload(p->m, m_host, n, stream_);
  upload(p->v, v_host, n, stream_);
  sync();
}

int64_t CudaModel::read_gradient(const std::string& name, float* host, int64_t n) {
  activate();
  Param* p = find(name);
  if (!p || !p->grad.get()) throw std::invalid_argument("no gradient for " + name);
  if (host) {
    if (n != p->n) throw std::invalid_argument("gradient " + name + " has " + std::to_string(p->n) + " elements");
    download(host, p->grad.get(), n, stream_);
    sync();
  }
  return p->n;
}

// ------------------------------------------------------------------ LoRA adapters

CudaModel::Param& CudaModel::new_param(const std::string& name, std::vector<int64_t> shape, Role role) {
  if (find(name)) throw std::invalid_argument("the model already has a parameter named " + name);
  Param& p = params_[name];
  p.shape = std::move(shape);
  p.n = 1;
  for (auto d : p.shape) p.n *= d;
  p.role = role;
  ADL_CHECK(cudaMemsetAsync(p.w32.ensure(p.n), 0, sizeof(float) * p.n, stream_));
  if (p.shape.size() >= 2) ADL_CHECK(cudaMemsetAsync(p.w16.ensure(p.n), 0, sizeof(bf16) * p.n, stream_));
  return p;
}

int CudaModel::attach_lora(const std::string& name, int rank, float alpha, const std::vector<model::Linear>& targets) {
  if (!finalized_) throw std::logic_error("the CUDA model is not finalized");
  if (rank <= 0) throw std::invalid_argument("LoRA rank must be positive");
  for (const AdapterSet& s : adapter_sets_)
    if (s.name == name) throw std::invalid_argument("this model already has an adapter named '" + name + "'");
  activate();
  const int index = static_cast<int>(adapter_sets_.size());
  AdapterSet set;
  set.name = name;
  set.layers.resize(cfg_.layers);
  std::vector<std::string> created;
  try {
    for (int l = 0; l < cfg_.layers; ++l)
      for (model::Linear which : targets) {
        const std::vector<int64_t>& w = param(model::tensor_name(model::linear_weight(which), l)).shape;  // [out × in]
        Adapter& a = set.layers[l][which];
        a.a_name = model::lora_a_name(l, which, name);
        a.b_name = model::lora_b_name(l, which, name);
        a.rank = rank;
        a.out = w[0];
        a.in = w[1];
        a.scale = alpha / static_cast<float>(rank);  // LoRA Eq. 3's α/r
        new_param(a.a_name, {rank, a.in}, Role::kLora).adapter = index;
        created.push_back(a.a_name);
        new_param(a.b_name, {a.out, rank}, Role::kLora).adapter = index;
        created.push_back(a.b_name);
      }
    sync();
  } catch (...) {
    for (const auto& n : created) params_.erase(n);  // nothing half-attached
    throw;
  }
  adapter_sets_.push_back(std::move(set));
  return index;
}

const CudaModel::Adapter* CudaModel::adapter(int l, model::Linear which, int k) const {
  if (k == model::kBaseOnly || k >= static_cast<int>(adapter_sets_.size())) return nullptr;
  const Adapter& a = adapter_sets_[k].layers[l][which];
  return a.rank > 0 ? &a : nullptr;
}

namespace {
// One product of the adapter and score-head paths: C (=|+=) alpha·op(A, B), ops.h's layouts.
void gemm_into(GemmLayout layout, int64_t M, int64_t N, int64_t K, const bf16* A, int64_t lda, const bf16* B, int64_t ldb, void* C,
               int64_t ldc, DType c_type, float alpha, float beta, cudaStream_t stream, const char* what) {
  GemmArgs g;
  g.layout = layout;
  g.M = M;
  g.N = N;
  g.K = K;
  g.A = A;
  g.lda = lda;
  g.B = B;
  g.ldb = ldb;
  g.C = C;
  g.ldc = ldc;
  g.c_type = c_type;
  g.alpha = alpha;
  g.beta = beta;
  ops_check(gemm(g, stream), what);
}
}  // namespace

// y += s·(x·Aᵀ)·Bᵀ on each run of rows with its adapter: u = s·x·Aᵀ [rows × rank] in bf16 (GEMM
// alpha = s), then y += u·Bᵀ. One adapter on the whole batch: one run, the products of before.
void CudaModel::lora_forward(int l, model::Linear which, const bf16* x, int64_t T, float* y) {
  if (!lora_enabled_ || T <= 0) return;
  for (const model::AdapterRun& run : runs_) {
    const Adapter* a = adapter(l, which, run.adapter);
    const int64_t n = run.end - run.begin;
    if (!a || n <= 0) continue;
    const bf16* xr = x + run.begin * a->in;
    bf16* u = lora_u_.ensure(n * a->rank);
    gemm_into(GemmLayout::NT, n, a->rank, a->in, xr, a->in, param(a->a_name).w16.get(), a->in, u, a->rank, DType::BF16, a->scale, 0.f,
              stream_, "GEMM (LoRA s·x·Aᵀ)");
    linear_nt(u, n, param(a->b_name).w16.get(), a->rank, a->out, nullptr, y + run.begin * a->out, true);
  }
}

// As Transformer::linear_backward's adapter part: u = s·x·Aᵀ (recomputed), du = s·dy·B,
// dB += dyᵀ·u, dA += duᵀ·x, dx += du·A.
// Per run of rows, with that run's adapter (only a trained adapter's rows add to its gradients).
void CudaModel::lora_backward(int l, model::Linear which, const bf16* x, int64_t T, const bf16* dy_b, float* dx) {
  if (!lora_enabled_ || T <= 0) return;
  for (const model::AdapterRun& run : runs_) {
    const Adapter* a = adapter(l, which, run.adapter);
    const int64_t n = run.end - run.begin;
    if (!a || n <= 0) continue;
    const int64_t r = a->rank, in = a->in, out = a->out;
    const bf16* A = param(a->a_name).w16.get();
    const bf16* B = param(a->b_name).w16.get();
    const bf16* xr = x + run.begin * in;
    const bf16* dyr = dy_b + run.begin * out;
    bf16* u = lora_u_.ensure(n * r);
    bf16* du = lora_du_.ensure(n * r);
    gemm_into(GemmLayout::NT, n, r, in, xr, in, A, in, u, r, DType::BF16, a->scale, 0.f, stream_, "GEMM (LoRA s·x·Aᵀ)");
    gemm_into(GemmLayout::NN, n, r, out, dyr, out, B, r, du, r, DType::BF16, a->scale, 0.f, stream_, "GEMM (LoRA s·dy·B)");
    if (float* gB = grad_of(a->b_name))  // [out × rows]·[rows × r]
      gemm_into(GemmLayout::TN, out, r, n, dyr, out, u, r, gB, r, DType::F32, 1.f, 1.f, stream_, "GEMM (LoRA dyᵀ·u)");
    if (float* gA = grad_of(a->a_name))  // [r × rows]·[rows × in]
      gemm_into(GemmLayout::TN, r, in, n, du, r, xr, in, gA, in, DType::F32, 1.f, 1.f, stream_, "GEMM (LoRA duᵀ·x)");
    gemm_into(GemmLayout::NN, n, in, r, du, r, A, in, dx + run.begin * in, in, DType::F32, 1.f, 1.f, stream_, "GEMM (LoRA du·A)");
  }
}

void CudaModel::merge_lora() {
  if (!has_lora()) throw std::invalid_argument("this model has no LoRA adapters to merge");
  if (adapter_sets_.size() != 1) throw std::invalid_argument("merging needs exactly one adapter attached");
  activate();
  for (int l = 0; l < cfg_.layers; ++l)
    for (int k = 0; k < model::kNumLinear; ++k) {
      const auto which = static_cast<model::Linear>(k);
      const Adapter* a = adapter(l, which, 0);
      if (!a) continue;
      Param& W = param(model::tensor_name(model::linear_weight(which), l));
      Param& A = param(a->a_name);
      Param& B = param(a->b_name);
      lora_merge(W.w32.get(), W.w32.get(), W.w16.get(), A.w32.get(), B.w32.get(), a->out, a->in, a->rank, a->scale, stream_);
      ADL_CHECK(cudaMemsetAsync(B.w32.get(), 0, sizeof(float) * B.n, stream_));
      ADL_CHECK(cudaMemsetAsync(B.w16.get(), 0, sizeof(bf16) * B.n, stream_));
    }
  sync();
}

void CudaModel::read_tensor_merged(const std::string& name, float* host, int64_t n) {
  if (adapter_sets_.size() > 1) throw std::invalid_argument("a merged tensor needs exactly one adapter attached");
  for (int l = 0; l < cfg_.layers && has_lora(); ++l)
    for (int k = 0; k < model::kNumLinear; ++k) {
      const auto which = static_cast<model::Linear>(k);
      const Adapter* a = adapter(l, which, 0);
      if (!a || model::tensor_name(model::linear_weight(which), l) != name) continue;
      activate();
      Param& W = param(name);
      if (n != W.n) throw std::invalid_argument("parameter " + name + " has " + std::to_string(W.n) + " elements, got " + std::to_string(n));
      float* merged = merged_.ensure(W.n);
      lora_merge(W.w32.get(), merged, nullptr, param(a->a_name).w32.get(), param(a->b_name).w32.get(), a->out, a->in, a->rank, a->scale,
                 stream_);
      download(host, merged, n, stream_);
      sync();
      return;
    }
  read_tensor(name, host, n);
}

// ------------------------------------------------------------------ score head

void CudaModel::attach_score_head(int labels) {
  if (!finalized_) throw std::logic_error("the CUDA model is not finalized");
  if (score_) throw std::invalid_argument("this model already has a score head");
  if (labels <= 0) throw std::invalid_argument("a score head needs at least one label");
  activate();
  Param& p = new_param(model::tensor_name(model::TensorId::kScore), {labels, cfg_.hidden}, Role::kScore);
  sync();
  score_ = p.w16.get();
  score_labels_ = labels;
  cfg_.score_labels = labels;
}

void CudaModel::score_forward(const int32_t* tokens, const int32_t* lengths, int n, const int32_t* adapters, bool tape, float* scores,
                              int64_t capacity) {
  if (!score_) throw std::invalid_argument("this model has no score head");
  if (n <= 0) throw std::invalid_argument("a score forward needs at least one sequence");
  if (capacity < static_cast<int64_t>(n) * score_labels_) throw std::invalid_argument("the scores need room for sequences × labels values");
  std::vector<model::BatchEntry> batch;
  int longest = 1;
  for (int i = 0; i < n; ++i) {
    if (lengths[i] < 1) throw std::out_of_range("every sequence needs at least one token");
    batch.push_back({i, lengths[i], 1, 0, adapters ? adapters[i] : 0});  // the last token's row
    longest = std::max(longest, lengths[i]);
  }
  activate();
  tape_.valid = false;
  score_tape_ = false;
  if (tape) set_checkpointing(false);
  const int64_t R = forward(reusable_cache(tape ? tape_.cache : scoring_cache_, n, longest), batch, tokens, tape);
  if (R != n) throw std::logic_error("a score forward gives one row per sequence");
  const int64_t H = cfg_.hidden, L = score_labels_;
  float* s = scores_.ensure(R * L);
  {
    ADC_PROFILE_WORK("score.head", stream_, linear_work(R, H, L, false));
    linear_nt(hid_b_.get(), R, score_, H, L, nullptr, s, false);  // scores = h·scoreᵀ
  }
  download(scores, s, R * L, stream_);
  if (tape) {
    copy_d2d(tape_.hidden, hid_b_.get(), R * H, stream_);
    finish_tape(n);
  }
  sync();
  tape_.valid = tape;
  score_tape_ = tape;
}

// As Transformer::score_head_backward: d hidden = ds·score, d score += dsᵀ·h, then the body.
void CudaModel::score_backward(const float* d_scores, int64_t n) {
  if (!tape_.valid || !score_tape_ || !tape_.cache) throw std::runtime_error("scoreBackward needs a taped scoreForward first");
  const int64_t R = tape_.R, H = cfg_.hidden, L = score_labels_;
  if (n != R * L) throw std::invalid_argument("dScores needs one value per sequence and label");
  activate();
  upload(scores_, d_scores, R * L, stream_);
  bf16* ds = d_scores_b_.ensure(R * L);
  cast_f32_to_bf16(scores_.get(), ds, R * L, stream_);
  float* dh = hid32_.ensure(R * H);
  {
    ADC_PROFILE_WORK("bwd.score_head", stream_, gemm_work(R, H, L, kBf16, kBf16, kF32) + gemm_work(L, H, R, kBf16, kBf16, kF32, true));
    gemm_into(GemmLayout::NN, R, H, L, ds, L, score_, H, dh, H, DType::F32, 1.f, 0.f, stream_, "GEMM (ds·score)");  // [R × L]·[L × H]
    if (float* gW = grad_of(model::tensor_name(model::TensorId::kScore)))  // dW += dsᵀ·h: [L × R]·[R × H]
      gemm_into(GemmLayout::TN, L, H, R, ds, L, tape_.hidden.get(), H, gW, H, DType::F32, 1.f, 1.f, stream_, "GEMM (dsᵀ·h)");
  }
  tape_.valid = false;  // one backward per forward
  score_tape_ = false;
  backward(dh);
}

}  // namespace ad::cuda
