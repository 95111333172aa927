"""The operations: fork, rewind and undo (`plan` the pure plan, `copying` the writer, `forking` and `rewind`
the one transaction each, `summary` what a branch left behind).

May import the frame and kagent's data; never a branch, an agent or a door.
"""
