"""The LLM proposer: a language model writes a rewrite, sees what the engine measured, and revises.

It runs after the offline search inside `optimize()` (agent/optimize.py), seeded with its best, and its
candidates join the same results: only verified, measured candidates reach the user, whoever wrote them.
"""

LLM_PROPOSER = "llm"  # its name among the proposers (`cuda-agent optimize --proposer llm`)
