"""The benchmark of issue 4: a generator of realistic kagent sessions and a runner that measures the service."""
