// The tokenizer of a Hugging Face model folder: tokenizer.json through @huggingface/tokenizers,
// the chat template (tokenizer_config.json, chat_template.jinja or chat_template.json) through
// @huggingface/jinja, end-of-sequence ids merged from every file that declares them, and an
// incremental detokenizer for streaming that never emits half a UTF-8 character.

import { join } from 'node:path'

import { Template } from '@huggingface/jinja'
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers'

import { ConfigError, InvalidArgumentError, TokenizerError } from './errors.js'
import { MAX_JSON_FILE_BYTES, MAX_TOKENIZER_FILE_BYTES, readRegularFile } from './hf/files.js'
import { asResourceLimit, DEFAULT_TEMPLATE_LIMITS, kernel, sectionHasRegex, type TemplateLimits } from './hf/template.js'

/** One chat message. `content` is usually a string; templates may accept richer shapes. */
export interface ChatMessage {
  role: string
  content?: unknown
  [key: string]: unknown
}

export interface ChatTemplateOptions {
  /** Append the assistant turn's opening (e.g. `<|im_start|>assistant\n`). Default false. */
  addGenerationPrompt?: boolean
  /** Qwen3's switch; passed to the template only when set, as transformers does. */
  enableThinking?: boolean
  /** Tool (function) schemas, passed as `tools`; null/undefined renders as none. */
  tools?: unknown[] | null
  /** Pick a named template when tokenizer_config.json holds a list of them. */
  templateName?: string
  /** Use this template instead of the folder's. */
  chatTemplate?: string
  /** More variables for the template (e.g. `documents`, `date_string`). */
  extra?: Record<string, unknown>
  /** Bounds of the render (steps, sizes, range(), time); default DEFAULT_TEMPLATE_LIMITS. */
  limits?: Partial<TemplateLimits>
}

/** A chat template and the variables to render it with (what applyChatTemplate renders). */
export interface ChatRender {
  source: string
  /** The file the template came from, named in errors. */
  file: string
  context: Record<string, unknown>
  limits: TemplateLimits
}

/**
 * What another thread needs to rebuild this tokenizer's encoder: the tokenizer.json and the
 * library config it was built from, and whether its regexes run under the time budget.
 */
export interface PortableTokenizer {
  tokenizerJson: Record<string, unknown>
  libConfig: Record<string, unknown>
  file: string
  timedEncode: boolean
}

export interface EncodeOptions {
  /** Add the tokenizer's post-processor specials (e.g. Llama 3's BOS). Default true, as transformers. */
  addSpecialTokens?: boolean
}

export interface DecodeOptions {
  skipSpecialTokens?: boolean
}

/** Incremental detokenizer: feed ids one at a time, get only newly completed text. */
export interface StreamDecoder {
  /** Add one token id; returns the text it completes ('' while a character is still partial). */
  push(id: number): string
  /** Return whatever is still held back (e.g. an incomplete byte sequence, as U+FFFD). */
  flush(): string
}

/** The parsed files a Tokenizer is built from (what fromFolder reads). */
export interface TokenizerSources {
  tokenizerJson: unknown
  tokenizerConfig?: unknown
  generationConfig?: unknown
  modelConfig?: unknown
  /** A chat template from chat_template.jinja / chat_template.json (replaces tokenizer_config's default). */
  chatTemplate?: string | null
  /** Paths named in errors. */
  files?: { tokenizerJson?: string; tokenizerConfig?: string; chatTemplate?: string }
}

type Json = Record<string, unknown>

function isObject(v: unknown): v is Json {
  return v !== null && typeof v === 'object' && !Array.isArray(v)
}

/** tokenizer_config.json writes special tokens as a string or as {content, …}. */
function tokenContent(v: unknown): string | null {
  if (typeof v === 'string') return v
  if (isObject(v) && typeof v.content === 'string') return v.content
  return null
}

function idList(v: unknown): number[] {
  if (typeof v === 'number' && Number.isSafeInteger(v) && v >= 0) return [v]
  if (Array.isArray(v)) return v.filter((x): x is number => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0)
  return []
}

