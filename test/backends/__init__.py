"""Tests of the twin backends: each test body runs on both through the ``backend`` fixture where
both exist."""
