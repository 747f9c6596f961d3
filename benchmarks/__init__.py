"""The benchmark harness of hermes_actors (SPEC §14): ``python -m benchmarks``.

Every scenario runs in a child process that applies ``gevent.monkey.patch_all()`` before it
imports anything else, so the figures are those of the standalone process (gevent mode);
the parent stays unpatched and only starts children, collects their JSON and prints the
tables. Each scenario measures its own baselines in the same child, so every headline
figure is a ratio to something measured on the same machine in the same minute.

This module imports nothing on purpose: ``python -m benchmarks._child`` imports it before
the child patches gevent.
"""
