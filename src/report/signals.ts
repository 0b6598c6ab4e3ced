// One-line explanations of what the methods print and chart: the abbreviations on each
// method's progress line (its spec's describe()) and the metrics its report draws, with the
// paper equation each comes from. `evolve --help` lists the first, the run report both.

export interface SignalExplanation {
  /** As printed on the progress line, e.g. "r_S". */
  name: string
  meaning: string
}

const COMMON: SignalExplanation[] = [
  { name: 'tok/s', meaning: 'tokens generated per second of the step (sampling only; training steps add no tokens)' },
  { name: 'ETA', meaning: 'time left at the mean pace of the steps run so far' },
]

/** The abbreviations on each method's progress line, in the order printed. */
export const METHOD_SIGNALS: Readonly<Record<string, readonly SignalExplanation[]>> = {
  cose: [
    { name: 'r_S', meaning: 'Solver reward, mean over answers: format × Judge correctness, r_S = f_S(a)·p(q, a) (COSE Eq. 7)' },
    { name: 'r_P', meaning: 'Proposer reward, mean over questions: f_P(q)·(v(q) + 4p(1 − p))/2, Validator quality plus learnability (COSE Eq. 8)' },
    { name: 'accept', meaning: 'share of proposed questions the Validator accepted into the replay buffer' },
  ],
  ttrl: [
    { name: 'agree', meaning: "share of responses that agree with their group's majority-vote pseudo-label" },
    { name: 'label', meaning: 'pseudo-label accuracy against the reference answers (a diagnostic: never a reward)' },
    { name: 'R', meaning: 'reward per response, R = 2g − 1 + λb: agreement g with the pseudo-label plus the gated auxiliary term b (UID Eq. 5)' },
  ],
  rzero: [
    { name: 'C', meaning: 'a Challenger step (it writes questions); the fields after it are its batch means' },
    { name: 'S', meaning: 'a Solver step (it answers the kept questions); the fields after it describe its batch' },
    { name: 'r', meaning: 'reward, batch mean. Challenger: α·r_unc + β·r_dis − r_rep, −1 when unparsed (DIS §3, §4.3); Solver: 1 when it agrees with the pseudo-label' },
    { name: 'dis', meaning: 'r_dis, disagreement among the solver variants on a question (DIS §4.2)' },
    { name: 'unc', meaning: 'r_unc, uncertainty reward of the pooled solve rate p̂, highest at p̂ = ½ (DIS §3)' },
    { name: 'rep', meaning: 'r_rep, repetition penalty of questions in the same BLEU cluster (R-Zero)' },
    { name: 'parse', meaning: 'share of Challenger outputs that parse as a question' },
    { name: 'kept', meaning: 'kept/distinct: distinct questions whose pooled p̂ falls in the informative band, of all distinct ones' },
    { name: 'label-acc', meaning: 'pseudo-label accuracy against the verifier (a diagnostic: never a reward)' },
  ],
  jzero: [
    { name: 'r_C', meaning: 'Challenger reward r^C, mean over tasks (J-Zero Eq. 6)' },
    { name: 'r_S', meaning: 'Solver reward σ(J), the Judge\'s score of each response through a sigmoid, mean (J-Zero Eq. 9)' },
    { name: 'judge', meaning: 'Judge pairwise accuracy on the held-out, verifier-ordered pairs after this step' },
  ],
  dpo: [
    { name: 'loss', meaning: 'DPO loss −log σ(β·margin), mean over the step\'s preference pairs' },
    { name: 'arm', meaning: 'the score that picks max-vs-min pairs of correct responses: sc, uid-conj or uid-mix; random is the control' },
    { name: 'pairs', meaning: 'preference pairs in the arm\'s data set' },
  ],
  wsft: [
    { name: 'loss', meaning: 'weighted SFT loss: token NLL weighted by w = m·softmax(2q), mean over the step' },
    { name: 'arm', meaning: 'the score q behind the weights: sc, uid-conj or uid-mix; uniform (every weight equal) is the control' },
    { name: 'examples', meaning: 'verified responses in the arm\'s data set' },
  ],
  grpo: [
    { name: 'reward', meaning: "verifier reward, mean over responses: 1 when the world's verifier marks the answer right (ground truth, not self-generated feedback)" },
    { name: 'informative', meaning: 'informative/questions: groups whose rewards differ (a nonzero GRPO advantage), of all questions sampled' },
  ],
}

