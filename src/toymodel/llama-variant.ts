// The toy world's "model of another architecture" for the solver ensemble (DIS §4.2: S_c is
// Llama-3.2-3B-Instruct next to the Qwen3 Solver). The bundled model is a Qwen3; this builds a
// Llama-architecture model from it:
//   1. convert: drop Qwen3's per-head q/k RMSNorm (Llama has none) and fold the norm weights into
//      q_proj / k_proj rows. Without the normalization the attention logits change, and the copy
//      answers 0% of level-3 questions (its format survives);
//   2. heal: `healSteps` steps of SFT on the arithmetic world's Solver transcripts (a corpus seed
//      the bundled model never saw). Measured here: 120 steps × 32 → 45% greedy at level 3 (the Qwen3
//      Solver: 53%), about 50 s on 2 cores.
// So S_c is a different function with partly different errors, as a second family should be, and
// a weaker one, as DIS's S_c is. The result is cached by (source weights, recipe).
import { createHash } from 'node:crypto'
import { existsSync } from 'node:fs'
import { copyFile, mkdir, readFile, rename, rm } from 'node:fs/promises'
import { homedir } from 'node:os'
import { join, resolve } from 'node:path'
import { InvalidArgumentError } from '../engine/errors.js'
import { readSafetensorsRefs, readTensorFloat32, writeSafetensors, type TensorToWrite } from '../engine/hf/safetensors.js'
import { writeJsonAtomic } from '../util/atomic.js'
import { openPolicy, type OpenPolicy } from '../methods/common/policy.js'
import { learningRateSchedule } from '../methods/common/training.js'
import { buildCorpus } from '../worlds/arith/index.js'
import { BUNDLED_MODEL } from './bundled.js'

export interface LlamaVariantRecipe {
  /** SFT steps after the conversion (0: the bare converted copy). */
  healSteps: number
  batchSize: number
  lr: number
  /** Corpus seed of the healing transcripts (the bundled model was trained on seed 1). */
  corpusSeed: number
}

export const DEFAULT_LLAMA_RECIPE: LlamaVariantRecipe = { healSteps: 120, batchSize: 32, lr: 1e-3, corpusSeed: 77 }

/** Where built variants are cached: $AUTODIDACT_CACHE or ~/.cache/autodidact, under variants/. */
export function defaultVariantCache(): string {
  return join(process.env.AUTODIDACT_CACHE ?? join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'autodidact'), 'variants')
}

/** The Llama tensors of a Qwen3 model: q/k norm weights folded into the projections' rows. */
export async function qwen3ToLlamaTensors(sourceDir: string): Promise<{ tensors: TensorToWrite[]; config: Record<string, unknown> }> {
  const config = JSON.parse(await readFile(join(sourceDir, 'config.json'), 'utf8')) as Record<string, unknown>
  if (config.model_type !== 'qwen3') throw new InvalidArgumentError('ensemble.second.model', `${sourceDir}: the automatic second ensemble model converts a Qwen3 base to Llama, but this base has model_type ${JSON.stringify(config.model_type)}; set ensemble.second.model to a model folder of another family, or to 'none'`)
  const refs = await readSafetensorsRefs(join(sourceDir, 'model.safetensors'))
  const weights = new Map<string, Float32Array>()
  for (const r of refs) weights.set(r.name, await readTensorFloat32(r))
  const hidden = config.hidden_size as number
  const tensors: TensorToWrite[] = []
  for (const r of refs) {
    if (/\.(q|k)_norm\.weight$/.test(r.name)) continue
    let data = weights.get(r.name)!
    const m = r.name.match(/\.self_attn\.([qk])_proj\.weight$/)
    if (m) {
      const norm = weights.get(r.name.replace(`${m[1]}_proj.weight`, `${m[1]}_norm.weight`))
      if (!norm) throw new InvalidArgumentError('source', `${sourceDir}: ${r.name} has no matching ${m[1]}_norm`)
      data = Float32Array.from(data)
      // row r of q_proj feeds head dimension r mod head_dim, which the norm scaled by norm[r mod D]
      for (let row = 0; row < data.length / hidden; row++) for (let j = 0; j < hidden; j++) data[row * hidden + j] *= norm[row % norm.length]
    }
    tensors.push({ name: r.name, dtype: 'F32', shape: r.shape.slice(), data })
  }
  const { max_window_layers: _w, sliding_window: _s, use_sliding_window: _u, ...rest } = config
  return { tensors, config: { ...rest, architectures: ['LlamaForCausalLM'], model_type: 'llama', mlp_bias: false, pretraining_tp: 1 } }
}

