"""The wheel `make dist` builds holds the package and its metadata, nothing else (no chapters, tests or data)."""

import re
import subprocess
import sys
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_holds_only_the_package_licence_and_metadata(tmp_path):
    result = subprocess.run([sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path), str(REPO_ROOT)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    (wheel,) = tmp_path.glob("transformer_book-*-py3-none-any.whl")
    names = zipfile.ZipFile(wheel).namelist()
    package = REPO_ROOT / "src" / "transformer_book"
    modules = sorted(p.relative_to(package).as_posix() for p in package.rglob("*.py"))
    assert sorted(n.split("/", 1)[1] for n in names if n.startswith("transformer_book/")) == modules
    others = [n for n in names if not n.startswith("transformer_book/")]
    assert all(re.fullmatch(r"transformer_book-[^/]+\.dist-info/[\w./-]+", n) for n in others), others
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in others)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in others if n.endswith("METADATA"))).decode()
    assert "Project-URL: Source, https://github.com/" in metadata and "Classifier: " in metadata
