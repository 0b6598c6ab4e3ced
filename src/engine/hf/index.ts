// Hugging Face model folders: config.json, safetensors (single and sharded), and the folder reader.
export * from './adapter.js'
export * from './config.js'
export * from './folder.js'
export * from './safetensors.js'
