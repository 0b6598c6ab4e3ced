/* The C ABI between the CPU addon (autodidact.node) and the CUDA plugin (autodidact_cuda.so).
 *
 * The addon has no link-time dependency on CUDA: it dlopens the plugin only when a caller asks
 * for the device (or for `info()`), looks up ad_cuda_plugin_api() and checks abi_version and
 * struct_size. Plain C types only; every call that can fail returns 0 on success or −1 with the
 * message in last_error() (thread-local in the plugin). Arrays are host memory owned by the caller.
 */
#ifndef AD_CUDA_PLUGIN_ABI_H
#define AD_CUDA_PLUGIN_ABI_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define AD_CUDA_ABI_VERSION 5u
#define AD_CUDA_PLUGIN_SYMBOL "ad_cuda_plugin_api"

typedef struct ad_cuda_model ad_cuda_model; /* opaque: weights, scratch, gradients, optimizer */
typedef struct ad_cuda_cache ad_cuda_cache; /* opaque: device KV cache slots + host token history */

typedef struct {
  char name[256];
  uint64_t total_memory;
  int32_t major, minor, multiprocessors;
} ad_cuda_device;

typedef struct {
  int32_t available;       /* ≥ 1 usable device */
  char reason[512];        /* why not, when !available */
  int32_t runtime_version; /* cudart linked into the plugin */
  int32_t driver_version;  /* 0 without a driver */
  int32_t device_count;    /* entries filled in devices[] */
  ad_cuda_device devices[16];
  char gemm_path[128];     /* "own mma.sync" or "cuBLASLt (runtime-loaded)": which GEMM runs */
} ad_cuda_probe;

typedef struct {
  int32_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim;
  float rms_eps;
  double rope_theta;
  int32_t rope_scaling; /* Llama 3 scaling on/off, then its four numbers */
  float rope_factor, rope_low_freq_factor, rope_high_freq_factor, rope_original_max_position;
  int32_t tie_embeddings, qkv_bias, o_bias, qk_norm;
  int32_t device; /* ordinal */
  int32_t score_labels; /* ABI 4: a *ForSequenceClassification model's score-head labels (0: none) */
} ad_cuda_config;

/* One ragged-batch entry (as model::BatchEntry): `count` new tokens appended to cache `slot`;
 * out_mode 0: no rows, 1: the last new token's row, 2: every new token's row from out_from on.
 * ABI 5: `adapter`, the index (attach order) of the LoRA adapter its rows apply; −1: the base alone. */
typedef struct {
  int32_t slot, count, out_mode, out_from;
  int32_t adapter;
} ad_cuda_entry;

/* Per-entry sampling parameters (kernels/sampling.h's SamplingParams + the prompt length). */
typedef struct {
  float temperature, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty;
  int32_t top_k, prompt_length;
  uint64_t seed, stream;
} ad_cuda_sampling;

/* One decode/prefill step: forward, LM head, optional sampling, per-row statistics. */
typedef struct {
  const ad_cuda_entry* entries;
  int32_t n_entries;
  const int32_t* tokens; /* Σ count */
  int64_t n_tokens;
  const int32_t* targets;            /* [rows] or NULL (sampled / none) */
  const ad_cuda_sampling* sampling;  /* [n_entries] or NULL */
  int32_t topk;                      /* 0..64 */
  int32_t return_logits;
  ad_cuda_model* ref_model; /* or NULL: KL estimators against this model's rows */
  ad_cuda_cache* ref_cache;
  int64_t rows; /* out: the number of output rows; outputs below must hold `rows_capacity` */
  int64_t rows_capacity;
  int32_t* out_tokens;
  float *chosen_logprob, *logsumexp, *entropy, *max_logit, *margin;
  int32_t* topk_ids;   /* [rows × topk] */
  float* topk_logits;  /* [rows × topk] */
  float *k1, *k2, *k3, *kl_exact; /* with ref_model */
  float* logits;                  /* [rows × vocab] when return_logits */
} ad_cuda_step;

