// Chat templates and tokenizer regexes under bounds. A chat template is a program that came with the
// model folder, and a tokenizer.json may carry any pre-tokenizer regex: either can loop for ever,
// build a string or list too large for the heap, or backtrack exponentially. transformers renders
// templates in Jinja's ImmutableSandboxedEnvironment (range() capped at jinja2.sandbox.MAX_RANGE =
// 100,000) and HF tokenizers' Oniguruma regexes have a retry limit. Here:
//   - templates run on @huggingface/jinja's own parser and interpreter, with every evaluation step
//     counted (expressions, statements, loop iterations), range() capped as in Jinja's sandbox, every
//     string, list and mapping built checked against a size cap, and integer arguments to functions
//     and filters capped the same way (`indent(10**9)` would allocate before anything else sees it);
//   - renders and tokenizer calls that run user regexes run under a wall-clock budget (V8 interrupts
//     even a backtracking regex: node:vm's `timeout`).
// `promptKernel` is self-contained (it uses only its arguments and globals) so that the serve
// worker can run the very same code from its source text (see src/serve/prompt-worker.ts).

import * as jinjaModule from '@huggingface/jinja'
import * as vmModule from 'node:vm'

import { ResourceLimitError, type ResourceLimit } from '../errors.js'

export interface TemplateLimits {
  /** Evaluation steps (expressions, statements, loop iterations) of one render. */
  maxSteps: number
  /** Longest string a render may build (its output included), in characters; also the largest integer argument. */
  maxOutputChars: number
  /** Most items of a list or mapping a render may build. */
  maxItems: number
  /** Longest range(); Jinja's sandbox allows 100,000 (jinja2.sandbox.MAX_RANGE). */
  maxRange: number
  /** Wall-clock budget of one render, in ms. */
  timeMs: number
}

/**
 * Defaults: a million steps (the Qwen3 template takes about 54 a message: 18,000 messages), 8 Mi
 * characters, a million list items, Jinja's range cap, and 1 s (the Qwen3 template renders 2,000
 * messages in ~0.1 s).
 */
export const DEFAULT_TEMPLATE_LIMITS: TemplateLimits = { maxSteps: 1_000_000, maxOutputChars: 8 << 20, maxItems: 1_000_000, maxRange: 100_000, timeMs: 1_000 }

/** A limit the kernel hit; callers turn it into a ResourceLimitError (it crosses threads as plain data). */
export interface LimitHit {
  limit: ResourceLimit
  message: string
}

/** What the kernel uses of @huggingface/jinja (structural, so that its types stay out of our declarations). */
interface Jinja {
  Interpreter: unknown
  Environment: new () => { set(name: string, value: unknown): unknown }
  Template: new (source: string) => { render(items: Record<string, unknown>): string }
}
type Vm = typeof vmModule

/** What the kernel needs of an @huggingface/tokenizers Tokenizer. */
export interface HfEncoder {
  encode(text: string, options: { add_special_tokens: boolean }): { ids: unknown[] }
}

/** The kernel's operations; a limit error carries `limitHit` ({limit, message}), a missing token `noToken: true`. */
export interface PromptKernel {
  /** Renders a parsed template with `context` under `limits`. */
  render(template: { parsed: unknown }, context: Record<string, unknown>, limits: TemplateLimits): string
  /** Text → ids; under the tokenizer's time budget when `timed` (the tokenizer runs regexes of its own). */
  encode(hf: HfEncoder, text: string, addSpecialTokens: boolean, timed: boolean): number[]
  /** Runs `fn` (synchronous) and interrupts it after `ms`. */
  withinTime<T>(ms: number, limit: ResourceLimit, what: string, fn: () => T): T
  /**
   * The wall-clock budget of one tokenizer call over `chars` characters: 250 ms plus 20 µs a
   * character (legitimate pre-tokenizer regexes run in linear time, about 1 µs a character: 20×
   * headroom; an exponential one over 26 characters is stopped after 250 ms, not after seconds).
   */
  tokenizerBudgetMs(chars: number): number
}

