"""NCCL is loaded when ddpc first needs it, not linked: `import ddpc` loads no
libnccl, so `import torch` afterwards binds torch to its own NCCL, and ddpc then
uses the copy torch loaded. Each check runs in a fresh child process, since a
process loads NCCL once. The torch checks skip when torch is not installed
(run them with an interpreter that has it)."""

import importlib.util
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from ddpc import _C

# Where the ddpc under test comes from (the source tree, or site-packages after
# a plain install), so that the children import the same one.
DDPC_PARENT = os.path.dirname(os.path.dirname(os.path.abspath(_C.__file__)))

pytestmark = pytest.mark.skipif("nccl" not in _C.backends(), reason="this ddpc was built without NCCL")

# Prints what the child needs to report: the libnccl files mapped into the process.
PRELUDE = textwrap.dedent("""
    import os, sys
    def libnccl_mapped():
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[-1].strip() for line in f if len(line.split(None, 5)) == 6}
        return sorted(os.path.realpath(p) for p in paths if os.path.basename(p).startswith("libnccl.so"))
""")


def run_child(*code, **env):
    """Runs the PRELUDE and the code blocks (each dedented) in a new interpreter with this checkout's ddpc."""
    source = "\n".join(textwrap.dedent(c) for c in (PRELUDE,) + code)
    python_path = os.pathsep.join(filter(None, [DDPC_PARENT, os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=python_path, **env))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_the_extension_does_not_link_nccl():
    if shutil.which("ldd") is None:
        pytest.skip("no ldd")
    out = subprocess.run(["ldd", _C.__file__], capture_output=True, text=True, check=True).stdout
    assert "libnccl" not in out


def test_nccl_is_loaded_on_first_use_only():
    run_child("""
        import ddpc
        assert libnccl_mapped() == [], libnccl_mapped()
        version = ddpc.build_info()["nccl_version"]
        assert version and version >= 20000, version
        assert libnccl_mapped() == [os.path.realpath(ddpc._C.nccl_library())], libnccl_mapped()
    """)


def test_an_nccl_that_does_not_load_is_a_clear_error():
    run_child("""
        import ddpc, pytest
        from ddpc import _C, _nccl
        assert ddpc.build_info()["nccl_version"] is None
        for call in (_C.nccl_library, _C.nccl_unique_id, lambda: _C.NcclComm(bytes(128), 0, 1, 0, 5.0),
                     lambda: _nccl.create_communicator(None, "g", 0, 1, 0, 5.0)):
            with pytest.raises(RuntimeError, match="(?s)cannot load NCCL.*DDPC_NCCL_LIBRARY: /nonexistent/libnccl"):
                call()
        assert libnccl_mapped() == []
    """, DDPC_NCCL_LIBRARY="/nonexistent/libnccl.so.2")


def test_a_library_without_the_nccl_functions_is_named():
    run_child("""
        from ddpc import _C
        try:
            _C.nccl_library()
        except RuntimeError as e:
            assert "libm.so.6" in str(e) and "has no ncclAllGather" in str(e) and "built against NCCL" in str(e), e
        else:
            raise AssertionError("libm loaded as NCCL")
    """, DDPC_NCCL_LIBRARY="libm.so.6")


@pytest.mark.parametrize("override", ["", "/nonexistent/libnccl.so.2"], ids=["default", "not-loadable"])
def test_doctor_names_the_nccl_library_or_why_none_loads(override):
    run_child("""
        import io
        from ddpc import _C
        from ddpc.__main__ import doctor
        out = io.StringIO()
        assert doctor(out) == 0
        line = next(l for l in out.getvalue().splitlines() if l.lstrip().startswith("NCCL:"))
        if os.environ["DDPC_NCCL_LIBRARY"]:
            assert "does not load: cannot load NCCL" in line and "NCCL does not load" in out.getvalue(), out.getvalue()
        else:
            assert _C.nccl_library() in line, line
    """, DDPC_NCCL_LIBRARY=override)


def needs_torch():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")


# torch.cuda.nccl.version() as ncclGetVersion's code.
TORCH_NCCL = "major, minor, patch = torch.cuda.nccl.version()[:3]; torch_code = major * 10000 + minor * 100 + patch"


@pytest.mark.parametrize("order", ["ddpc, torch", "torch, ddpc", "ddpc loads nccl, then torch"])
def test_ddpc_and_torch_share_one_nccl_in_either_order(order):
    needs_torch()
    imports = {"ddpc, torch": "import ddpc\nimport torch",
               "torch, ddpc": "import torch\nimport ddpc",
               "ddpc loads nccl, then torch": "import ddpc\nddpc.build_info()\nimport torch"}[order]
    run_child(imports, TORCH_NCCL, """
        code = ddpc.build_info()["nccl_version"]
        assert code == torch_code, (code, torch_code)
        assert len(libnccl_mapped()) == 1, libnccl_mapped()
    """)
