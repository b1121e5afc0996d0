-- slo_conflict is owned by the slo projection from its version 2 on: it
-- counts the ConflictingCompletionRecorded events of the reviews' conflict
-- streams (conflicts-<review_id>), so rebuilds reproduce it
-- (docs/projections.md). Nothing writes it directly any more.
COMMENT ON TABLE slo_conflict IS 'conflicting completions per class and minute, counted by the slo projection from ConflictingCompletionRecorded events';
