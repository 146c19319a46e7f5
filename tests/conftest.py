import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("TOKSMITH_DATA_DIR", ROOT.parent / "shared" / "data"))


def data_path(*parts: str) -> Path:
    """A file under ../shared/data; skips the test with the reason when it is absent."""
    path = DATA_DIR.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"real data not available: {path} is absent (set TOKSMITH_DATA_DIR to the shared data folder)")
    return path