/** What the driver adds to every progress line besides COMMON's fields. */
const DRIVER_FIELDS: SignalExplanation[] = [
  { name: 'held-out', meaning: 'held-out accuracy after this step, on evaluated steps (the method\'s own protocol; the report gives n and the 95% interval)' },
  { name: 's/step', meaning: 'seconds the step took, shown instead of tok/s when the step generated no tokens (dpo, wsft: training only)' },
  { name: '⚠ collapse', meaning: 'the collapse guard: over the last evaluations held-out accuracy fell while the training reward rose, both by more than 1.96 standard errors' },
]

/** The explanations of one method's progress line (and the common fields); every method's without a name. */
export function explainSignals(method?: string): SignalExplanation[] {
  if (method === undefined) return [...Object.values(METHOD_SIGNALS).flat(), ...COMMON, ...DRIVER_FIELDS]
  return [...(METHOD_SIGNALS[method] ?? []), ...COMMON, ...DRIVER_FIELDS]
}

/** The same as indented "name  meaning" lines for `--help`. */
export function formatSignalHelp(method?: string): string {
  const rows = method === undefined ? Object.entries(METHOD_SIGNALS) : [[method, METHOD_SIGNALS[method] ?? []] as const]
  const width = Math.max(...explainSignals(method).map((s) => s.name.length))
  const line = (s: SignalExplanation) => `    ${s.name.padEnd(width)}  ${s.meaning}`
  return [...rows.map(([name, signals]) => [`  ${name}:`, ...signals.map(line)].join('\n')), ['  every method:', ...[...COMMON, ...DRIVER_FIELDS].map(line)].join('\n')].join('\n')
}

export interface MetricInfo {
  /** One line: what the number is, with its paper equation. */
  explain: string
  /** The y axis title, with the unit. */
  unit: string
  /** A fixed y range for bounded quantities (fractions, rewards in [0, 1]); otherwise the chart includes 0. */
  range?: readonly [number, number]
}

