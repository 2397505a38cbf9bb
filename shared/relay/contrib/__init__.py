"""Integrations with frameworks other than task queues: :mod:`relay.contrib.django`.

Nothing here is imported by Relay's core.
"""
