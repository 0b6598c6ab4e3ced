// The memory plan's arithmetic against a hand count of a tiny config (every item written out
// below from native/cuda/model_cuda.h's buffers), and its behaviour at the real vocabulary.
import { describe, expect, it } from 'vitest'
import { formatMemoryPlan, LOGITS_BUDGET_MAX, RUNTIME_RESERVE_BYTES, trainingMemoryPlan, weightBytes } from '../../src/engine/memory-plan.js'
import { InvalidArgumentError } from '../../src/engine/errors.js'
import type { ModelConfig } from '../../src/engine/types.js'

function config(over: Partial<ModelConfig> = {}): ModelConfig {
  return {
    architecture: 'qwen3', hfArchitecture: 'Qwen3ForCausalLM', vocabSize: 16, hiddenSize: 8, intermediateSize: 12, numLayers: 2,
    numHeads: 2, numKvHeads: 1, headDim: 4, rmsNormEps: 1e-6, ropeTheta: 10000, ropeScaling: null, maxPositionEmbeddings: 64,
    tieWordEmbeddings: true, qkvBias: false, oBias: false, qkNorm: true, bosTokenId: null, eosTokenIds: [2], torchDtype: null, ...over,
  }
}

const item = (plan: ReturnType<typeof trainingMemoryPlan>, name: string) => {
  const i = plan.items.find((x) => x.name === name)
  if (!i) throw new Error(`no item ${name}`)
  return i.bytes
}

