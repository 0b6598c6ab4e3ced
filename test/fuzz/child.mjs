// The fuzz test's child process (see loader.test.ts): runs fuzz cases of one target, a seeded
// range of them, against the compiled library (dist/), and reports each on stdout as a JSON line:
//   {"start": i}                                   before case i runs
//   {"done": i, "outcome": "accepted" | "typed", "code": …}   after it
//   {"bad": i, "error": "…"}                       an untyped error, or an accepted result that breaks an invariant
// A crash (abort, signal, out of memory) or a hang shows as a start line with no done line; the
// parent then restarts a child after that case. Reproduce one case by hand with
//   node test/fuzz/child.mjs <target> <seed> <index> <index+1> <baseModelDir>
import { linkSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const dist = new URL('../../dist/', import.meta.url)
const { AutodidactError } = await import(new URL('engine/errors.js', dist).href)
const { readSafetensorsHeader } = await import(new URL('engine/hf/safetensors.js', dist).href)
const { readModelFolder } = await import(new URL('engine/hf/folder.js', dist).href)
const { parseAdapterConfig, readAdapterConfig } = await import(new URL('engine/hf/adapter.js', dist).href)
const { Tokenizer } = await import(new URL('engine/tokenizer.js', dist).href)

const [target, seedArg, fromArg, toArg, baseDir] = process.argv.slice(2)
const seed = Number(seedArg)
const work = mkdtempSync(join(tmpdir(), `ad-fuzz-${target}-`))
process.on('exit', () => rmSync(work, { recursive: true, force: true }))
process.emitWarning = () => undefined // unused-weight warnings are expected here

// ---------------------------------------------------------------------------------------------
// Seeded randomness: mulberry32 keyed by (seed, target, case index)

function rngFor(index) {
  let h = (seed ^ 0x9e3779b9) >>> 0
  for (const c of `${target}:${index}`) h = Math.imul(h ^ c.charCodeAt(0), 0x01000193) >>> 0
  let a = h
  const next = () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
  const int = (n) => Math.floor(next() * n)
  const pick = (xs) => xs[int(xs.length)]
  return { next, int, pick, chance: (p) => next() < p }
}

/** Values a field could be given by a careless or hostile file. */
const ODD = [0, -1, 1, 2, 3, 7, 64, 1e9, 1e300, -1e300, 2 ** 53, 2 ** 53 + 2, 0.5, -0.0, '8', '', 'abc', null, true, false, [], [1], [1, 2, 3], {}, { a: 1 }, [[[[[]]]]]]

function oddValue(r) {
  if (r.chance(0.1)) return 'x'.repeat(r.int(5000))
  if (r.chance(0.05)) return Array.from({ length: r.int(20000) }, () => r.pick(['full_attention', 'sliding_attention', 1]))
  if (r.chance(0.2)) return r.int(100000) - 50000
  return r.pick(ODD)
}

// ---------------------------------------------------------------------------------------------
// safetensors headers and framing

const DTYPES = ['F32', 'BF16', 'F16']
const WIDTH = { F32: 4, BF16: 2, F16: 2 }

function validSafetensors(r) {
  const header = {}
  let offset = 0
  const n = 1 + r.int(4)
  for (let i = 0; i < n; i++) {
    const dtype = r.pick(DTYPES)
    const shape = Array.from({ length: r.int(3) }, () => r.int(5))
    const bytes = shape.reduce((a, b) => a * b, 1) * WIDTH[dtype]
    header[`t${i}`] = { dtype, shape, data_offsets: [offset, offset + bytes] }
    offset += bytes
  }
  if (r.chance(0.5)) header.__metadata__ = { format: 'pt' }
  return { header, data: new Uint8Array(offset).map(() => r.int(256)) }
}

function mutateHeader(r, header) {
  const names = Object.keys(header).filter((k) => k !== '__metadata__')
  const name = r.pick(names)
  const plain = (v) => v !== null && typeof v === 'object' && !Array.isArray(v)
  if (!plain(header[name])) header[name] = { dtype: 'F32', shape: [1], data_offsets: [0, 4] }
  const e = header[name]
  if (!Array.isArray(e.data_offsets) || e.data_offsets.length < 2) e.data_offsets = [0, 4]
  switch (r.int(12)) {
    case 0: e.data_offsets = [e.data_offsets[0] + r.int(9) - 4, e.data_offsets[1] + r.int(9) - 4]; break
    case 1: e.data_offsets = r.pick([[1, 0], [-4, 0], [0.5, 4], ['0', '4'], [0], [0, 4, 8], null, [0, 1e20], [2 ** 60, 2 ** 60 + 4]]); break
    case 2: e.shape = r.pick([[-1], [1e9, 1e9], [2 ** 53], [1.5], ['2'], null, 'x', [0], Array(50).fill(2)]); break
    case 3: e.dtype = r.pick(['I64', 'F8_E4M3', 'F4', 'bogus', '', 5, null, 'f32', '__proto__', 'constructor']); break
    case 4: delete e[r.pick(['dtype', 'shape', 'data_offsets'])]; break
    case 5: header[name] = oddValue(r); break
    case 6: header.__metadata__ = r.pick([5, 'x', [], { a: 5 }, { a: { b: 'c' } }, null]); break
    case 7: e.extra = oddValue(r); break
    case 8: header[`t${names.length}`] = { dtype: 'F32', shape: [1], data_offsets: [e.data_offsets[0], e.data_offsets[0] + 4] }; break // overlap or gap
    case 9: e.data_offsets = [e.data_offsets[1], e.data_offsets[1] + (e.data_offsets[1] - e.data_offsets[0])]; break
    case 10: header['__proto__'] = { dtype: 'F32', shape: [1], data_offsets: [0, 4] }; break
    default: header[name] = { ...e, shape: [...(e.shape ?? []), 1] }
  }
}

function frame(r, json, data) {
  let text = json
  if (r.chance(0.1)) text = r.pick(['\uFEFF', ' ', '\n', 'x', '\0']) + text
  if (r.chance(0.1)) text = text.slice(0, r.int(text.length + 1))
  if (r.chance(0.05)) text = '['.repeat(20000) + ']'.repeat(20000)
  let headerBytes = Buffer.from(text, 'utf8')
  if (r.chance(0.5)) headerBytes = Buffer.concat([headerBytes, Buffer.alloc((8 - ((8 + headerBytes.length) % 8)) % 8, 0x20)])
  if (r.chance(0.1)) for (let k = 0; k < 1 + r.int(4); k++) headerBytes[r.int(headerBytes.length)] = r.int(256)
  let len = BigInt(headerBytes.length)
  if (r.chance(0.25)) len = r.pick([len - 1n, len + 1n, len - 8n, len + 8n, 0n, 1n, 2n ** 63n - 1n, 2n ** 64n - 1n, BigInt(1e8 + 1), BigInt(r.int(1000))])
  const prefix = Buffer.alloc(8)
  prefix.writeBigUInt64LE(len < 0n ? 0n : len)
  let file = Buffer.concat([prefix, headerBytes, data])
  if (r.chance(0.15)) file = Buffer.concat([file, Buffer.from(Array.from({ length: 1 + r.int(16) }, () => r.int(256)))])
  if (r.chance(0.15)) file = file.subarray(0, r.int(file.length + 1))
  return file
}

async function fuzzSafetensors(r) {
  const { header, data } = validSafetensors(r)
  for (let k = r.int(3); k > 0; k--) mutateHeader(r, header)
  let json = JSON.stringify(header)
  if (r.chance(0.1)) json = json.replace(/^\{("[^"]+":\{[^}]*\})/, '{$1,$1') // a duplicate key
  const file = join(work, 'x.safetensors')
  writeFileSync(file, frame(r, json, data))
  const h = await readSafetensorsHeader(file)
  // accepted: the reference's invariants hold
  const sorted = h.tensors.slice().sort((a, b) => a.offset - b.offset)
  let at = h.dataStart
  for (const t of sorted) {
    if (t.offset !== at) throw new Error(`accepted a file whose tensor ${t.name} starts at ${t.offset}, not ${at}`)
    if (t.nbytes !== t.shape.reduce((a, b) => a * b, 1) * WIDTH[t.dtype]) throw new Error(`accepted ${t.name} with a byte span that is not its shape`)
    at += t.nbytes
  }
  if (at !== h.fileSize) throw new Error(`accepted a file whose tensors end at ${at} of ${h.fileSize}`)
}

// ---------------------------------------------------------------------------------------------
// config.json fields (and generation_config.json) of a model folder

const CONFIG_FIELDS = [
  'vocab_size', 'hidden_size', 'intermediate_size', 'num_hidden_layers', 'num_attention_heads', 'num_key_value_heads', 'head_dim',
  'rms_norm_eps', 'rope_theta', 'rope_scaling', 'rope_parameters', 'max_position_embeddings', 'tie_word_embeddings', 'attention_bias',
  'architectures', 'model_type', 'hidden_act', 'mlp_bias', 'partial_rotary_factor', 'use_sliding_window', 'sliding_window',
  'max_window_layers', 'layer_types', 'bos_token_id', 'eos_token_id', 'torch_dtype', 'id2label', 'num_labels', 'pad_token_id',
]
const ARCHS = [['Qwen3ForCausalLM'], ['LlamaForCausalLM'], ['Qwen2ForSequenceClassification'], ['MistralForCausalLM'], [], ['x', 5], 'Qwen3ForCausalLM']
const ROPES = [{ rope_type: 'llama3', factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 8192 }, { rope_type: 'yarn', factor: 4 }, { type: 'linear' }, { rope_type: 'llama3', factor: -1 }, { rope_type: 'llama3' }, { full_attention: {} }]

/** A case folder: the base model's files hard-linked, config.json (and maybe generation_config.json) rewritten. */
function caseFolder(files) {
  const dir = join(work, 'model')
  rmSync(dir, { recursive: true, force: true })
  mkdirSync(dir)
  for (const f of ['model.safetensors', 'tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) if (!(f in files)) linkSync(join(baseDir, f), join(dir, f))
  for (const [f, text] of Object.entries(files)) writeFileSync(join(dir, f), text)
  return dir
}

const BASE_CONFIG = baseDir ? JSON.parse(readFileSync(join(baseDir, 'config.json'), 'utf8')) : null

async function fuzzConfig(r) {
  const cfg = structuredClone(BASE_CONFIG)
  for (let k = 1 + r.int(3); k > 0; k--) {
    const field = r.pick(CONFIG_FIELDS)
    cfg[field] = field === 'architectures' && r.chance(0.5) ? r.pick(ARCHS) : /rope_(scaling|parameters)/.test(field) && r.chance(0.6) ? r.pick(ROPES) : oddValue(r)
  }
  if (r.chance(0.1)) delete cfg[r.pick(CONFIG_FIELDS)]
  let text = JSON.stringify(cfg)
  if (r.chance(0.08)) text = text.slice(0, r.int(text.length))
  const files = { 'config.json': text }
  if (r.chance(0.15)) files['generation_config.json'] = JSON.stringify(r.pick([5, [], { eos_token_id: oddValue(r) }, 'x']))
  await readModelFolder(caseFolder(files))
}

// ---------------------------------------------------------------------------------------------
// adapter_config.json

const ADAPTER_FIELDS = ['r', 'lora_alpha', 'target_modules', 'peft_type', 'use_dora', 'bias', 'fan_in_fan_out', 'rank_pattern', 'alpha_pattern', 'modules_to_save', 'base_model_name_or_path', 'layers_to_transform', 'use_rslora']

async function fuzzAdapter(r) {
  const cfg = { peft_type: 'LORA', r: 8, lora_alpha: 16, target_modules: ['q_proj', 'v_proj'], bias: 'none' }
  for (let k = 1 + r.int(3); k > 0; k--) cfg[r.pick(ADAPTER_FIELDS)] = r.chance(0.3) ? r.pick([-1, 0, 1, 1e9, 65536, 65537, 2.5, 'all-linear', ['q_proj'], [''], Array(100).fill('x'), 'LORA', 'IA3']) : oddValue(r)
  if (r.chance(0.3)) {
    let text = JSON.stringify(cfg)
    if (r.chance(0.5)) text = text.slice(0, r.int(text.length))
    const dir = join(work, 'adapter')
    mkdirSync(dir, { recursive: true })
    writeFileSync(join(dir, 'adapter_config.json'), r.chance(0.1) ? Buffer.from(Array.from({ length: r.int(64) }, () => r.int(256))) : text)
    await readAdapterConfig(dir)
  } else {
    const a = parseAdapterConfig(r.chance(0.05) ? oddValue(r) : cfg, 'adapter_config.json')
    if (!(Number.isSafeInteger(a.rank) && a.rank >= 1 && a.alpha > 0 && a.targets.length > 0)) throw new Error(`accepted an adapter config with rank ${a.rank}, alpha ${a.alpha}`)
  }
}

// ---------------------------------------------------------------------------------------------
// chat templates

const BIG = [0, 1, 10, 1000, 100000, 100001, 1e10, -5, "'a'", 'none', '2**40']
const TEMPLATE_PARTS = [
  (r) => `{% for i in range(${r.pick(BIG)}) %}${r.pick(['', 'x', '{{ i }}'])}{% endfor %}`,
  (r) => `{% for a in range(${r.pick(BIG)}) %}{% for b in range(${r.pick(BIG)}) %}{% endfor %}{% endfor %}`,
  (r) => `{% set ns = namespace(s='ab') %}{% for i in range(${r.int(40)}) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s|length }}`,
  (r) => `{% set ns = namespace(l=[1]) %}{% for i in range(${r.int(40)}) %}{% set ns.l = ns.l + ns.l %}{% endfor %}{{ ns.l|length }}`,
  (r) => `{{ 'x'|indent(${r.pick(BIG)}) }}`,
  (r) => `{{ messages|tojson(indent=${r.pick(BIG)}) }}`,
  () => '{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}',
  () => "{{ raise_exception('boom') }}",
  () => '{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}',
  () => '{{ messages[1000000].content }}{{ none.x }}{{ undefined_var.y }}',
  () => '{{ 1/0 }}',
  () => "{{ 'abc'[::-1] }}{{ [3,1,2]|sort|join(',') }}{{ messages|length }}{{ range(3)|list }}",
  () => "{{ strftime_now('%Y-%m-%d') }}{{ bos_token }}{{ eos_token }}",
  (r) => r.pick(['{% if %}', '{{', '{% for %}', '{% endfor %}', '{{ ) }}', '{% set = %}', '{#', '{% break %}', '{{ [1]*3 }}', '{{ "a" * 3 }}']),
  (r) => `{{ ${'('.repeat(r.int(3000))}1${')'.repeat(r.int(3000))} }}`,
  (r) => `{% set x = ${'['.repeat(r.int(2000))}${']'.repeat(r.int(2000))} %}`,
  () => "{{ messages|map(attribute='content')|join('|') }}{{ messages|selectattr('role', 'equalto', 'user')|list|length }}",
  () => '{% for k, v in {"a": 1, "b": 2}.items() %}{{ k }}{{ v }}{{ loop.index }}{% endfor %}',
  () => '{{ messages[0].content.split(" ")|join("-") }}{{ messages[0].content|replace("a", "b"*1) }}',
]

function randomTemplate(r) {
  let t = ''
  for (let k = 1 + r.int(4); k > 0; k--) t += r.pick(TEMPLATE_PARTS)(r)
  if (r.chance(0.1)) t = t.slice(0, r.int(t.length))
  return t
}

const TEMPLATE_LIMITS = { timeMs: 250, maxSteps: 200_000 }
let tinyTokenizer = null
function tiny() {
  tinyTokenizer ??= new Tokenizer({
    tokenizerJson: JSON.parse(readFileSync(join(baseDir, 'tokenizer.json'), 'utf8')),
    tokenizerConfig: JSON.parse(readFileSync(join(baseDir, 'tokenizer_config.json'), 'utf8')),
  })
  return tinyTokenizer
}

async function fuzzTemplate(r) {
  const messages = r.chance(0.1) ? oddValue(r) : [{ role: 'system', content: 'be brief' }, { role: 'user', content: r.pick(['hi', 'x'.repeat(r.int(20000)), '', 'ünï 🙂']) }]
  const chatTemplate = randomTemplate(r)
  const out = tiny().applyChatTemplate(messages, { chatTemplate, addGenerationPrompt: r.chance(0.5), limits: TEMPLATE_LIMITS })
  if (typeof out !== 'string' || out.length > 8 << 20) throw new Error(`accepted a render of ${out?.length} characters`)
}

// ---------------------------------------------------------------------------------------------
// tokenizer.json and tokenizer_config.json

const REGEXES = ['(a+)+$', '(a|aa)+$', '(\\s*)*$', '(.*a){12}', '(', '[', '\\p{Bogus}', '(?<=a)b', 'a{1000000}', '', '\\s+(?!\\S)|\\s+', '(?i:abc)', "'s|'t| ?\\p{L}+| ?\\p{N}+"]
const NORMALIZERS = [() => ({ type: 'NFC' }), () => ({ type: 'NFKC' }), () => ({ type: 'Lowercase' }), () => ({ type: 'Strip', strip_left: true, strip_right: true }), (r) => ({ type: 'Replace', pattern: { Regex: r.pick(REGEXES) }, content: r.pick(['', 'x', 5]) }), () => ({ type: 'Prepend', prepend: '▁' }), (r) => ({ type: 'Sequence', normalizers: [{ type: 'NFC' }, r.pick([{ type: 'Bogus' }, null, 5, { type: 'Lowercase' }])] }), () => ({ type: 'Bogus' }), () => 5]
const PRETOKENIZERS = [(r) => ({ type: 'Split', pattern: { Regex: r.pick(REGEXES) }, behavior: r.pick(['Isolated', 'Removed', 'MergedWithPrevious', 'Contiguous', 'Bogus']), invert: r.chance(0.2) }), () => ({ type: 'ByteLevel', add_prefix_space: false, use_regex: true }), () => ({ type: 'Whitespace' }), () => ({ type: 'Metaspace', replacement: '▁' }), () => ({ type: 'Digits', individual_digits: true }), () => ({ type: 'Bogus' }), () => ({ type: 'Sequence', pretokenizers: 'x' })]
const DECODERS = [() => ({ type: 'ByteLevel' }), (r) => ({ type: 'Replace', pattern: { Regex: r.pick(REGEXES) }, content: ' ' }), () => ({ type: 'Strip', content: ' ', start: 1, stop: 0 }), () => ({ type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Bogus' }] }), () => ({ type: 'Bogus' })]

function mutateTokenizer(r, tj, tc) {
  const plain = (v) => v !== null && typeof v === 'object' && !Array.isArray(v)
  if (!plain(tj.model)) tj.model = { type: 'BPE', vocab: { a: 0 }, merges: [] }
  if (!plain(tj.model.vocab)) tj.model.vocab = { a: 0 }
  if (!Array.isArray(tj.model.merges)) tj.model.merges = []
  switch (r.int(9)) {
    case 0: tj.pre_tokenizer = r.pick(PRETOKENIZERS)(r); break
    case 1: tj.normalizer = r.pick(NORMALIZERS)(r); break
    case 2: tj.decoder = r.pick(DECODERS)(r); break
    case 3: {
      const keys = Object.keys(tj.model.vocab)
      tj.model.vocab[keys.length ? r.pick(keys) : 'a'] = r.pick([1e15, -1, 1.5, '3', null, 2 ** 32, 0])
      break
    }
    case 4: tj.model.merges = r.pick([['zz qq'], [['zz', 'qq']], 'x', null, [[1, 2]], tj.model.merges.slice(0, r.int(tj.model.merges.length))]); break
    case 5: tj.model = r.pick([{ ...tj.model, type: r.pick(['WordPiece', 'Unigram', 'WordLevel', 'Bogus']) }, { ...tj.model, vocab: [] }, { ...tj.model, unk_token: '<nope>' }, null, 5]); break
    case 6: tj.added_tokens = r.pick([[{ id: 1e15, content: 'x', special: true }], [{ id: -1, content: 'y' }], [{ content: 'z' }], [{ id: 5, content: '' }], [{ id: 1, content: 'a' }, { id: 1, content: 'b' }], 'x', null]); break
    case 7: tc.chat_template = r.pick([5, [], [{ name: 'default', template: 5 }], { a: 1 }, '{% for %}', null]); break
    default: tc[r.pick(['eos_token', 'bos_token', 'pad_token', 'unk_token', 'additional_special_tokens', 'clean_up_tokenization_spaces'])] = r.chance(0.5) ? { content: oddValue(r) } : oddValue(r)
  }
}

async function fuzzTokenizer(r) {
  const tj = JSON.parse(readFileSync(join(baseDir, 'tokenizer.json'), 'utf8'))
  const tc = JSON.parse(readFileSync(join(baseDir, 'tokenizer_config.json'), 'utf8'))
  for (let k = 1 + r.int(2); k > 0; k--) mutateTokenizer(r, tj, tc)
  let tok
  if (r.chance(0.15)) {
    // through the files, raw bytes and all
    const dir = join(work, 'tok')
    mkdirSync(dir, { recursive: true })
    let text = JSON.stringify(tj)
    if (r.chance(0.3)) text = text.slice(0, r.int(text.length))
    writeFileSync(join(dir, 'tokenizer.json'), text)
    writeFileSync(join(dir, 'tokenizer_config.json'), JSON.stringify(tc))
    tok = await Tokenizer.fromFolder(dir)
  } else tok = new Tokenizer({ tokenizerJson: tj, tokenizerConfig: tc })
  for (const text of ['hello world', `${'a'.repeat(30)}b`, '  \n\t ', 'ünïcödé 🙂 中文']) tok.encode(text)
  tok.decode(Array.from({ length: 8 }, () => r.int(tok.vocabSize + 10)))
  const stream = tok.createStreamDecoder()
  for (let k = 0; k < 5; k++) stream.push(r.int(Math.max(1, tok.vocabSize)))
  stream.flush()
  if (tok.hasChatTemplate()) tok.applyChatTemplate([{ role: 'user', content: 'hi' }], { limits: TEMPLATE_LIMITS })
}

// ---------------------------------------------------------------------------------------------

// The harness's own check (loader.test.ts): case 3 aborts, hangs or throws untyped; the others pass.
const harness = (failure) => async (r) => {
  if (r.next() >= 0 && failure && Number(process.env.FUZZ_FAIL_AT ?? 3) === currentCase) failure()
}
const TARGETS = {
  safetensors: fuzzSafetensors,
  config: fuzzConfig,
  adapter: fuzzAdapter,
  template: fuzzTemplate,
  tokenizer: fuzzTokenizer,
  'harness-abort': harness(() => process.abort()),
  'harness-hang': harness(() => {
    for (;;);
  }),
  'harness-untyped': harness(() => {
    throw new TypeError('not one of ours')
  }),
}
let currentCase = -1
const run = TARGETS[target]
if (!run) throw new Error(`unknown fuzz target ${target}`)
const say = (o) => process.stdout.write(JSON.stringify(o) + '\n')
for (let i = Number(fromArg); i < Number(toArg); i++) {
  currentCase = i
  say({ start: i })
  const t0 = performance.now()
  try {
    await run(rngFor(i))
    say({ done: i, outcome: 'accepted', ms: Math.round(performance.now() - t0) })
  } catch (e) {
    if (e instanceof AutodidactError) say({ done: i, outcome: 'typed', code: e.name, ms: Math.round(performance.now() - t0) })
    else say({ bad: i, error: `${e?.name ?? typeof e}: ${String(e?.message ?? e).slice(0, 300)} ${String(e?.stack ?? '').split('\n').slice(1, 3).join(' ').trim().slice(0, 300)}` })
  }
}
