// Small hand-made tokenizer.json files for tests beyond the tiny byte-level BPE.

/**
 * A Llama-2 / SentencePiece-style BPE with byte fallback: `▁` word marks, `<0xXX>` byte tokens for
 * anything outside the small vocabulary, `<s>` added by the post-processor, and a decoder that
 * strips the leading space.
 */
export function byteFallbackTokenizerJson(): Record<string, unknown> {
  const vocab: Record<string, number> = { '<unk>': 0, '<s>': 1, '</s>': 2 }
  for (let b = 0; b < 256; b++) vocab[`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`] = 3 + b
  let next = 259
  for (const t of ['▁', ...'abcdefghijklmnopqrstuvwxyzH', '▁t', 'he', '▁w', 'or', 'ld', '▁wor', '▁world', '▁the']) vocab[t] = next++
  const merges = [
    ['▁', 't'],
    ['h', 'e'],
    ['▁', 'w'],
    ['o', 'r'],
    ['l', 'd'],
    ['▁w', 'or'],
    ['▁wor', 'ld'],
    ['▁t', 'he'],
  ]
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: ['<unk>', '<s>', '</s>'].map((content, id) => ({
      id,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special: true,
    })),
    normalizer: {
      type: 'Sequence',
      normalizers: [
        { type: 'Prepend', prepend: '▁' },
        { type: 'Replace', pattern: { String: ' ' }, content: '▁' },
      ],
    },
    pre_tokenizer: null,
    post_processor: {
      type: 'TemplateProcessing',
      single: [{ SpecialToken: { id: '<s>', type_id: 0 } }, { Sequence: { id: 'A', type_id: 0 } }],
      pair: [
        { SpecialToken: { id: '<s>', type_id: 0 } },
        { Sequence: { id: 'A', type_id: 0 } },
        { SpecialToken: { id: '<s>', type_id: 1 } },
        { Sequence: { id: 'B', type_id: 1 } },
      ],
      special_tokens: { '<s>': { id: '<s>', ids: [1], tokens: ['<s>'] } },
    },
    decoder: {
      type: 'Sequence',
      decoders: [
        { type: 'Replace', pattern: { String: '▁' }, content: ' ' },
        { type: 'ByteFallback' },
        { type: 'Fuse' },
        { type: 'Strip', content: ' ', start: 1, stop: 0 },
      ],
    },
    model: {
      type: 'BPE',
      dropout: null,
      unk_token: '<unk>',
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: true,
      byte_fallback: true,
      ignore_merges: false,
      vocab,
      merges,
    },
  }
}

export const BYTE_FALLBACK_TOKENIZER_CONFIG = { bos_token: '<s>', eos_token: '</s>', unk_token: '<unk>', clean_up_tokenization_spaces: false }