/** A side file's text, or undefined when it does not exist (other failures: a ConfigError naming it). */
async function readTextIfPresent(path: string, maxBytes = MAX_JSON_FILE_BYTES): Promise<string | undefined> {
  let missing = false
  try {
    return (
      await readRegularFile(path, maxBytes, (problem, message, cause) => {
        missing = problem === 'not-found'
        return new ConfigError(path, null, message, { cause })
      })
    ).toString('utf8')
  } catch (e) {
    if (missing) return undefined
    throw e
  }
}

async function readJsonIfPresent(path: string): Promise<unknown | undefined> {
  const text = await readTextIfPresent(path)
  if (text === undefined) return undefined
  try {
    return JSON.parse(text)
  } catch (e) {
    throw new ConfigError(path, null, `${path}: not valid JSON (${(e as Error).message})`, { cause: e })
  }
}

const REPLACEMENT_CHAR = '\uFFFD'

/** How much a normalizer may shrink text (×), or null when it may delete text outright. */
function normalizerShrink(n: unknown): number | null {
  if (n === null || n === undefined) return 1
  if (!isObject(n)) return null
  // NFC/NFKC compose at most a few code points into one (Hangul L+V+T, a letter and two marks); 4 bounds them
  if (n.type === 'NFC' || n.type === 'NFKC' || n.type === 'NFD' || n.type === 'NFKD') return 4
  if (n.type === 'Lowercase' || n.type === 'Prepend') return 1
  if (n.type === 'Sequence' && Array.isArray(n.normalizers)) {
    let f = 1
    for (const c of n.normalizers) {
      const g = normalizerShrink(c)
      if (g === null) return null
      f *= g
    }
    return f
  }
  return null
}

/** Whether a pre-tokenizer keeps every character (no Whitespace split, no 'Removed' behavior). */
function keepsAllText(p: unknown): boolean {
  if (p === null || p === undefined) return true
  if (!isObject(p)) return false
  if (p.type === 'ByteLevel' || p.type === 'Metaspace' || p.type === 'Digits') return true
  if (p.type === 'Split' || p.type === 'Punctuation') return p.behavior !== 'Removed'
  if (p.type === 'Sequence' && Array.isArray(p.pretokenizers)) return p.pretokenizers.every(keepsAllText)
  return false
}

function hasByteLevel(p: unknown): boolean {
  if (!isObject(p)) return false
  if (p.type === 'ByteLevel') return true
  return p.type === 'Sequence' && Array.isArray(p.pretokenizers) && p.pretokenizers.some(hasByteLevel)
}

/**
 * What makes `ceil(chars / (longest · shrink))` a sound lower bound on a text's token count, or null
 * when this tokenizer gives none: every token covers at most `longest` characters of normalized text
 * (a byte-level token of k symbols covers k bytes, at most k characters), the normalizer shrinks
 * text at most `shrink`-fold, and no step drops characters (the pre-tokenizer keeps them all, and
 * bytes, byte fallback or an unknown token cover any character the vocabulary lacks).
 */
function tokenCountBound(tj: Json): { longest: number; shrink: number } | null {
  const shrink = normalizerShrink(tj.normalizer)
  const model = tj.model
  if (shrink === null || !keepsAllText(tj.pre_tokenizer) || !isObject(model)) return null
  const covered = hasByteLevel(tj.pre_tokenizer) || model.byte_fallback === true || (typeof model.unk_token === 'string' && model.unk_token !== '') || typeof model.unk_id === 'number'
  if (!covered) return null
  let longest = 0
  const vocab = model.vocab
  if (isObject(vocab)) for (const k of Object.keys(vocab)) longest = Math.max(longest, k.length)
  else if (Array.isArray(vocab)) for (const e of vocab) longest = Math.max(longest, typeof e === 'string' ? e.length : Array.isArray(e) && typeof e[0] === 'string' ? e[0].length : 0)
  if (Array.isArray(tj.added_tokens)) for (const t of tj.added_tokens) if (isObject(t) && typeof t.content === 'string') longest = Math.max(longest, t.content.length)
  return longest > 0 ? { longest, shrink } : null
}

/** A failed render as a typed error: a bound hit is a ResourceLimitError, anything else the conversation's fault. */
export function renderError(e: unknown, file: string): unknown {
  const limited = asResourceLimit(e, file)
  if (limited !== e) return limited
  return new InvalidArgumentError('messages', `${file}: the chat template rejected the conversation: ${(e as Error)?.message ?? String(e)}`, { cause: e })
}