/**
 * Builds the bounded renderer and the time budget over the given modules. Self-contained: nothing
 * outside its parameters is referenced, so `promptKernel.toString()` runs unchanged in a worker.
 */
export function promptKernel(jinja: Jinja, vm: Vm): PromptKernel {
  const limitError = (limit: ResourceLimit, message: string): Error => Object.assign(new Error(message), { limitHit: { limit, message } })

  const context = vm.createContext({})
  const script = new vm.Script('__run()')
  function withinTime<T>(ms: number, limit: ResourceLimit, what: string, fn: () => T): T {
    let result: T | undefined
    ;(context as Record<string, unknown>).__run = () => {
      result = fn()
    }
    try {
      script.runInContext(context, { timeout: Math.max(1, Math.ceil(ms)) })
    } catch (e) {
      if ((e as { code?: string })?.code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') throw limitError(limit, `${what} took longer than its budget of ${Math.ceil(ms)} ms: stopped`)
      throw e
    } finally {
      ;(context as Record<string, unknown>).__run = undefined
    }
    return result as T
  }

  // The interpreter's evaluate* methods are private in its typings; this is the part we override.
  interface Value {
    type: string
    value: unknown
  }
  interface Open {
    evaluate(node: unknown, env: unknown): Value
    evaluateBlock(nodes: unknown, env: unknown): Value
    evaluateArguments(args: unknown, env: unknown): [Value[], Map<string, Value>]
    evaluateCallExpression(expr: unknown, env: unknown): Value
    run(program: unknown): Value
  }
  const Base = jinja.Interpreter as unknown as new (env: unknown) => Open

  // Fields are declared and assigned in the constructor (no class-field initializers), so that no
  // compiler helper outside this function is needed when its source runs elsewhere.
  class BoundedInterpreter extends Base {
    declare steps: number
    declare limits: TemplateLimits
    /** Set while a range() call evaluates its own arguments: range checks its length itself. */
    declare rangeArguments: boolean

    constructor(env: unknown, limits: TemplateLimits) {
      super(env)
      this.steps = 0
      this.limits = limits
      this.rangeArguments = false
    }

    charge(n = 1): void {
      this.steps += n
      if (this.steps > this.limits.maxSteps) throw limitError('template-steps', `the chat template ran more than ${this.limits.maxSteps} evaluation steps: stopped`)
    }

    checkSize(v: Value): Value {
      if (typeof v.value === 'string') {
        if (v.value.length > this.limits.maxOutputChars)
          throw limitError('template-output', `the chat template built a string of ${v.value.length} characters; at most ${this.limits.maxOutputChars}: stopped`)
        return v
      }
      const items = Array.isArray(v.value) ? v.value.length : v.value instanceof Map ? v.value.size : 0
      if (items > this.limits.maxItems) throw limitError('template-output', `the chat template built a ${v.type} of ${items} items; at most ${this.limits.maxItems}: stopped`)
      return v
    }

    override evaluate(node: unknown, env: unknown): Value {
      this.charge()
      return this.checkSize(super.evaluate(node, env))
    }

    // called once per loop iteration too, so an empty loop body still costs a step
    override evaluateBlock(nodes: unknown, env: unknown): Value {
      this.charge()
      return this.checkSize(super.evaluateBlock(nodes, env))
    }

    override evaluateCallExpression(expr: unknown, env: unknown): Value {
      const callee = (expr as { callee?: { type?: string; value?: unknown } }).callee
      this.rangeArguments = callee?.type === 'Identifier' && callee.value === 'range'
      return super.evaluateCallExpression(expr, env)
    }

    override evaluateArguments(args: unknown, env: unknown): [Value[], Map<string, Value>] {
      const exempt = this.rangeArguments
      this.rangeArguments = false // only the immediate call's arguments; calls inside them are checked
      const out = super.evaluateArguments(args, env)
      if (exempt) return out
      for (const v of [...out[0], ...out[1].values()])
        if (typeof v.value === 'number' && Math.abs(v.value) > this.limits.maxOutputChars && v.type === 'IntegerValue')
          throw limitError('template-output', `the chat template passes ${v.value} to a function or filter; integers there may be at most ${this.limits.maxOutputChars}: stopped`)
      return out
    }
  }

  /** range() as Jinja's sandbox has it: at most maxRange items, each one charged as a step. */
  function boundedRange(interpreter: BoundedInterpreter, limits: TemplateLimits) {
    return (start: number, stop?: number, step = 1): number[] => {
      if (stop === undefined) {
        stop = start
        start = 0
      }
      if (step === 0) throw new Error('range() step must not be zero')
      const count = Math.max(0, Math.ceil((stop - start) / step))
      if (!(count <= limits.maxRange)) throw limitError('template-range', `the chat template asks for range() of ${count} items; at most ${limits.maxRange} (as Jinja's sandbox): stopped`)
      interpreter.charge(count)
      const out: number[] = []
      for (let i = 0; i < count; i++) out.push(start + i * step)
      return out
    }
  }

  function render(template: { parsed: unknown }, items: Record<string, unknown>, limits: TemplateLimits): string {
    const env = new jinja.Environment()
    const interpreter = new BoundedInterpreter(env, limits)
    // the globals Template.render sets up (setupGlobals), range() bounded; strftime_now is the library's own
    for (const [k, v] of [['false', false], ['true', true], ['none', null], ['False', false], ['True', true], ['None', null]] as const) env.set(k, v)
    env.set('raise_exception', (message: unknown) => {
      throw new Error(String(message))
    })
    env.set('strftime_now', (format: unknown) => new jinja.Template('{{ strftime_now(f) }}').render({ f: format }))
    env.set('range', boundedRange(interpreter, limits))
    for (const [k, v] of Object.entries(items)) env.set(k, v)
    return withinTime(limits.timeMs, 'template-time', 'rendering the chat template', () => String(interpreter.run(template.parsed).value))
  }

  const tokenizerBudgetMs = (chars: number): number => 250 + chars * 0.02

  function encode(hf: HfEncoder, text: string, addSpecialTokens: boolean, timed: boolean): number[] {
    const run = () => hf.encode(text, { add_special_tokens: addSpecialTokens }).ids
    const ids = timed ? withinTime(tokenizerBudgetMs(text.length), 'tokenizer-time', `tokenizing ${text.length} characters`, run) : run()
    for (const id of ids)
      if (typeof id !== 'number') throw Object.assign(new Error('a piece of the text has no token and the tokenizer has no unk_token'), { noToken: true })
    return ids as number[]
  }

  return { render, encode, withinTime, tokenizerBudgetMs }
}

/** The kernel of this thread. */
export const kernel: PromptKernel = promptKernel(jinjaModule, vmModule)

/** The limit a kernel error reports, or null for any other error. */
export function limitHitOf(e: unknown): LimitHit | null {
  const hit = (e as { limitHit?: LimitHit } | null)?.limitHit
  return hit && typeof hit.message === 'string' ? hit : null
}

/** A kernel limit error as the typed ResourceLimitError naming `file`; other errors unchanged. */
export function asResourceLimit(e: unknown, file: string | null): unknown {
  const hit = limitHitOf(e)
  return hit ? new ResourceLimitError(hit.limit, file, file ? `${file}: ${hit.message}` : hit.message, { cause: e }) : e
}

/**
 * Whether a section of tokenizer.json (normalizer, pre_tokenizer, decoder) runs a regex it brings
 * itself (a Split / Replace pattern {"Regex": …}); the library's own built-in patterns are linear.
 */
export function sectionHasRegex(section: unknown): boolean {
  const seen = (v: unknown, depth: number): boolean => {
    if (depth > 64 || v === null || typeof v !== 'object') return false
    if (Array.isArray(v)) return v.some((x) => seen(x, depth + 1))
    const o = v as Record<string, unknown>
    const p = o.pattern as Record<string, unknown> | undefined
    if (p && typeof p === 'object' && 'Regex' in p) return true
    return Object.values(o).some((x) => seen(x, depth + 1))
  }
  return seen(section, 0)
}
