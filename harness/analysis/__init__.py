"""Judgement: what the measured figures say. Intervals and ties (one definition, harness.analysis.intervals),
the effects fit, the budget's next pass, the baseline gate's comparison (baselinegate) and what the gates
read from run directories (gateinput), the A/B gate's judgement (abjudgement), the target model, the
recommendation, the prediction check's cases (checkcases) and check-remote's (remotecheck). Reads records
(harness.results); the report wing renders what it decides."""
