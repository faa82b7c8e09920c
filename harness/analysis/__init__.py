"""Judgement: what the measured figures say. Intervals and ties (one definition,
harness.analysis.ties), the effects fit, the budget's next pass, the target model, the
recommendation, the prediction check's cases (checkcases) and check-remote's (remotecheck). Reads
records (harness.results); the report wing renders what it decides."""