export class Tokenizer {
  /** @internal The underlying @huggingface/tokenizers instance (not in the published types: its .d.ts do not compile under NodeNext). */
  readonly hf: HfTokenizer
  /** Size of the id space: highest token id (vocabulary or added token) + 1. */
  readonly vocabSize: number
  /** Ids of all added tokens marked special (e.g. <|im_start|>, <|endoftext|>). */
  readonly specialTokenIds: ReadonlySet<number>
  /** End-of-sequence ids from generation_config.json, config.json and tokenizer_config.json. */
  readonly eosTokenIds: readonly number[]
  readonly bosToken: string | null
  readonly eosToken: string | null
  readonly padToken: string | null
  readonly unkToken: string | null
  readonly bosTokenId: number | null
  readonly padTokenId: number | null

  private readonly tokenizerFile: string
  private readonly templateFile: string
  private readonly templates: Map<string, string>
  private readonly compiled = new Map<string, Template>()
  private readonly cleanUpSpaces: boolean
  private readonly tokenizerJson: Record<string, unknown>
  private readonly libConfig: Record<string, unknown>
  /** The normalizer or pre-tokenizer runs regexes of the file's own: encode under the time budget. */
  private readonly timedEncode: boolean
  /** The decoder does: decode under the time budget. */
  private readonly timedDecode: boolean

  constructor(src: TokenizerSources) {
    this.tokenizerFile = src.files?.tokenizerJson ?? 'tokenizer.json'
    const cfgFile = src.files?.tokenizerConfig ?? 'tokenizer_config.json'
    const tj = src.tokenizerJson
    if (!isObject(tj)) throw new TokenizerError(this.tokenizerFile, `${this.tokenizerFile}: not a JSON object`)
    const tc: Json = isObject(src.tokenizerConfig) ? src.tokenizerConfig : {}

    this.bosToken = tokenContent(tc.bos_token)
    this.eosToken = tokenContent(tc.eos_token)
    this.padToken = tokenContent(tc.pad_token)
    this.unkToken = tokenContent(tc.unk_token)
    // transformers ≥ 4.45 defaults clean_up_tokenization_spaces to false; @huggingface/tokenizers
    // defaults it to true, which breaks exact round trips. Be explicit.
    this.cleanUpSpaces = tc.clean_up_tokenization_spaces === true
    const libConfig: Json = { ...tc, clean_up_tokenization_spaces: this.cleanUpSpaces }
    for (const k of ['bos_token', 'eos_token', 'pad_token', 'unk_token']) {
      const c = tokenContent(tc[k])
      if (c === null) delete libConfig[k]
      else libConfig[k] = c
    }
    if (Array.isArray(tc.additional_special_tokens)) {
      libConfig.additional_special_tokens = tc.additional_special_tokens.map(tokenContent).filter((x) => x !== null)
    }

    const tjs: Json = { normalizer: null, pre_tokenizer: null, post_processor: null, decoder: null, added_tokens: [], ...tj }
    try {
      this.hf = kernel.withinTime(10_000, 'tokenizer-time', 'building the tokenizer', () => new HfTokenizer(tjs, libConfig))
    } catch (e) {
      const limited = asResourceLimit(e, this.tokenizerFile)
      if (limited !== e) throw limited
      throw new TokenizerError(this.tokenizerFile, `${this.tokenizerFile}: cannot load tokenizer: ${(e as Error).message}`, { cause: e })
    }
    this.tokenizerJson = tjs
    this.libConfig = libConfig
    this.timedEncode = sectionHasRegex(tjs.normalizer) || sectionHasRegex(tjs.pre_tokenizer)
    this.timedDecode = sectionHasRegex(tjs.decoder)

    let maxId = -1
    const model = tjs.model
    if (isObject(model)) {
      if (Array.isArray(model.vocab)) maxId = model.vocab.length - 1
      else if (isObject(model.vocab)) for (const v of Object.values(model.vocab)) if (typeof v === 'number' && v > maxId) maxId = v
    }
    const special = new Set<number>()
    if (Array.isArray(tjs.added_tokens)) {
      for (const t of tjs.added_tokens) {
        if (!isObject(t) || typeof t.id !== 'number') continue
        if (t.id > maxId) maxId = t.id
        if (t.special === true) special.add(t.id)
      }
    }
    this.vocabSize = maxId + 1
    this.specialTokenIds = special

    const idOf = (tok: string | null) => (tok === null ? null : this.tokenToId(tok))
    this.bosTokenId = idOf(this.bosToken)
    this.padTokenId = idOf(this.padToken)
    const eos: number[] = []
    const gen = isObject(src.generationConfig) ? src.generationConfig : {}
    const mc = isObject(src.modelConfig) ? src.modelConfig : {}
    eos.push(...idList(gen.eos_token_id), ...idList(mc.eos_token_id))
    const eosFromTc = idOf(this.eosToken)
    if (eosFromTc !== null) eos.push(eosFromTc)
    this.eosTokenIds = [...new Set(eos)]

    // Chat templates: tokenizer_config.chat_template (a string, or [{name, template}]); a
    // chat_template.jinja / chat_template.json file replaces the default one, as in transformers.
    this.templates = new Map()
    this.templateFile = cfgFile
    const ct = tc.chat_template
    if (typeof ct === 'string') this.templates.set('default', ct)
    else if (Array.isArray(ct)) {
      for (const e of ct) if (isObject(e) && typeof e.name === 'string' && typeof e.template === 'string') this.templates.set(e.name, e.template)
    }
    if (typeof src.chatTemplate === 'string') {
      this.templates.set('default', src.chatTemplate)
      this.templateFile = src.files?.chatTemplate ?? 'chat_template.jinja'
    }
  }

