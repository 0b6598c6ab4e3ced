// No import cycle under src/: every module's relative imports (type-only ones included, and
// dynamic import()) form a graph whose strongly connected components are single files. Any cycle
// fails, named file by file (the engine facade ↔ trainer ↔ stopping cycle was broken by issue 18).
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const ROOT = resolve('src')

function sourceFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name)
    return statSync(p).isDirectory() ? sourceFiles(p) : p.endsWith('.ts') && !p.endsWith('.d.ts') ? [p] : []
  })
}

/** The files a module imports: relative specifiers of import/export-from/import(), `.js` mapped to the `.ts` source. */
function importsOf(file: string, known: ReadonlySet<string>): string[] {
  const info = ts.preProcessFile(readFileSync(file, 'utf8'), true, true)
  return info.importedFiles
    .map((f) => f.fileName)
    .filter((spec) => spec.startsWith('.'))
    .map((spec) => resolve(dirname(file), spec).replace(/\.js$/, '.ts'))
    .flatMap((target) => (known.has(target) ? [target] : known.has(join(target, 'index.ts')) ? [join(target, 'index.ts')] : []))
}

/** Strongly connected components with more than one file, or a file importing itself (Tarjan). */
export function cyclesOf(graph: ReadonlyMap<string, readonly string[]>): string[][] {
  let counter = 0
  const index = new Map<string, number>()
  const low = new Map<string, number>()
  const stack: string[] = []
  const onStack = new Set<string>()
  const out: string[][] = []
  const visit = (v: string) => {
    index.set(v, counter)
    low.set(v, counter++)
    stack.push(v)
    onStack.add(v)
    for (const w of graph.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w)
        low.set(v, Math.min(low.get(v)!, low.get(w)!))
      } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!))
    }
    if (low.get(v) === index.get(v)) {
      const scc: string[] = []
      let w: string
      do {
        w = stack.pop()!
        onStack.delete(w)
        scc.push(w)
      } while (w !== v)
      if (scc.length > 1 || (graph.get(v) ?? []).includes(v)) out.push(scc.sort())
    }
  }
  for (const v of graph.keys()) if (!index.has(v)) visit(v)
  return out
}

describe('import cycles', () => {
  it('finds the cycles of a graph (and only those)', () => {
    const g = new Map([
      ['a', ['b']],
      ['b', ['c']],
      ['c', ['a', 'd']],
      ['d', []],
      ['e', ['e']],
      ['f', ['d']],
    ])
    expect(cyclesOf(g).map((c) => c.join(','))).toEqual(expect.arrayContaining(['a,b,c', 'e']))
    expect(cyclesOf(g)).toHaveLength(2)
    expect(cyclesOf(new Map([['x', ['y']], ['y', []]]))).toEqual([])
  })

  it('src/ has none', () => {
    const files = sourceFiles(ROOT)
    const known = new Set(files)
    const graph = new Map(files.map((f) => [f, importsOf(f, known)]))
    expect(graph.size).toBeGreaterThan(100)
    expect([...graph.values()].flat().length).toBeGreaterThan(300) // the parser found the imports
    const rel = (f: string) => relative(resolve('.'), f).split('\\').join('/')
    const cycles = cyclesOf(graph).map((c) => c.map(rel))
    expect(cycles).toEqual([])
  })
})