/* Training: a taped forward of whole sequences; rows are completion tokens in sequence order. */
typedef struct {
  const int32_t* tokens;
  const int32_t* lengths;
  const int32_t* prompt_lengths;
  int32_t n_sequences;
  int32_t checkpoint;
  ad_cuda_model* ref_model; /* or NULL */
  int32_t ref_lora_off;
  int64_t rows; /* out */
  int64_t rows_capacity;
  float *logp, *entropy, *ref_logp; /* ref_logp may be NULL */
  const int32_t* adapters; /* ABI 5: [n_sequences] adapter indices (−1: the base alone), or NULL: adapter 0 */
} ad_cuda_train_forward;

typedef struct {
  float lr, beta1, beta2, eps, weight_decay;
  int32_t step;
  float clip_grad_norm;
  double grad_norm; /* out */
  int32_t skipped;  /* out */
  int64_t parameters; /* out */
} ad_cuda_optimizer;

/* A device's memory: what the driver reports free and total (cudaMemGetInfo), and what this
 * process's device arrays hold now and at most since the last reset (every model, process-wide). */
typedef struct {
  uint64_t free_bytes, total_bytes;
  int64_t allocated_bytes, peak_allocated_bytes;
} ad_cuda_memory;

/* One named phase of the device profile: device time between its scope's first and last launch. */
typedef struct {
  char name[48];
  int64_t calls;
  double total_ms;
} ad_cuda_profile_row;

/* Issue 26: a profile row with the work its launch site counted from the shapes (summed over calls). */
typedef struct {
  char name[48];
  int64_t calls;
  double total_ms, bytes, flops;
} ad_cuda_profile_work_row;