/** What the reports chart, by path in a metrics.jsonl line: explanation, axis title and honest range. */
export const METRICS: Readonly<Record<string, MetricInfo>> = {
  heldOutAccuracy: { explain: 'share of held-out questions answered right (the method\'s own evaluation protocol)', unit: 'accuracy (fraction right)', range: [0, 1] },
  'rewardSolver.mean': { explain: 'Solver reward r_S = f_S(a)·p(q, a): format × Judge correctness, mean over answers (COSE Eq. 7)', unit: 'reward (0–1)', range: [0, 1] },
  'rewardProposer.mean': { explain: 'Proposer reward r_P = f_P(q)·(v(q) + 4p(1 − p))/2, mean over questions (COSE Eq. 8)', unit: 'reward (0–1)', range: [0, 1] },
  'confidenceValidator.mean': { explain: 'Validator confidence c_V(q) in its verdict, mean over well-formed questions (COSE §3.2)', unit: 'confidence (0–1)', range: [0, 1] },
  'confidenceJudge.mean': { explain: 'Judge confidence c_J(q, a) in its verdict, mean over answers (COSE §3.2)', unit: 'confidence (0–1)', range: [0, 1] },
  'weightSolver.mean': { explain: 'Solver sample weight w_S = clip(v·c_V·c_J, 0.1, 1), mean (COSE Eq. 5)', unit: 'weight (0.1–1)', range: [0, 1] },
  acceptRate: { explain: 'share of proposed questions the Validator accepted into the replay buffer', unit: 'fraction (0–1)', range: [0, 1] },
  bufferSize: { explain: 'questions in the prioritized replay buffer', unit: 'questions' },
  'train.objective.kl': { explain: 'KL of the policy to the reference model per token (the estimator the config selects)', unit: 'KL (nats per token)' },
  'train.objective.entropy': { explain: 'mean per-token entropy of the policy on the trained tokens (nats)', unit: 'entropy (nats per token)' },
  'train.loss': { explain: 'the training objective\'s loss on the step\'s batch', unit: 'loss' },
  'train.lr': { explain: 'learning rate of the step (peak × schedule)', unit: 'learning rate' },
  'train.gradNorm': { explain: 'global L2 norm of the gradient before clipping', unit: 'gradient L2 norm' },
  agreeRate: { explain: 'share of responses agreeing with their group\'s majority-vote pseudo-label', unit: 'fraction (0–1)', range: [0, 1] },
  labelAccuracy: { explain: 'pseudo-labels equal to the reference answer (diagnostic only, never a reward)', unit: 'fraction (0–1)', range: [0, 1] },
  rolloutAccuracy: { explain: 'responses equal to the reference answer (diagnostic only)', unit: 'fraction (0–1)', range: [0, 1] },
  'reward.mean': { explain: 'the step\'s reward, mean over responses (or questions for a Challenger)', unit: 'reward' },
  'aux.max': { explain: 'largest auxiliary trajectory term b among agreeing responses (UID Eq. 5)', unit: 'auxiliary term b' },
  informativeGroups: { explain: 'question groups whose rewards differ, so that their GRPO advantages are not all zero', unit: 'groups' },
  nonzeroAdvantages: { explain: 'responses whose advantage is not zero: those that carry a policy-gradient signal', unit: 'responses' },
  kl: { explain: 'KL of the policy to the reference model per token', unit: 'KL (nats per token)' },
  'responseTokens.mean': { explain: 'tokens per response, mean', unit: 'tokens' },
  'rDis.mean': { explain: 'r_dis: disagreement among solver variants per question, batch mean (DIS §4.2)', unit: 'r_dis' },
  'rUnc.mean': { explain: 'r_unc: uncertainty reward of the pooled solve rate p̂, batch mean (DIS §3)', unit: 'r_unc' },
  'rRep.mean': { explain: 'r_rep: BLEU-cluster repetition penalty, batch mean (R-Zero)', unit: 'r_rep' },
  parseRate: { explain: 'share of outputs that parse in the expected format', unit: 'fraction (0–1)', range: [0, 1] },
  'pHat.mean': { explain: 'pooled solve rate p̂ over the solver variants, mean over questions', unit: 'solve rate p̂ (0–1)', range: [0, 1] },
  kept: { explain: 'questions kept in the informative band of p̂', unit: 'questions' },
  pseudoLabelAccuracy: { explain: 'pseudo-labels the verifier marks right (diagnostic only)', unit: 'fraction (0–1)', range: [0, 1] },
  'ensemble.responding': { explain: 'solver-ensemble variants that answered', unit: 'variants' },
  judgeAccuracy: { explain: 'Judge pairwise accuracy on the verifier-ordered held-out pairs', unit: 'fraction (0–1)', range: [0, 1] },
  'judge.heldOut.plainAfter': { explain: 'Judge held-out pairwise accuracy on pairs without hedging responses', unit: 'fraction (0–1)', range: [0, 1] },
  'challenger.reward.mean': { explain: 'Challenger reward r^C, mean over tasks (J-Zero Eq. 6)', unit: 'reward r^C' },
  'challenger.meanJudgeScore.mean': { explain: 'mean Judge score r̄ of the Solver\'s answers to a task (J-Zero Eq. 4)', unit: 'Judge score r̄' },
  'solver.reward.mean': { explain: 'Solver reward σ(J), mean over responses (J-Zero Eq. 9)', unit: 'reward σ(J) (0–1)', range: [0, 1] },
  'solver.verifierAccuracy': { explain: 'Solver samples the verifier marks right (measurement only)', unit: 'fraction (0–1)', range: [0, 1] },
  'selection.dispersionKept.mean': { explain: 'score dispersion s_i of the kept tasks, mean (J-Zero Eq. 8)', unit: 'dispersion s_i' },
  'judge.winRate.role.rate': { explain: 'role pairs whose chosen side the verifier also prefers', unit: 'fraction (0–1)', range: [0, 1] },
  'judge.winRate.amp.rate': { explain: 'amplification pairs whose chosen side the verifier also prefers', unit: 'fraction (0–1)', range: [0, 1] },
  'judge.train.loss': { explain: 'Bradley–Terry loss of the Judge on its pairs (J-Zero Eq. 13)', unit: 'Bradley–Terry loss' },
  'solver.train.kl': { explain: 'KL of the Solver to its reference per token', unit: 'KL (nats per token)' },
  'diagnostics.proposalGoodRate': { explain: 'well-formed proposals the verifier calls well posed: the base rate the Validator filters (diagnostic only)', unit: 'fraction (0–1)', range: [0, 1] },
  'diagnostics.validatorAcceptPrecision': { explain: 'accepted proposals the verifier calls well posed: the Validator\'s accept precision (diagnostic only)', unit: 'fraction (0–1)', range: [0, 1] },
  'diagnostics.judgeVerifierAgreement': { explain: 'Solver answers whose Judge verdict (p(q, a) ≥ ½) matches the verifier\'s (diagnostic only)', unit: 'fraction (0–1)', range: [0, 1] },
  'diagnostics.trueSolveRate.mean': { explain: 'per question, the share of Solver answers the verifier marks right, mean over the step\'s questions (diagnostic only)', unit: 'solve rate (0–1)', range: [0, 1] },
  'diagnostics.solveRateError': { explain: 'mean |p(q) − true solve rate|: how far the Judge-estimated solve rate (COSE Eq. 1) is from the verifier\'s', unit: 'absolute error (0–1)', range: [0, 1] },
  'diagnostics.solveRateCorrelation': { explain: 'Pearson correlation of p(q) (COSE Eq. 1) with the true solve rate over the step\'s questions', unit: 'correlation (−1–1)', range: [-1, 1] },
  'solverTrueAccuracy.mean': { explain: 'per Challenger question, the share of the Solver\'s ensemble samples the verifier marks right, batch mean (diagnostic only)', unit: 'accuracy (fraction right)', range: [0, 1] },
  disagreementAccuracyCorrelation: { explain: 'Pearson correlation of r_dis (DIS §4.2) with the Solver\'s true accuracy over a Challenger batch', unit: 'correlation (−1–1)', range: [-1, 1] },
  pHatAccuracyCorrelation: { explain: 'Pearson correlation of the pooled p̂ (DIS §3) with the Solver\'s true accuracy over a Challenger batch', unit: 'correlation (−1–1)', range: [-1, 1] },
  'solver.judgePairAccuracy': { explain: 'Judge pairwise accuracy on the Solver\'s own rollouts: (right, wrong) pairs of one task by the verifier, ties ½ (diagnostic only)', unit: 'fraction (0–1)', range: [0, 1] },
  'solver.judgePairs': { explain: '(right, wrong) pairs of the Solver\'s rollouts the on-policy Judge accuracy is measured on', unit: 'pairs' },
  loss: { explain: 'the step\'s training loss', unit: 'loss' },
  'train.objective.rewardMargin': { explain: 'DPO implicit reward margin β·(Δ log π − Δ log π_ref), chosen minus rejected', unit: 'reward margin' },
  'train.objective.accuracy': { explain: 'preference pairs whose chosen side has the larger implicit reward', unit: 'fraction (0–1)', range: [0, 1] },
  'train.objective.nll': { explain: 'token negative log-likelihood of the weighted SFT batch', unit: 'NLL (nats per token)' },
  'train.objective.meanWeight': { explain: 'mean SFT sample weight w = m·softmax(2q)', unit: 'weight' },
}
