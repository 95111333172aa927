"""The branches: reading a conversation and its relatives (transcript, turn listing, compare, lineage).

Only reads. May import the operations (the pure plan's boundary rules, the summary), the frame and kagent's data.
"""
