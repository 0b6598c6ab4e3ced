// Advantages, weights and rewards of the four methods (pure functions, no I/O).
export {
  advantageEstimators,
  batchWhiten,
  computeAdvantages,
  drGrpoAdvantages,
  groupIndices,
  grpoAdvantages,
  reinforcePlusPlusAdvantages,
  reinforcePlusPlusBaselineAdvantages,
  rlooAdvantages,
  type AdvantageEstimator,
  type AdvantageOptions,
  type GroupId,
} from './advantages.js'
export {
  COSE_WEIGHT_CEIL,
  COSE_WEIGHT_FLOOR,
  coseProposerReward,
  coseProposerWeight,
  coseSolverReward,
  coseSolverWeight,
  learnability,
  solveRate,
  type CoseWeightOptions,
} from './cose.js'
export {
  combineGatedReward,
  gatedAuxTerms,
  permuteAuxTerms,
  randomAuxScores,
  ttrlAuxReward,
  ttrlBinaryReward,
  type GatedReward,
  type GatedRewardOptions,
} from './ttrl.js'
export {
  disChallengerReward,
  jzChallengerReward,
  jzMeanJudgeScore,
  rzeroChallengerReward,
  scoreDispersion,
  selectTopKByDispersion,
  uncertaintyReward,
  type DisChallengerInput,
  type DisChallengerOptions,
  type JzChallengerInput,
  type RzeroChallengerInput,
  type UncertaintyForm,
} from './challenger.js'
export {
  auxPreferencePair,
  auxSftWeights,
  randomPreferencePair,
  type PreferencePair,
} from './offline.js'