export interface VariantBuildOptions {
  threads?: number
  log?: (s: string) => void
  /** How the converted folder is opened for healing (default: the engine's). */
  openPolicy?: OpenPolicy
}

/** Writes the converted folder and heals it by SFT on Solver transcripts. */
export async function buildLlamaVariant(sourceDir: string, outDir: string, recipe: LlamaVariantRecipe = DEFAULT_LLAMA_RECIPE, o: VariantBuildOptions = {}): Promise<void> {
  const { tensors, config } = await qwen3ToLlamaTensors(sourceDir)
  await mkdir(outDir, { recursive: true })
  await writeSafetensors(join(outDir, 'model.safetensors'), tensors)
  await writeJsonAtomic(join(outDir, 'config.json'), config, 2)
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json'])
    if (existsSync(join(sourceDir, f))) await copyFile(join(sourceDir, f), join(outDir, f))
  if (recipe.healSteps > 0) {
    const model = await (o.openPolicy ?? openPolicy)({ model: outDir, threads: o.threads })
    try {
      const trainer = await model.trainer({
        objective: { name: 'sft' },
        optimizer: { lr: recipe.lr, weightDecay: 0 },
        schedule: learningRateSchedule(recipe.healSteps, { warmupSteps: 5, minLrRatio: 0.1 }),
        clipGradNorm: 1,
        microBatchSize: recipe.batchSize,
      })
      const eos = model.config.eosTokenIds[0]
      const corpus = buildCorpus({ seed: recipe.corpusSeed, size: recipe.healSteps * recipe.batchSize, mix: { solver: 1 }, levelWeights: [1, 2, 3, 2, 1] })
      for (let s = 0; s < recipe.healSteps; s++) {
        const batch = corpus.slice(s * recipe.batchSize, (s + 1) * recipe.batchSize).map((it) => ({
          prompt: model.tokenizer.encode(it.prompt, { addSpecialTokens: false }),
          completion: [...model.tokenizer.encode(it.completion, { addSpecialTokens: false }), eos],
        }))
        const m = await trainer.step({ sequences: batch })
        if ((s + 1) % 20 === 0) o.log?.(`llama variant: heal step ${s + 1}/${recipe.healSteps} loss ${m.loss.toFixed(3)}`)
      }
      await model.save(outDir)
    } finally {
      model.dispose()
    }
  }
  await writeJsonAtomic(join(outDir, 'variant.json'), { source: sourceDir, kind: 'llama-from-qwen3', recipe }, 2)
}

/** The cached Llama variant of `sourceDir` under `cacheRoot`, built on first use. */
export async function ensureLlamaVariant(sourceDir: string, recipe: LlamaVariantRecipe = DEFAULT_LLAMA_RECIPE, o: VariantBuildOptions & { cacheRoot?: string } = {}): Promise<string> {
  const hash = createHash('sha256')
  hash.update(await readFile(join(sourceDir, 'model.safetensors')))
  hash.update(JSON.stringify(recipe))
  const dir = join(o.cacheRoot ?? defaultVariantCache(), `llama-${hash.digest('hex').slice(0, 16)}`)
  if (existsSync(join(dir, 'variant.json'))) return dir
  const tmp = `${dir}.tmp-${process.pid}-${Date.now()}`
  o.log?.(`building the Llama-architecture ensemble variant of ${sourceDir} (${recipe.healSteps} SFT steps) into ${dir}`)
  try {
    await buildLlamaVariant(sourceDir, tmp, recipe, o)
    if (existsSync(join(dir, 'variant.json'))) return dir // another process finished first
    await rm(dir, { recursive: true, force: true })
    await rename(tmp, dir)
  } finally {
    await rm(tmp, { recursive: true, force: true })
  }
  return dir
}

/**
 * R-Zero's default S_c (DIS §4.2) when the policy is the bundled toy model: its cached Llama
 * variant. Null for any other model: a user's model gets no second model built from the toy's
 * vocabulary (its ensemble is the Solver at several temperatures, or a folder the config names).
 */
export async function toySecondModel(baseModel: string, healSteps: number, o: VariantBuildOptions & { cacheRoot?: string } = {}): Promise<string | null> {
  if (resolve(baseModel) !== resolve(BUNDLED_MODEL)) return null
  return ensureLlamaVariant(baseModel, { ...DEFAULT_LLAMA_RECIPE, healSteps }, o)
}
