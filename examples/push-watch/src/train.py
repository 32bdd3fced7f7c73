"""The job the watch loop resubmits: prints the step size, so a new version shows at once."""

import os

STEP = 0.1

print(f"train: step={STEP} run={os.environ['RUN_NAME']}")
