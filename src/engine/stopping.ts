// The stopping rules of generation, shared by every decoder (the engine, ONNX members): a stop
// id ends a sequence without text; a stop string cuts the text before it; maxTokens ends it.
/** Why a sequence ended: a stop id or string, maxTokens, or an abort signal. */
export type FinishReason = 'stop' | 'length' | 'abort'

/** The text state of one decoding sequence. */
export interface DecodingText {
  text: string
  decoder: { push(id: number): string; flush(): string }
  finish: FinishReason | null
  /** The text was cut at a stop string: bytes held back after it are dropped. */
  cutAtStopString: boolean
}

export interface StopRules {
  maxTokens: number
  stops: string[]
  stopIds: Set<number>
}

/** Appends one sampled token's text (the sequence's `generated` tokens include it) and decides whether it is finished. */
export function advanceText(s: DecodingText, token: number, generated: number, o: StopRules): void {
  if (o.stopIds.has(token)) {
    s.finish = 'stop'
    return
  }
  const before = s.text.length
  s.text += s.decoder.push(token)
  if (o.stops.length) {
    // Only the new text (plus the longest stop's overlap) can complete a stop string.
    const from = Math.max(0, before - Math.max(...o.stops.map((x) => x.length)) + 1)
    let cut = -1
    for (const stop of o.stops) {
      const at = s.text.indexOf(stop, from)
      if (at >= 0 && (cut < 0 || at < cut)) cut = at
    }
    if (cut >= 0) {
      s.text = s.text.slice(0, cut)
      s.finish = 'stop'
      s.cutAtStopString = true
      return
    }
  }
  if (generated >= o.maxTokens) s.finish = 'length'
}
