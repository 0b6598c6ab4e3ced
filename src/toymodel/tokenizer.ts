// The bundled toy model's tokenizer: one token per character of the arithmetic world (every
// printable ASCII character, newline and tab), whole tokens for the role tags, ChatML specials,
// and 256 byte-fallback tokens so that no character is ever dropped (anything outside ASCII is
// spelled as its UTF-8 bytes `<0xNN>` and decodes back exactly). Written as a Hugging Face
// tokenizer.json (a BPE model without merges, byte_fallback on, no pre-tokenizer: a text is cut
// at the added tokens, then into characters) that @huggingface/tokenizers loads, and a
// tokenizer_config.json with a ChatML chat template whose eos is `<|im_end|>`.
//
// Id layout (stable: changing it invalidates the bundled weights):
//   0..2     <|endoftext|> <|im_start|> <|im_end|>            (added, special)
//   3..11    <question> </question> <think> </think> <answer> </answer> <score> </score> \boxed{
//                                                              (added, not special: they decode)
//   12..108  '\t' '\n' then ' ' .. '~' (0x20..0x7e)            (characters)
//   109..364 <0x00> .. <0xFF>                                  (byte fallback)
// = 365 ids; the model's vocab_size pads this to a multiple of 8 (368).

export const SPECIAL_TOKENS = ['<|endoftext|>', '<|im_start|>', '<|im_end|>'] as const
export const TAG_TOKENS = ['<question>', '</question>', '<think>', '</think>', '<answer>', '</answer>', '<score>', '</score>', '\\boxed{'] as const

/** The character tokens: tab, newline, then printable ASCII. */
export const CHAR_TOKENS: readonly string[] = ['\t', '\n', ...Array.from({ length: 0x7f - 0x20 }, (_, i) => String.fromCharCode(0x20 + i))]

export const BYTE_TOKENS: readonly string[] = Array.from({ length: 256 }, (_, b) => `<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`)

/** Number of token ids the tokenizer defines. */
export const TOY_TOKENIZER_SIZE = SPECIAL_TOKENS.length + TAG_TOKENS.length + CHAR_TOKENS.length + BYTE_TOKENS.length

/** The config's vocab_size: the tokenizer's size rounded up to a multiple of 8 (padding rows are never produced by encode). */
export const TOY_VOCAB_SIZE = Math.ceil(TOY_TOKENIZER_SIZE / 8) * 8

export const TOY_IDS = { endoftext: 0, imStart: 1, imEnd: 2 } as const

/** ChatML, as Qwen's templates render it (no default system prompt, no thinking switch). */
export const TOY_CHAT_TEMPLATE = [
  '{%- for message in messages %}',
  "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}",
  '{%- endfor %}',
  '{%- if add_generation_prompt %}',
  "{{- '<|im_start|>assistant\\n' }}",
  '{%- endif %}',
].join('\n')

export interface ToyTokenizerFiles {
  tokenizerJson: Record<string, unknown>
  tokenizerConfig: Record<string, unknown>
  /** token → id for every token. */
  vocab: Record<string, number>
}

export function toyTokenizerFiles(): ToyTokenizerFiles {
  const vocab: Record<string, number> = {}
  const order = [...SPECIAL_TOKENS, ...TAG_TOKENS, ...CHAR_TOKENS, ...BYTE_TOKENS]
  order.forEach((tok, id) => {
    if (tok in vocab) throw new Error(`toy tokenizer: duplicate token ${JSON.stringify(tok)}`)
    vocab[tok] = id
  })
  const addedEntry = (content: string, special: boolean) => ({ id: vocab[content], content, single_word: false, lstrip: false, rstrip: false, normalized: false, special })
  const added = [...SPECIAL_TOKENS.map((t) => addedEntry(t, true)), ...TAG_TOKENS.map((t) => addedEntry(t, false))]
  const tokenizerJson = {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: null,
    post_processor: null,
    decoder: { type: 'Sequence', decoders: [{ type: 'ByteFallback' }, { type: 'Fuse' }] },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: null,
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: true,
      ignore_merges: false,
      vocab,
      merges: [],
    },
  }
  const addedDecoder: Record<string, unknown> = {}
  for (const a of added) {
    const { id, ...rest } = a
    addedDecoder[String(id)] = rest
  }
  const tokenizerConfig = {
    add_bos_token: false,
    add_eos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: addedDecoder,
    additional_special_tokens: ['<|im_start|>', '<|im_end|>'],
    bos_token: null,
    chat_template: TOY_CHAT_TEMPLATE,
    clean_up_tokenization_spaces: false,
    eos_token: '<|im_end|>',
    errors: 'replace',
    model_max_length: 1024,
    pad_token: '<|endoftext|>',
    split_special_tokens: false,
    tokenizer_class: 'PreTrainedTokenizerFast',
    unk_token: null,
  }
  return { tokenizerJson, tokenizerConfig, vocab }
}
