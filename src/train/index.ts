// Training: the trainer over a loaded model, its objectives (loss and per-token gradient
// coefficients) and learning-rate schedules.
export * from './objectives.js'
export { LORA_TARGETS, Trainer } from './trainer.js'
export type { LoraOptions, OptimizerOptions, StepMetrics, TrainBatch, TrainerOptions, TrainSequence } from './trainer.js'
export { createSchedule } from './schedule.js'
export type { Schedule, ScheduleOptions } from './schedule.js'