  /**
   * Load tokenizer.json (required), tokenizer_config.json, chat_template.jinja/.json,
   * generation_config.json and config.json (optional) from a model folder.
   */
  static async fromFolder(dir: string): Promise<Tokenizer> {
    const tokPath = join(dir, 'tokenizer.json')
    const text = (
      await readRegularFile(tokPath, MAX_TOKENIZER_FILE_BYTES, (problem, message, cause) =>
        new TokenizerError(
          tokPath,
          problem === 'not-found'
            ? `${tokPath}: not found; autodidact needs the model's tokenizer.json (a "fast" tokenizer). ` +
                'Save one with AutoTokenizer.from_pretrained(...).save_pretrained(dir).'
            : message,
          { cause },
        ),
      )
    ).toString('utf8')
    let tokenizerJson: unknown
    try {
      tokenizerJson = JSON.parse(text)
    } catch (e) {
      throw new TokenizerError(tokPath, `${tokPath}: not valid JSON (${(e as Error).message})`, { cause: e })
    }
    const cfgPath = join(dir, 'tokenizer_config.json')
    const [tokenizerConfig, generationConfig, modelConfig, ctJson] = await Promise.all([
      readJsonIfPresent(cfgPath),
      readJsonIfPresent(join(dir, 'generation_config.json')),
      readJsonIfPresent(join(dir, 'config.json')),
      readJsonIfPresent(join(dir, 'chat_template.json')),
    ])
    let chatTemplate: string | null = (await readTextIfPresent(join(dir, 'chat_template.jinja'))) ?? null
    let chatTemplateFile: string | undefined = chatTemplate === null ? undefined : join(dir, 'chat_template.jinja')
    if (chatTemplate === null) {
      if (isObject(ctJson) && typeof ctJson.chat_template === 'string') {
        chatTemplate = ctJson.chat_template
        chatTemplateFile = join(dir, 'chat_template.json')
      }
    }
    return new Tokenizer({
      tokenizerJson,
      tokenizerConfig,
      generationConfig,
      modelConfig,
      chatTemplate,
      files: { tokenizerJson: tokPath, tokenizerConfig: cfgPath, chatTemplate: chatTemplateFile },
    })
  }

  /** Text → ids. */
  encode(text: string, opts: EncodeOptions = {}): number[] {
    if (typeof text !== 'string') throw new InvalidArgumentError('text', 'encode() takes a string')
    try {
      return kernel.encode(this.hf, text, opts.addSpecialTokens ?? true, this.timedEncode)
    } catch (e) {
      throw this.encodeError(e)
    }
  }

