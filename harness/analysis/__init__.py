"""Judgement: what the measured figures say. Intervals and ties (one definition, harness.analysis.intervals),
the effects fit, the budget's next pass, the gate's comparison, the target model, the recommendation and the
prediction check's cases. Reads records (harness.results); the report wing renders what it decides."""
