-- A replay answers an unrecorded call from the source's world by default (issue 46, reads: "recorded"): a tool
-- error saying the source never made it. Such a call is kept as `missed`, apart from `refused` (a tool that acts,
-- asks, or is outside the source agent's configured tools: the arm's intent).
ALTER TABLE {schema}.replay_call DROP CONSTRAINT IF EXISTS replay_call_answered_from_check;
ALTER TABLE {schema}.replay_call ADD CONSTRAINT replay_call_answered_from_check
    CHECK (answered_from IN ('recorded', 'live', 'missed', 'refused'));
