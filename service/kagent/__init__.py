"""kagent's data: the task JSON dialects, the store over the named SQL, the service's migrations and the
optional invocation index.

The bottom of the house: imports nothing of the service.
"""
