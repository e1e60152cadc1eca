"""Paths the tests share: the repository root and the real Criteo rows."""

import os

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Real Criteo rows for quality checks (see the developers' shared data); tests that need them skip,
# saying so, where the folder is absent.
CRITEO_DIR_VARIABLE = "CRITEO_DATA_DIR"
CRITEO_DIR = os.environ.get(CRITEO_DIR_VARIABLE,
                            os.path.join(os.path.dirname(REPO_ROOT), "shared", "data", "criteo"))
