// The tokenizer of a Hugging Face model folder: tokenizer.json through @huggingface/tokenizers,
// the chat template (tokenizer_config.json, chat_template.jinja or chat_template.json) through
// @huggingface/jinja, end-of-sequence ids merged from every file that declares them, and an
// incremental detokenizer for streaming that never emits half a UTF-8 character.

import { readFile } from 'node:fs/promises'
import { join } from 'node:path'

import { Template } from '@huggingface/jinja'
import { Tokenizer as HfTokenizer } from '@huggingface/tokenizers'

import { ConfigError, InvalidArgumentError, TokenizerError } from './errors.js'

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

async function readJsonIfPresent(path: string): Promise<unknown | undefined> {
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return undefined
    throw new ConfigError(path, null, `${path}: cannot read: ${(e as Error).message}`, { cause: e })
  }
  try {
    return JSON.parse(text)
  } catch (e) {
    throw new ConfigError(path, null, `${path}: not valid JSON (${(e as Error).message})`, { cause: e })
  }
}

const REPLACEMENT_CHAR = '\uFFFD'

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
      this.hf = new HfTokenizer(tjs, libConfig)
    } catch (e) {
      throw new TokenizerError(this.tokenizerFile, `${this.tokenizerFile}: cannot load tokenizer: ${(e as Error).message}`, { cause: e })
    }

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
    let text: string
    try {
      text = await readFile(tokPath, 'utf8')
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code
      throw new TokenizerError(
        tokPath,
        code === 'ENOENT'
          ? `${tokPath}: not found; autodidact needs the model's tokenizer.json (a "fast" tokenizer). ` +
              'Save one with AutoTokenizer.from_pretrained(...).save_pretrained(dir).'
          : `${tokPath}: cannot read: ${(e as Error).message}`,
        { cause: e },
      )
    }
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
    let chatTemplate: string | null = null
    let chatTemplateFile: string | undefined
    try {
      chatTemplate = await readFile(join(dir, 'chat_template.jinja'), 'utf8')
      chatTemplateFile = join(dir, 'chat_template.jinja')
    } catch {
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
    const { ids } = this.hf.encode(text, { add_special_tokens: opts.addSpecialTokens ?? true })
    for (const id of ids) {
      if (typeof id !== 'number') {
        throw new TokenizerError(this.tokenizerFile, `${this.tokenizerFile}: a piece of the text has no token and the tokenizer has no unk_token`)
      }
    }
    return ids
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
    return this.hf.decode(list, {
      skip_special_tokens: opts.skipSpecialTokens ?? false,
      clean_up_tokenization_spaces: this.cleanUpSpaces,
    })
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

  /** Render a conversation with the model's chat template (as transformers' apply_chat_template(tokenize=False)). */
  applyChatTemplate(messages: readonly ChatMessage[], opts: ChatTemplateOptions = {}): string {
    if (!Array.isArray(messages) || !messages.every((m) => isObject(m) && typeof m.role === 'string')) {
      throw new InvalidArgumentError('messages', 'messages must be an array of {role: string, content} objects')
    }
    const source = opts.chatTemplate ?? this.chatTemplate(opts)
    const file = opts.chatTemplate !== undefined ? '<chatTemplate option>' : this.templateFile
    let tpl = this.compiled.get(source)
    if (!tpl) {
      try {
        tpl = new Template(source)
      } catch (e) {
        throw new TokenizerError(file, `${file}: cannot parse the chat template: ${(e as Error).message}`, { cause: e })
      }
      this.compiled.set(source, tpl)
    }
    const ctx: Record<string, unknown> = {
      messages,
      add_generation_prompt: opts.addGenerationPrompt ?? false,
      tools: opts.tools ?? null,
    }
    if (opts.enableThinking !== undefined) ctx.enable_thinking = opts.enableThinking
    if (this.bosToken !== null) ctx.bos_token = this.bosToken
    if (this.eosToken !== null) ctx.eos_token = this.eosToken
    if (this.padToken !== null) ctx.pad_token = this.padToken
    if (this.unkToken !== null) ctx.unk_token = this.unkToken
    if (opts.extra) for (const [k, v] of Object.entries(opts.extra)) if (v !== undefined) ctx[k] = v
    try {
      return tpl.render(ctx)
    } catch (e) {
      throw new InvalidArgumentError('messages', `${file}: the chat template rejected the conversation: ${(e as Error).message}`, {
        cause: e,
      })
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
