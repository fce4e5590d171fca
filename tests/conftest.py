"""Suite-wide test settings: the hypothesis profiles.

``dev`` (default) keeps local runs quick; ``ci`` (``make test``) runs enough examples for the
stateful harness to matter. Tests that want more or fewer examples than a profile gives set
their own ``settings``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=300,
    stateful_step_count=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", max_examples=60, stateful_step_count=40, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))