  /** A kernel encode failure as a typed error naming tokenizer.json (a limit hit, a missing token, or the library failing on this file). */
  encodeError(e: unknown, what = 'encode'): unknown {
    const limited = asResourceLimit(e, this.tokenizerFile)
    if (limited !== e) return limited
    if ((e as { noToken?: boolean })?.noToken) return new TokenizerError(this.tokenizerFile, `${this.tokenizerFile}: ${(e as Error).message}`, { cause: e })
    return new TokenizerError(this.tokenizerFile, `${this.tokenizerFile}: cannot ${what} with this tokenizer: ${(e as Error)?.message ?? String(e)}`, { cause: e })
  }

  private tokenBound: { longest: number; shrink: number } | null | undefined

  /**
   * A lower bound on `encode(text).length` that tokenizes nothing (0 when this tokenizer admits no
   * sound bound; see tokenCountBound): a server checks a huge prompt against the context with it
   * before paying for its tokenization.
   */
  minTokens(text: string): number {
    if (this.tokenBound === undefined) this.tokenBound = tokenCountBound(this.tokenizerJson)
    const b = this.tokenBound
    return b === null ? 0 : Math.ceil(text.length / (b.longest * b.shrink))
  }

  /** The wall-clock budget of encoding `chars` characters (see PromptKernel.tokenizerBudgetMs). */
  budgetMs(chars: number): number {
    return kernel.tokenizerBudgetMs(chars)
  }

  /** What a worker thread needs to encode exactly as this tokenizer does. */
  portable(): PortableTokenizer {
    return { tokenizerJson: this.tokenizerJson, libConfig: this.libConfig, file: this.tokenizerFile, timedEncode: this.timedEncode }
  }

