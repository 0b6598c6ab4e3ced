// A name → implementation table, in the manner of verl's core_algos registries: every estimator,
// reward or signal is a small named function, and configs pick them by name.

export class Registry<T> {
  private readonly table = new Map<string, T>()

  constructor(readonly kind: string) {}

  /** Register `impl` under `name`; re-registering a name is an error unless `replace` is set. */
  register(name: string, impl: T, replace = false): T {
    if (!replace && this.table.has(name)) {
      throw new Error(`${this.kind} "${name}" is already registered`)
    }
    this.table.set(name, impl)
    return impl
  }

  /** The implementation registered as `name`; throws with the list of known names otherwise. */
  get(name: string): T {
    const impl = this.table.get(name)
    if (impl === undefined) {
      throw new Error(`unknown ${this.kind} "${name}"; known: ${[...this.table.keys()].join(', ')}`)
    }
    return impl
  }

  has(name: string): boolean {
    return this.table.has(name)
  }

  names(): string[] {
    return [...this.table.keys()]
  }
}