typedef struct {
  uint32_t abi_version;
  uint32_t struct_size;
  const char* (*last_error)(void);
  int (*probe)(ad_cuda_probe* out);

  int (*model_create)(const ad_cuda_config* cfg, ad_cuda_model** out);
  /* Uploads one named HF tensor given in f32 (converted to bf16; the f32 master kept). */
  int (*model_set_tensor)(ad_cuda_model* m, const char* name, const int64_t* shape, int32_t ndim, const float* data);
  int (*model_finalize)(ad_cuda_model* m);
  void (*model_destroy)(ad_cuda_model* m);
  int64_t (*model_parameter_bytes)(ad_cuda_model* m);

  int (*cache_create)(ad_cuda_model* m, int32_t slots, int32_t capacity, ad_cuda_cache** out);
  void (*cache_destroy)(ad_cuda_cache* c);
  int (*cache_copy_prefix)(ad_cuda_cache* c, int32_t src, int32_t dst, int32_t len);
  int (*cache_truncate)(ad_cuda_cache* c, int32_t slot, int32_t len);
  int32_t (*cache_length)(ad_cuda_cache* c, int32_t slot);
  int64_t (*cache_bytes)(ad_cuda_cache* c);

  int (*step)(ad_cuda_model* m, ad_cuda_cache* c, ad_cuda_step* s);

  int (*set_trainable)(ad_cuda_model* m, int32_t base, int32_t lora);
  int (*train_forward)(ad_cuda_model* m, ad_cuda_train_forward* f);
  /* dz = a·(onehot − p) + b·(−p(log p + H)) per completion row of the taped forward. */
  int (*train_backward)(ad_cuda_model* m, const float* a, const float* b, int64_t rows);
  int (*optimizer_step)(ad_cuda_model* m, ad_cuda_optimizer* o);
  int (*zero_grad)(ad_cuda_model* m);

  /* Parameters by HF name, as f32 copies of the master weights. */
  int32_t (*tensor_count)(ad_cuda_model* m);
  int (*tensor_info)(ad_cuda_model* m, int32_t index, char* name, int32_t name_capacity, int64_t* shape4, int32_t* ndim);
  int (*tensor_read)(ad_cuda_model* m, const char* name, float* out, int64_t n);
  int (*tensor_write)(ad_cuda_model* m, const char* name, const float* data, int64_t n);
  int32_t (*gradient_count)(ad_cuda_model* m);
  int (*gradient_read)(ad_cuda_model* m, int32_t index, char* name, int32_t name_capacity, float* out, int64_t n, int64_t* numel);

  /* Device-time profile of the models' phases (CUDA events; off by default, process-wide). */
  void (*profiler_enable)(int32_t on);
  void (*profiler_reset)(void);
  /* Waits for pending scopes; copies up to `capacity` rows and returns how many there are. */
  int32_t (*profiler_read)(ad_cuda_profile_row* rows, int32_t capacity);

  /* AdamW moments (checkpoint and resume). moment_read with m_out = v_out = NULL gives numel only. */
  int32_t (*moment_count)(ad_cuda_model* m);
  int (*moment_read)(ad_cuda_model* m, int32_t index, char* name, int32_t name_capacity, float* m_out, float* v_out, int64_t n,
                     int64_t* numel);
  int (*moments_clear)(ad_cuda_model* m);
  int (*moment_write)(ad_cuda_model* m, const char* name, const float* m_in, const float* v_in, int64_t n);

  /* ABI 4: device memory (the memory plan's refusal and the device-check's measured peak). */
  int (*memory_info)(int32_t device, ad_cuda_memory* out);
  void (*memory_reset_peak)(void);

  /* ABI 4: LoRA adapters on the linears `targets` (model::Linear values) of every layer, as
   * parameters with PEFT names (…q_proj.lora_A.weight [rank × in], …lora_B.weight [out × rank]),
   * created at zero: the caller writes A's initial values (tensor_write); B stays 0. */
  int (*lora_attach)(ad_cuda_model* m, int32_t rank, float alpha, const int32_t* targets, int32_t n_targets);
  int (*lora_enable)(ad_cuda_model* m, int32_t on);
  /* W += α/r·B·A for every adapter (f32 masters, bf16 copies recast), then B = 0. */
  int (*lora_merge)(ad_cuda_model* m);
  /* A parameter's f32 master with its adapter folded in (W + α/r·B·A); the model is unchanged. */
  int (*tensor_read_merged)(ad_cuda_model* m, const char* name, float* out, int64_t n);
  /* A score head (HF score.weight [labels × hidden]) created at zero: the caller writes its values. */
  int (*score_head_attach)(ad_cuda_model* m, int32_t labels);
  /* Scores [n × labels] of whole sequences from the score head on each last token; taped when `tape`. */
  int (*score_forward)(ad_cuda_model* m, const int32_t* tokens, const int32_t* lengths, int32_t n, int32_t tape, float* scores,
                       int64_t scores_capacity);
  int (*score_backward)(ad_cuda_model* m, const float* d_scores, int64_t n);

  /* ABI 5: several named LoRA adapters on one base, chosen per sequence (ad_cuda_entry.adapter).
   * lora_attach_named adds adapter `name` as the next index; its parameters are PEFT's names with
   * the adapter's ("…q_proj.lora_A.<name>.weight"; "default": "…q_proj.lora_A.weight").
   * lora_attach (ABI 4) attaches "default". */
  int (*lora_attach_named)(ad_cuda_model* m, const char* name, int32_t rank, float alpha, const int32_t* targets, int32_t n_targets);
  /* The base trains when `base`; of the adapters, those listed (indices). set_trainable(m, base, lora)
   * (ABI 4) lists every adapter when `lora`. Drops every gradient and moment. */
  int (*set_trainable_adapters)(ad_cuda_model* m, int32_t base, const int32_t* adapters, int32_t n_adapters);
  /* score_forward with one adapter index per sequence (NULL: adapter 0). */
  int (*score_forward_adapters)(ad_cuda_model* m, const int32_t* tokens, const int32_t* lengths, int32_t n, const int32_t* adapters,
                                int32_t tape, float* scores, int64_t scores_capacity);
  /* Issue 26 (appended; struct_size tells an older plugin): the profile rows with bytes and FLOPs,
   * as profiler_read; and the floors they are read against, measured now on `device` — a
   * device-to-device copy's bytes (read + written) per second, the bf16 GEMM's FLOP/s on 8192³. */
  int32_t (*profiler_read_work)(ad_cuda_profile_work_row* rows, int32_t capacity);
  int (*profiler_floors)(int32_t device, double* copy_bytes_per_second, double* gemm_flops_per_second);
} ad_cuda_api;

typedef const ad_cuda_api* (*ad_cuda_plugin_api_fn)(void);

#ifdef __cplusplus
}
#endif
#endif
