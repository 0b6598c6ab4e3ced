// The checks of the options and arguments every engine entry point takes (generate, score, the
// trainer, load), and the engine's limits, in one place.

/** The most CPU threads a model's kernels may use (native/cpu/threadpool.h's kMaxThreads). */
export const MAX_THREADS = 256
/** The largest LoRA rank and score-head label count the engine takes (native/model/engine.h). */
export const MAX_LORA_RANK = 16384
export const MAX_SCORE_LABELS = 65536
