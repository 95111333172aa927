"""One replay engine: a what-if and an experiment fork a conversation before a turn into other agents,
re-ask its later questions there, follow the jobs and read the outcome. Each part in a room of its own, named
for what it does (docs/design.md, "A replay's road"): `terms` (the words), `span` (what is re-asked), `gate`
(what it may cost), `answerers` (who answers), `branches` (writing the forks and jobs), `runner`, `player`,
`steady` and `figures` (running them, turn by turn, exactly once), `jobs` (following and cancelling), `grid`,
`table` and `listing` (reading them), `judge`, `blind`, `verdict` and `judged` (judging them), `tools` (what the agents'
tools may do), `twin`, `recordings`, `lease`, `real_server` and `manifests` (replay twins: the replay endpoint's
answers, the source's recorded calls, which turn a call is, the real server, the twin's manifests), and `engine`
(the one way to start), which the what-if's and the experiment's operations (service/agents/whatif.py,
experiments.py) hand what to replay.

May import the agents' A2A client, the branches, the operations, the frame and kagent's data; never a door,
nor the operations above it.
"""
