"""The agents: talking to kagent's agents over A2A (the client) and the jobs that do (what-ifs).

May import the branches, the operations, the frame and kagent's data; never a door.
"""
