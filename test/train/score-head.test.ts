// Reward models: a score head on the last token (HF *ForSequenceClassification), trained with
// the Bradley–Terry loss (JZ Eq. 13), saved and reloaded exactly.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, describe, expect, it } from 'vitest'
import { loadModel } from '../../src/index.js'
import { nativeAddon } from '../../src/native.js'
import { writeTinyModel } from '../helpers/tiny-model.js'

const root = mkdtempSync(join(tmpdir(), 'ad-score-'))
afterAll(() => rmSync(root, { recursive: true, force: true }))

describe('score head', () => {
  it('its gradient matches central differences of the native scores', async () => {
    const tiny = await writeTinyModel(join(root, 'fd'), { family: 'llama', dtype: 'F32', seed: 61 })
    const model = await loadModel(tiny.dir, { threads: 2 })
    await model.attachScoreHead({ seed: 3 })
    const train = (await nativeAddon()).train
    train.setTrainable(model.handle, true, false)
    const seqs = [[5, 6, 7, 8], [9, 10, 11]]
    const tokens = Int32Array.from(seqs.flat())
    const lengths = Int32Array.from(seqs, (s) => s.length)
    const dS = Float32Array.of(0.7, -1.3)
    await train.scoreForward(model.handle, { tokens, lengths })
    await train.scoreBackward(model.handle, { dScores: dS })
    const grads = new Map((await train.exportGradients(model.handle)).map((g) => [g.name, g.data]))
    const L = async () => {
      const s = await train.scoreForward(model.handle, { tokens, lengths, tape: false })
      return dS[0] * s[0] + dS[1] * s[1]
    }
    const tensors = new Map((await train.exportTensors(model.handle)).map((t) => [t.name, t]))
    for (const [name, i, h] of [['score.weight', 3, 1e-2], ['model.layers.1.mlp.down_proj.weight', 17, 1e-2], ['model.norm.weight', 2, 1e-2]] as const) {
      const t = tensors.get(name)!
      const orig = t.data[i]
      const at = async (x: number) => {
        t.data[i] = x
        await train.importTensors(model.handle, [{ name, data: t.data }])
        return L()
      }
      const fd = ((await at(orig + h)) - (await at(orig - h))) / (2 * h)
      await at(orig)
      const g = grads.get(name)![i]
      expect(Math.abs(g - fd), `${name}[${i}]: ${g} vs ${fd}`).toBeLessThanOrEqual(2e-2 * Math.abs(fd) + 1e-4)
    }
    model.dispose()
  })

  it('Bradley–Terry steps order the training pairs, and the reward model saves and reloads exactly', async () => {
    const tiny = await writeTinyModel(join(root, 'bt'), { family: 'qwen3', dtype: 'F32', seed: 62 })
    const model = await loadModel(tiny.dir, { threads: 2 })
    await model.attachScoreHead({ seed: 1 })
    const prompt = [1, 2, 3]
    const good = [[40, 41, 42], [43, 44], [45, 46, 47, 48]]
    const bad = [[90, 91, 92], [93, 94], [95, 96, 97, 98]]
    const sequences = [...good, ...bad].map((completion) => ({ prompt, completion }))
    const pairs = good.map((_, i) => [i, good.length + i] as [number, number])
    const accuracy = async () => {
      const s = await model.rewardScores(sequences.map((x) => ({ prompt: x.prompt, completion: x.completion })))
      return pairs.filter(([c, r]) => s[c] > s[r]).length / pairs.length
    }
    const trainer = await model.trainer({ objective: { name: 'bradley-terry' }, optimizer: { lr: 1e-2 } })
    const losses: number[] = []
    for (let i = 0; i < 15; ++i) losses.push((await trainer.step({ sequences, pairs })).loss)
    expect(losses.at(-1)!).toBeLessThan(losses[0])
    expect(await accuracy()).toBe(1)
    const before = await model.rewardScores([{ prompt, completion: [40, 41, 42] }])
    const dir = join(root, 'rm')
    await model.save(dir)
    expect(JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8')).architectures).toEqual(['Qwen3ForSequenceClassification'])
    const reloaded = await loadModel(dir, { threads: 2 })
    expect(reloaded.scoreLabels).toBe(1)
    expect(Array.from(await reloaded.rewardScores([{ prompt, completion: [40, 41, 42] }]))).toEqual(Array.from(before))
    model.dispose()
    reloaded.dispose()
  })

  it('scoreHeadOnly: a Bradley–Terry step moves score.weight alone, by exactly the step the full trainer gives it', async () => {
    const tiny = await writeTinyModel(join(root, 'head-only'), { family: 'qwen3', dtype: 'F32', seed: 63, tied: true })
    const train = (await nativeAddon()).train
    const prompt = [1, 2, 3]
    const sequences = [[40, 41, 42], [43, 44], [90, 91, 92], [93, 94]].map((completion) => ({ prompt, completion }))
    const pairs: [number, number][] = [[0, 2], [1, 3]]
    const after = async (scoreHeadOnly: boolean) => {
      const model = await loadModel(tiny.dir, { threads: 2 })
      await model.attachScoreHead({ seed: 5 })
      const before = new Map((await train.exportTensors(model.handle)).map((t) => [t.name, Float32Array.from(t.data)]))
      // no clip: the full trainer's global norm would scale the head's step by the backbone's gradients too
      const trainer = await model.trainer({ objective: { name: 'bradley-terry' }, optimizer: { lr: 1e-2 }, clipGradNorm: 0, scoreHeadOnly })
      const m = await trainer.step({ sequences, pairs })
      expect(Number.isFinite(m.loss)).toBe(true)
      const now = new Map((await train.exportTensors(model.handle)).map((t) => [t.name, Float32Array.from(t.data)]))
      model.dispose()
      return { before, now }
    }
    const head = await after(true)
    const full = await after(false)
    const moved = (r: typeof head) => [...r.now].filter(([name, data]) => data.some((x, i) => x !== r.before.get(name)![i])).map(([name]) => name)
    expect(moved(head)).toEqual(['score.weight'])
    expect(moved(full).length).toBeGreaterThan(1)
    expect(Array.from(head.now.get('score.weight')!)).toEqual(Array.from(full.now.get('score.weight')!))
  })

  it('scoreHeadOnly is refused without a score objective, and beside LoRA', async () => {
    const tiny = await writeTinyModel(join(root, 'head-only-bad'), { family: 'qwen3', dtype: 'F32', seed: 64 })
    const model = await loadModel(tiny.dir, { threads: 2 })
    await expect(model.trainer({ objective: { name: 'sft' }, optimizer: { lr: 1e-3 }, scoreHeadOnly: true })).rejects.toThrow(/scoreHeadOnly trains a score head alone; objective 'sft'/)
    await model.attachScoreHead({ seed: 1 })
    await expect(model.trainer({ objective: { name: 'bradley-terry' }, optimizer: { lr: 1e-3 }, scoreHeadOnly: true, lora: { rank: 2, alpha: 4 } })).rejects.toThrow(/scoreHeadOnly freezes the backbone/)
    model.dispose()
  })
})
