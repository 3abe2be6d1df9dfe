"""The source distribution (what `pip install ddpc-<version>.tar.gz` builds
from) holds every file the build reads: the C sources and their headers, the
CUDA kernels, which setup.py compiles itself, and the Python package. A
header or kernel left out breaks the build only on a user's machine."""

import os
import shutil
import subprocess
import sys
import tarfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_FILES = ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in")
BUILD_DIRS = ("csrc", "kernels", "python")


def source_files():
    """The files of the source tree a build reads, relative to it (no build outputs or caches)."""
    files = set(BUILD_FILES)
    for top in BUILD_DIRS:
        for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
            dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.endswith(".egg-info")]
            for name in filenames:
                if not name.endswith((".so", ".o", ".pyc")):
                    files.add(os.path.relpath(os.path.join(dirpath, name), ROOT))
    return files


def test_the_source_distribution_holds_every_file_the_build_reads(tmp_path):
    if not os.path.exists(os.path.join(ROOT, "setup.py")):
        pytest.skip("not run from a source tree")
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in BUILD_FILES:
        shutil.copy(os.path.join(ROOT, name), tree / name)
    for top in BUILD_DIRS:
        shutil.copytree(os.path.join(ROOT, top), tree / top,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "*.so", "*.o", "*.pyc"))
    proc = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--formats=gztar", "-d", str(tmp_path / "dist")],
                          cwd=tree, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (archive,) = (tmp_path / "dist").iterdir()
    with tarfile.open(archive) as tar:
        held = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    missing = sorted(source_files() - held)
    assert not missing, f"the source distribution lacks {len(missing)} files the build reads: {missing[:20]}"
