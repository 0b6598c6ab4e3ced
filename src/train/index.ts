// Training: objectives (loss and per-token gradient coefficients) for the native trainer.
export * from './objectives.js'
