"""kagent's data: the task JSON dialects, the store over the named SQL, the service's migrations, the turn map,
the framework of a session, and the retired invocation index's status and removal.

The bottom of the house: imports nothing of the service.
"""