describe('trainingMemoryPlan: a hand count of a tiny Qwen3 (V 16, H 8, I 12, 2 layers, 2 heads, 1 KV head, head 4, tied)', () => {
  // batch 2 × 5 tokens: T = 2·4 = 8 fed tokens, R = 8 completion rows
  const plan = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 })

  it('weights: f32 masters everywhere, bf16 copies of the matrices', () => {
    // embed 16·8 = 128 (6 B); per layer: norms 8+8, q/k norms 4+4 (4 B); wq 64, wk 32, wv 32, wo 64, gate/up/down 96 each (6 B); final norm 8
    const layerElems = 8 + 8 + 4 + 4 + 64 + 32 + 32 + 64 + 3 * 96
    expect(layerElems).toBe(504)
    const layerBytes = 4 * (8 + 8 + 4 + 4) + 6 * (64 + 32 + 32 + 64 + 3 * 96)
    expect(weightBytes(config())).toEqual({ elements: 128 + 2 * 504 + 8, bytes: 6 * 128 + 2 * layerBytes + 4 * 8 })
    expect(item(plan, 'weights')).toBe(6752)
  })

  it('full fine-tuning: an f32 gradient and two f32 moments per parameter', () => {
    expect(item(plan, 'gradients')).toBe(1144 * 4)
    expect(item(plan, 'optimizer')).toBe(1144 * 8)
  })

  it('activations: every layer taped, plus the final norm input and hidden rows', () => {
    // per token per layer, f32: x_in 8, q_raw 8, k_raw 4, lse 2, x_mid 8, gate 12, up 12 = 54; bf16: xn1 8, q 8, att 8, xn2 8 = 32
    const perToken = 54 * 4 + 32 * 2
    expect(item(plan, 'activations')).toBe(2 * 8 * perToken + 8 * 8 * 4 + 8 * 8 * 2)
  })

  it('training KV cache: bf16 K and V, positions rounded up to 256', () => {
    expect(item(plan, 'kv-cache')).toBe(2 * 2 * 2 * 256 * 4 * 2)
  })

  it('forward and backward scratch', () => {
    // forward per token: f32 x 8, q 8, k 4, v 4, gate 12, up 12 = 48; bf16 xn 8, q 8, att 8, h 12 = 36; RoPE 2 float2; 6 int32
    // + hidden rows 8·8 bf16 + the attention's split workspace T·heads·(head+1)·16 f32
    expect(item(plan, 'forward-scratch')).toBe(8 * (48 * 4 + 36 * 2 + 2 * 8 + 6 * 4) + 8 * 8 * 2 + 8 * 2 * 5 * 16 * 4)
    // backward per token: f32 dx 8, dxn 8, dq 8, datt 8, dk 4, dv 4, dh 12, delta 2 = 54; bf16 dy 8, dq 8, dk 4, dv 4, dh 12, dup 12 = 48; + dh rows 8·8 f32
    expect(item(plan, 'backward-scratch')).toBe(8 * (54 * 4 + 48 * 2) + 8 * 8 * 4)
  })

  it('LM head: one chunk of all 8 rows (f32 logits, bf16 d logits, 9 statistics a row)', () => {
    expect(item(plan, 'lm-head')).toBe(8 * 16 * 4 + 8 * 16 * 2 + 8 * 9 * 4)
  })

  it('the peak is the sum, split into load, trainer and step', () => {
    expect(plan.loadBytes).toBe(6752)
    expect(plan.trainerBytes).toBe(1144 * 12)
    const step = 4864 + 16384 + 7680 + 2752 + 1056 + RUNTIME_RESERVE_BYTES
    expect(plan.stepBytes).toBe(step)
    expect(plan.peakBytes).toBe(6752 + 1144 * 12 + step)
    expect(plan.items.reduce((a, i) => a + i.bytes, 0)).toBe(plan.peakBytes)
  })

  it('gradient checkpointing keeps each layer input and one layer tape', () => {
    const ck = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { gradientCheckpointing: true })
    expect(item(ck, 'activations')).toBe(2 * 8 * 8 * 4 + 8 * 280 + 8 * 8 * 4 + 8 * 8 * 2)
    expect(ck.peakBytes).toBeLessThan(plan.peakBytes)
  })

  it('LoRA: adapters with their state, no base gradients, one linear\'s scratch', () => {
    const lo = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { lora: { rank: 2, targets: ['q_proj', 'v_proj'] } })
    // q_proj: A 2×8 + B 8×2 = 32; v_proj: A 2×8 + B 4×2 = 24; two layers
    const n = 2 * (32 + 24)
    expect(item(lo, 'adapters')).toBe(n * 6)
    expect(item(lo, 'gradients')).toBe(n * 4)
    expect(item(lo, 'optimizer')).toBe(n * 8)
    expect(item(lo, 'adapter-scratch')).toBe(2 * 8 * 2 * 2) // u and du: T 8 × rank 2, bf16
    const ref = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { lora: { rank: 2, targets: ['q_proj'] }, reference: 'lora-off' })
    expect(item(ref, 'reference-kv-cache')).toBe(item(ref, 'kv-cache'))
    expect(lo.trainerBytes).toBe(n * 18)
  })

  it('several adapters: each at its own rank and targets, gradients and moments for the trained ones only', () => {
    // per layer: P rank 2 on q_proj (2·(8+8) = 32) and v_proj (2·(8+4) = 24) = 56; S rank 3 on down_proj (3·(12+8)) = 60;
    // J rank 2 on all seven: q 32, k 24, v 24, o 32, gate 2·(8+12) = 40, up 40, down 40 = 232; two layers each
    const [P, S, J] = [2 * 56, 2 * 60, 2 * 232]
    const roles = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, {
      adapters: [
        { name: 'proposer', rank: 2, targets: ['q_proj', 'v_proj'], trained: true, attached: true },
        { name: 'solver', rank: 3, targets: ['down_proj'], trained: true, attached: true },
        { name: 'judge', rank: 2, trained: false, attached: true },
      ],
      reference: 'lora-off',
    })
    expect(item(roles, 'attached-adapters')).toBe((P + S + J) * 6)
    expect(roles.items.some((i) => i.name === 'adapters')).toBe(false) // none attached by the trainer
    expect(item(roles, 'gradients')).toBe((P + S) * 4)
    expect(item(roles, 'optimizer')).toBe((P + S) * 8)
    expect(item(roles, 'adapter-scratch')).toBe(2 * 8 * 3 * 2) // u and du of T 8 rows at the largest rank, 3
    expect(roles.loadBytes).toBe(6752 + (P + S + J) * 6)
    expect(roles.trainerBytes).toBe((P + S) * 12)
    expect(roles.items.reduce((a, i) => a + i.bytes, 0)).toBe(roles.peakBytes)
    // the count this replaces (one adapter of the trained ones' summed rank 5 on q_proj, v_proj, down_proj) was more than twice the gradients
    expect(trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { lora: { rank: 5, targets: ['q_proj', 'v_proj', 'down_proj'] } }).items.find((i) => i.name === 'gradients')!.bytes).toBe(2 * (5 * 16 + 5 * 12 + 5 * 20) * 4)

    // one trained adapter the trainer attaches is the `lora` plan, item for item
    const one = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { adapters: [{ rank: 2, targets: ['q_proj', 'v_proj'] }] })
    const lo = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { lora: { rank: 2, targets: ['q_proj', 'v_proj'] } })
    expect(one.items.map((i) => [i.name, i.bytes, i.phase])).toEqual(lo.items.map((i) => [i.name, i.bytes, i.phase]))

    // frozen adapters beside full fine-tuning: their weights held, every base parameter trained
    const frozen = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { adapters: [{ rank: 2, trained: false, attached: true }] })
    expect(item(frozen, 'attached-adapters')).toBe(J * 6)
    expect(item(frozen, 'gradients')).toBe(1144 * 4)
    expect(() => trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { lora: { rank: 2 }, adapters: [{ rank: 2 }] })).toThrow(InvalidArgumentError)
    expect(() => trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { adapters: [{ rank: 0 }] })).toThrow(/adapters\[0\]\.rank/)
  })

  it('a score head: whole sequences in, one row out, the head trained beside LoRA', () => {
    const sc = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { scoreLabels: 1, lora: { rank: 2, targets: ['q_proj'] } })
    // score.weight 1×8 (6 B) in the weights; T = 2·5 = 10, R = 2
    expect(item(sc, 'weights')).toBe(6752 + 8 * 6)
    expect(item(sc, 'gradients')).toBe((2 * 32 + 8) * 4)
    expect(item(sc, 'lm-head')).toBe(2 * 1 * (4 + 2))
    expect(item(sc, 'activations')).toBe(2 * 10 * 280 + 10 * 8 * 4 + 2 * 8 * 2)
  })

  it('scoreHeadOnly: gradients and moments for the score head alone, the rest of the plan as a full reward-model step', () => {
    const full = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { scoreLabels: 1 })
    const head = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { scoreLabels: 1, scoreHeadOnly: true })
    expect(item(head, 'gradients')).toBe(8 * 4) // score.weight 1×8
    expect(item(head, 'optimizer')).toBe(8 * 2 * 4)
    expect(item(full, 'gradients')).toBeGreaterThan(100 * item(head, 'gradients'))
    const rest = (p: typeof head) => p.items.filter((i) => i.name !== 'gradients' && i.name !== 'optimizer').map((i) => [i.name, i.bytes])
    expect(rest(head)).toEqual(rest(full))
    expect(() => trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { scoreHeadOnly: true })).toThrow(/scoreLabels > 0/)
    expect(() => trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { scoreLabels: 1, scoreHeadOnly: true, lora: { rank: 2 } })).toThrow(/trains no adapter/)
  })

  it('a generation cache and a frozen reference copy are held from load on', () => {
    const r = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 }, { reference: 'copy', generationCache: { slots: 3, capacity: 10 } })
    expect(item(r, 'generation-cache')).toBe(2 * 2 * 3 * 10 * 4 * 2)
    expect(item(r, 'reference')).toBeGreaterThan(6752)
    expect(r.loadBytes).toBe(6752 + 960 + item(r, 'reference'))
  })
})

