// The run report (a self-contained HTML page from a run's data) and the explanations of every
// signal the methods print.
export { accuracyChange, accuracyTrajectory, formatDuration, metricAt, renderRunReport, shellQuote, TRAINING_SERIES } from './run-report.js'
export type { AccuracyAt, BaseAccuracy, EvaluationDetail, EvaluationProtocol, MetricsRow, ReportSeries, RunReportInput } from './run-report.js'
export { explainSignals, formatSignalHelp, METHOD_SIGNALS, METRICS } from './signals.js'
export type { MetricInfo, SignalExplanation } from './signals.js'
export { formatTicks, lineChart, niceTicks } from './svg.js'
export type { ChartSpec, Point, ReferenceLine } from './svg.js'