  /** Ids → text. Ids without a token (padding rows of the embedding) decode to nothing. */
  decode(ids: ArrayLike<number>, opts: DecodeOptions = {}): string {
    const list: number[] = []
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i]
      if (!Number.isInteger(id) || id < 0) throw new InvalidArgumentError('ids', `token id ${id} at ${i} is not a non-negative integer`)
      if (this.hf.id_to_token(id) !== undefined) list.push(id)
    }
    if (list.length === 0) return ''
    const run = () => this.hf.decode(list, { skip_special_tokens: opts.skipSpecialTokens ?? false, clean_up_tokenization_spaces: this.cleanUpSpaces })
    try {
      return this.timedDecode ? kernel.withinTime(kernel.tokenizerBudgetMs(list.length * 16), 'tokenizer-time', `decoding ${list.length} tokens`, run) : run()
    } catch (e) {
      throw this.encodeError(e, 'decode')
    }
  }

  tokenToId(token: string): number | null {
    return this.hf.token_to_id(token) ?? null
  }

  idToToken(id: number): string | null {
    return this.hf.id_to_token(id) ?? null
  }

  /** Whether the folder has a chat template (optionally, one of this name). */
  hasChatTemplate(name?: string): boolean {
    return name ? this.templates.has(name) : this.templates.size > 0
  }

  /** The chat template source that applyChatTemplate would use. */
  chatTemplate(opts: Pick<ChatTemplateOptions, 'templateName' | 'tools'> = {}): string {
    if (opts.templateName !== undefined) {
      const t = this.templates.get(opts.templateName)
      if (t === undefined) {
        throw new TokenizerError(
          this.templateFile,
          `${this.templateFile}: no chat template named "${opts.templateName}" (have: ${[...this.templates.keys()].join(', ') || 'none'})`,
        )
      }
      return t
    }
    if (opts.tools && opts.tools.length > 0 && this.templates.has('tool_use')) return this.templates.get('tool_use')!
    const t = this.templates.get('default') ?? (this.templates.size === 1 ? [...this.templates.values()][0] : undefined)
    if (t === undefined) {
      throw new TokenizerError(
        this.templateFile,
        this.templates.size === 0
          ? `${this.templateFile}: the model has no chat_template (not in tokenizer_config.json, chat_template.jinja or chat_template.json); ` +
              'pass `chatTemplate` or use plain encode()'
          : `${this.templateFile}: several chat templates (${[...this.templates.keys()].join(', ')}) and none named "default"; pass templateName`,
      )
    }
    return t
  }

  /** The template, variables and limits applyChatTemplate renders (nothing rendered yet). */
  chatRender(messages: readonly ChatMessage[], opts: ChatTemplateOptions = {}): ChatRender {
    if (!Array.isArray(messages) || !messages.every((m) => isObject(m) && typeof m.role === 'string')) {
      throw new InvalidArgumentError('messages', 'messages must be an array of {role: string, content} objects')
    }
    const source = opts.chatTemplate ?? this.chatTemplate(opts)
    const file = opts.chatTemplate !== undefined ? '<chatTemplate option>' : this.templateFile
    const context: Record<string, unknown> = {
      messages,
      add_generation_prompt: opts.addGenerationPrompt ?? false,
      tools: opts.tools ?? null,
    }
    if (opts.enableThinking !== undefined) context.enable_thinking = opts.enableThinking
    if (this.bosToken !== null) context.bos_token = this.bosToken
    if (this.eosToken !== null) context.eos_token = this.eosToken
    if (this.padToken !== null) context.pad_token = this.padToken
    if (this.unkToken !== null) context.unk_token = this.unkToken
    if (opts.extra) for (const [k, v] of Object.entries(opts.extra)) if (v !== undefined) context[k] = v
    return { source, file, context, limits: { ...DEFAULT_TEMPLATE_LIMITS, ...opts.limits } }
  }

  /** The parsed template (parsed once per source). @internal */
  compiledTemplate(source: string, file: string): Template {
    let tpl = this.compiled.get(source)
    if (!tpl) {
      try {
        tpl = kernel.withinTime(DEFAULT_TEMPLATE_LIMITS.timeMs, 'template-time', 'parsing the chat template', () => new Template(source))
      } catch (e) {
        const limited = asResourceLimit(e, file)
        if (limited !== e) throw limited
        throw new TokenizerError(file, `${file}: cannot parse the chat template: ${(e as Error).message}`, { cause: e })
      }
      this.compiled.set(source, tpl)
    }
    return tpl
  }

  /**
   * Render a conversation with the model's chat template (as transformers' apply_chat_template(tokenize=False)),
   * with bounded steps, sizes, range() and time (src/engine/hf/template.ts).
   */
  applyChatTemplate(messages: readonly ChatMessage[], opts: ChatTemplateOptions = {}): string {
    const job = this.chatRender(messages, opts)
    const tpl = this.compiledTemplate(job.source, job.file)
    try {
      return kernel.render(tpl, job.context, job.limits)
    } catch (e) {
      throw renderError(e, job.file)
    }
  }

  /** Render with the chat template and encode (the template supplies the special tokens itself). */
  encodeChat(messages: readonly ChatMessage[], opts: ChatTemplateOptions = {}): number[] {
    return this.encode(this.applyChatTemplate(messages, opts), { addSpecialTokens: false })
  }

  /**
   * An incremental detokenizer. Each push decodes a short window (the previously emitted piece
   * plus any held tokens) and emits only the text past the previous piece, holding it back while
   * it ends in U+FFFD (an incomplete UTF-8 sequence from byte-level or byte-fallback tokens).
   * The concatenation of all pushes and the flush equals decode() of all ids.
   */
  createStreamDecoder(opts: DecodeOptions = {}): StreamDecoder {
    const skip = opts.skipSpecialTokens ?? false
    let ids: number[] = []
    let prefix = 0
    let read = 0
    const dec = (a: number, b: number) => (b > a ? this.decode(ids.slice(a, b), { skipSpecialTokens: skip }) : '')
    return {
      push: (id: number): string => {
        if (!Number.isInteger(id) || id < 0) throw new InvalidArgumentError('id', `token id ${id} is not a non-negative integer`)
        ids.push(id)
        const prefixText = dec(prefix, read)
        const text = dec(prefix, ids.length)
        if (text.length > prefixText.length && !text.endsWith(REPLACEMENT_CHAR)) {
          const out = text.slice(prefixText.length)
          ids = ids.slice(read)
          prefix = 0
          read = ids.length
          return out
        }
        return ''
      },
      flush: (): string => {
        const prefixText = dec(prefix, read)
        const text = dec(prefix, ids.length)
        ids = []
        prefix = read = 0
        return text.length > prefixText.length ? text.slice(prefixText.length) : ''
      },
    }
  }
}