describe('trainingMemoryPlan at real sizes', () => {
  const qwen3_1_7b = config({ vocabSize: 151936, hiddenSize: 2048, intermediateSize: 6144, numLayers: 28, numHeads: 16, numKvHeads: 8, headDim: 128 })

  it('chunks the LM head by the 2 GiB budget (f32 logits forward, f32 + bf16 backward)', () => {
    const p = trainingMemoryPlan(qwen3_1_7b, { batch: 8, sequenceLength: 1024 })
    const V = 151936
    const fwd = Math.floor(LOGITS_BUDGET_MAX / (4 * V)), bwd = Math.floor(LOGITS_BUDGET_MAX / (6 * V))
    expect([fwd, bwd]).toEqual([3533, 2355])
    expect(item(p, 'lm-head')).toBe(fwd * V * 4 + bwd * V * 2 + fwd * 36)
    // a smaller budget (less free memory) means smaller chunks
    expect(item(trainingMemoryPlan(qwen3_1_7b, { batch: 8, sequenceLength: 1024 }, { logitsBudgetBytes: 256 * 2 ** 20 }), 'lm-head')).toBeLessThan(item(p, 'lm-head'))
  })

  it('Qwen3-1.7B full fine-tuning at 8 × 1024 plans under 80 GB; checkpointing saves most of the tape', () => {
    const p = trainingMemoryPlan(qwen3_1_7b, { batch: 8, sequenceLength: 1024 })
    const ck = trainingMemoryPlan(qwen3_1_7b, { batch: 8, sequenceLength: 1024 }, { gradientCheckpointing: true })
    expect(p.peakBytes).toBeLessThan(80e9)
    expect(p.peakBytes).toBeGreaterThan(40e9) // 2.0 B parameters × 18 B alone are 36.6 GB
    expect(item(p, 'activations') / item(ck, 'activations')).toBeGreaterThan(7)
  })

  it('prints a table with the peak and whether it fits', () => {
    const p = trainingMemoryPlan(config(), { batch: 2, sequenceLength: 5 })
    const text = formatMemoryPlan(p, 1e12)
    expect(text).toMatch(/weights/)
    expect(text).toMatch(/peak/)
    expect(text).toMatch(/fits/)
    expect(formatMemoryPlan(p, 10)).toMatch(/does not fit/)
  })

  it('refuses shapes that are not positive integers', () => {
    expect(() => trainingMemoryPlan(config(), { batch: 0, sequenceLength: 5 })).toThrow(InvalidArgumentError)
    expect(() => trainingMemoryPlan(config(), { batch: 1, sequenceLength: 1 })).toThrow(InvalidArgumentError)
    expect(() => trainingMemoryPlan(config(), { batch: 1, sequenceLength: 5, completionLength: 5 })).toThrow(InvalidArgumentError)
    expect(() => trainingMemoryPlan(config(), { batch: 1, sequenceLength: 5 }, { lora: { rank: 2, targets: ['nope'] } })).toThrow(InvalidArgumentError)
  })
})
