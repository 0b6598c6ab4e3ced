// A small builder of ONNX graphs over onnx-proto's protobufjs types (ONNX 1.10 schema, IR 8):
// nodes with typed attributes, initializers (inline raw bytes or external data), and typed
// inputs/outputs with symbolic dimensions. Only what the causal-LM exporter needs.
import onnxProto from 'onnx-proto'

export const onnx = onnxProto.onnx
export type NodeProto = onnxProto.onnx.INodeProto
export type TensorProto = onnxProto.onnx.ITensorProto
export type ValueInfoProto = onnxProto.onnx.IValueInfoProto

/** ONNX TensorProto.DataType codes used here. */
export const DT = { FLOAT: 1, INT64: 7, BOOL: 9, FLOAT16: 10 } as const
export type DataTypeCode = (typeof DT)[keyof typeof DT]

/** An attribute value, tagged with its ONNX attribute type. */
export type AttrValue = { f: number } | { i: number } | { ints: number[] } | { floats: number[] } | { s: string }

/** A dimension: a fixed size or a symbolic name (e.g. 'batch_size'). */
export type Dim = number | string

function attribute(name: string, v: AttrValue): onnxProto.onnx.IAttributeProto {
  const T = onnx.AttributeProto.AttributeType
  if ('f' in v) return { name, type: T.FLOAT, f: v.f }
  if ('i' in v) return { name, type: T.INT, i: v.i }
  if ('ints' in v) return { name, type: T.INTS, ints: v.ints }
  if ('floats' in v) return { name, type: T.FLOATS, floats: v.floats }
  return { name, type: T.STRING, s: new TextEncoder().encode(v.s) }
}

export function valueInfo(name: string, elemType: DataTypeCode, dims: Dim[]): ValueInfoProto {
  return {
    name,
    type: { tensorType: { elemType, shape: { dim: dims.map((d) => (typeof d === 'number' ? { dimValue: d } : { dimParam: d })) } } },
  }
}

/** Bytes of a typed array, as a Uint8Array view (no copy). */
export function bytesOf(a: ArrayBufferView): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength)
}

export class GraphBuilder {
  readonly nodes: NodeProto[] = []
  readonly initializers: TensorProto[] = []
  private counter = 0
  private readonly constants = new Map<string, string>()

  /** A fresh value name with a readable prefix. */
  fresh(prefix: string): string {
    return `${prefix}_${this.counter++}`
  }

  /** Adds a node; returns its output names (`outputs` given, or `nOut` fresh ones). */
  op(opType: string, inputs: string[], attrs: Record<string, AttrValue> = {}, outputs: number | string[] = 1): string[] {
    const outs = typeof outputs === 'number' ? Array.from({ length: outputs }, () => this.fresh(opType.toLowerCase())) : outputs
    this.nodes.push({
      opType,
      name: `${opType}_${this.nodes.length}`,
      input: inputs,
      output: outs,
      attribute: Object.entries(attrs).map(([k, v]) => attribute(k, v)),
    })
    return outs
  }

  /** One-output node. */
  op1(opType: string, inputs: string[], attrs: Record<string, AttrValue> = {}, output?: string): string {
    return this.op(opType, inputs, attrs, output === undefined ? 1 : [output])[0]
  }

  /** An initializer with the given bytes (inline) or an external-data reference. */
  initializer(name: string, dataType: DataTypeCode, dims: number[], data: Uint8Array | { location: string; offset: number; length: number }): string {
    if (data instanceof Uint8Array) this.initializers.push({ name, dataType, dims, rawData: data })
    else
      this.initializers.push({
        name,
        dataType,
        dims,
        dataLocation: onnx.TensorProto.DataLocation.EXTERNAL,
        externalData: [
          { key: 'location', value: data.location },
          { key: 'offset', value: String(data.offset) },
          { key: 'length', value: String(data.length) },
        ],
      })
    return name
  }

  /** A small int64 constant initializer, shared by value. */
  int64(values: number[], dims: number[] = [values.length]): string {
    const key = `i64:${dims.join('x')}:${values.join(',')}`
    let name = this.constants.get(key)
    if (!name) {
      name = this.fresh('const_i64')
      this.initializer(name, DT.INT64, dims, bytesOf(BigInt64Array.from(values, (v) => BigInt(v))))
      this.constants.set(key, name)
    }
    return name
  }

  /** A small float32 constant initializer, shared by value. */
  float(values: number[], dims: number[] = [values.length]): string {
    const key = `f32:${dims.join('x')}:${values.join(',')}`
    let name = this.constants.get(key)
    if (!name) {
      name = this.fresh('const_f32')
      this.initializer(name, DT.FLOAT, dims, bytesOf(Float32Array.from(values)))
      this.constants.set(key, name)
    }
    return name
  }

  /** The serialized ModelProto. */
  encode(o: { name: string; inputs: ValueInfoProto[]; outputs: ValueInfoProto[]; opset: number; producer: string; metadata?: Record<string, string> }): Uint8Array {
    const model: onnxProto.onnx.IModelProto = {
      irVersion: 8,
      producerName: o.producer,
      opsetImport: [{ domain: '', version: o.opset }],
      metadataProps: Object.entries(o.metadata ?? {}).map(([key, value]) => ({ key, value })),
      graph: { name: o.name, node: this.nodes, initializer: this.initializers, input: o.inputs, output: o.outputs },
    }
    return onnx.ModelProto.encode(model).finish()
  }
}
