// Confidence-prioritized replay (COSE §3.4, Eq. 6) on a sum tree; save/load for resume.
export { MinTree, SumTree } from './sumtree.js'
export {
  cosePriority,
  DEFAULT_REPLAY_CONFIG,
  oneMinusPPriority,
  PrioritizedReplay,
  priorityModes,
  type EvictionRule,
  type PriorityFn,
  type ReplayConfig,
  type ReplayEntry,
  type ReplaySnapshot,
} from './buffer.js'
