"""NCCL, cuBLAS and cuFFT are loaded when ddpc first needs them, not linked:
`import ddpc` maps none of them (libcublasLt alone is half a gigabyte of
code, which every rank of a cpu-backend job used to map), and `import torch`
afterwards binds torch to its own copies, which ddpc then uses. Each check
runs in a fresh child process, since a process loads each library once. The
torch checks skip when torch is not installed (run them with an interpreter
that has it)."""

import ast
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

needs_nccl = pytest.mark.skipif("nccl" not in _C.backends(), reason="this ddpc was built without NCCL")
needs_cuda = pytest.mark.skipif(not _C.build_info()["cuda"], reason="this ddpc was built without CUDA")

# Gives the child mapped(prefix): the files mapped into the process whose names start with prefix.
PRELUDE = textwrap.dedent("""
    import os, sys
    def mapped(prefix):
        with open("/proc/self/maps") as f:
            paths = {line.split(None, 5)[-1].strip() for line in f if len(line.split(None, 5)) == 6}
        return sorted(os.path.realpath(p) for p in paths if os.path.basename(p).startswith(prefix))
""")

# Each library loaded at run time: (its file's prefix, the variable that picks it, what the messages call it,
# a symbol ddpc calls).
LIBRARIES = {
    "nccl": ("libnccl.so", "DDPC_NCCL_LIBRARY", "NCCL", "ncclAllGather"),
    "cublas": ("libcublas.so", "DDPC_CUBLAS_LIBRARY", "cuBLAS", "cublasCreate_v2"),
    "cufft": ("libcufft.so", "DDPC_CUFFT_LIBRARY", "cuFFT", "cufftCreate"),
}
each_library = pytest.mark.parametrize("lib", [pytest.param("nccl", marks=needs_nccl),
                                               pytest.param("cublas", marks=needs_cuda),
                                               pytest.param("cufft", marks=needs_cuda)])


def run_child(*code, **env):
    """Runs the PRELUDE and the code blocks (each dedented) in a new interpreter with this checkout's ddpc."""
    source = "\n".join(textwrap.dedent(c) for c in (PRELUDE,) + code)
    python_path = os.pathsep.join(filter(None, [DDPC_PARENT, os.environ.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", source], capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=python_path, **env))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_the_extension_links_none_of_them():
    if shutil.which("ldd") is None:
        pytest.skip("no ldd")
    out = subprocess.run(["ldd", _C.__file__], capture_output=True, text=True, check=True).stdout
    for name in ("libnccl", "libcublas", "libcufft"):
        assert name not in out, out


def test_import_maps_none_of_them():
    """Nor does asking whether CUDA is built in (build_info() loads each library for its version)."""
    run_child(f"""
        import ddpc
        assert ddpc.backends.cuda.is_built() is {_C.build_info()["cuda"]}
        for prefix in ("libnccl", "libcublas", "libcufft"):
            assert mapped(prefix) == [], mapped(prefix)
    """)


@each_library
def test_each_is_loaded_on_first_use_only(lib):
    prefix, _, _, _ = LIBRARIES[lib]
    run_child(f"""
        import ddpc
        assert mapped({prefix!r}) == []
        version = ddpc.build_info()[{lib + "_version"!r}]
        assert version and version >= 10000, version
        assert mapped({prefix!r}) == [os.path.realpath(ddpc._C.{lib}_library())], mapped({prefix!r})
    """)


@each_library
def test_one_that_does_not_load_is_a_clear_error(lib):
    prefix, env, name, _ = LIBRARIES[lib]
    run_child(f"""
        import ddpc, pytest
        from ddpc import _C
        assert ddpc.build_info()[{lib + "_version"!r}] is None
        with pytest.raises(RuntimeError, match="(?s)cannot load {name}.*{env}: /nonexistent/lib"):
            _C.{lib}_library()
        assert mapped({prefix!r}) == []
    """, **{env: "/nonexistent/lib.so"})


@needs_nccl
def test_nccl_entry_points_name_a_library_that_does_not_load():
    run_child("""
        import pytest
        from ddpc import _C, _nccl
        for call in (_C.nccl_unique_id, lambda: _C.NcclComm(bytes(128), 0, 1, 0, 5.0),
                     lambda: _nccl.create_communicator(None, "g", 0, 1, 0, 5.0)):
            with pytest.raises(RuntimeError, match="(?s)cannot load NCCL.*DDPC_NCCL_LIBRARY: /nonexistent/libnccl"):
                call()
    """, DDPC_NCCL_LIBRARY="/nonexistent/libnccl.so.2")


@each_library
def test_a_library_without_the_functions_is_named(lib):
    _, env, name, symbol = LIBRARIES[lib]
    run_child(f"""
        from ddpc import _C
        try:
            _C.{lib}_library()
        except RuntimeError as e:
            assert "libm.so.6" in str(e) and "has no {symbol}" in str(e) and "built against {name}" in str(e), e
        else:
            raise AssertionError("libm loaded as {name}")
    """, **{env: "libm.so.6"})


@needs_cuda
@pytest.mark.parametrize("override", ["", "/nonexistent/lib.so"], ids=["default", "not-loadable"])
def test_doctor_names_each_library_or_why_none_loads(override):
    libs = [lib for lib in LIBRARIES if lib != "nccl" or "nccl" in _C.backends()]
    run_child(f"""
        import io
        from ddpc import _C
        from ddpc.__main__ import doctor
        out = io.StringIO()
        assert doctor(out) == 0
        lines = out.getvalue().splitlines()
        for lib, name in {[(lib, LIBRARIES[lib][2]) for lib in libs]!r}:
            line = next(l for l in lines if l.lstrip().startswith(name + ":"))
            if {override!r}:
                assert "does not load: cannot load " + name in line, out.getvalue()
            else:
                assert getattr(_C, lib + "_library")() in line, line
        if {override!r} and "nccl" in _C.backends():
            assert "NCCL does not load" in out.getvalue(), out.getvalue()
    """, **{LIBRARIES[lib][1]: override for lib in LIBRARIES})


@pytest.mark.gpu
def test_a_gemm_and_an_fft_on_a_gpu_load_cublas_and_cufft():
    if not _C.cuda_device_count():
        pytest.skip("no GPU")
    run_child("""
        import numpy as np
        import ddpc
        a = ddpc.tensor(np.arange(12, dtype=np.float32).reshape(3, 4), device="cuda")
        assert mapped("libcublas.so") == [] and mapped("libcufft.so") == []
        np.testing.assert_allclose((a @ a.T).cpu().numpy(), a.cpu().numpy() @ a.cpu().numpy().T)
        assert mapped("libcublas.so") == [os.path.realpath(ddpc._C.cublas_library())], mapped("libcublas.so")
        np.testing.assert_allclose(ddpc.fft.rfft(a).cpu().numpy(), np.fft.rfft(a.cpu().numpy()), rtol=1e-5, atol=1e-4)
        assert mapped("libcufft.so") == [os.path.realpath(ddpc._C.cufft_library())], mapped("libcufft.so")
    """)


def needs_torch():
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed")


# torch.cuda.nccl.version() as ncclGetVersion's code.
TORCH_NCCL = "major, minor, patch = torch.cuda.nccl.version()[:3]; torch_code = major * 10000 + minor * 100 + patch"


@needs_nccl
@pytest.mark.parametrize("order", ["ddpc, torch", "torch, ddpc", "ddpc loads nccl, then torch"])
def test_ddpc_and_torch_share_one_nccl_in_either_order(order):
    needs_torch()
    imports = {"ddpc, torch": "import ddpc\nimport torch",
               "torch, ddpc": "import torch\nimport ddpc",
               "ddpc loads nccl, then torch": "import ddpc\nddpc.build_info()\nimport torch"}[order]
    run_child(imports, TORCH_NCCL, """
        code = ddpc.build_info()["nccl_version"]
        assert code == torch_code, (code, torch_code)
        assert len(mapped("libnccl.so")) == 1, mapped("libnccl.so")
    """)


def soname_major(path):
    """"libcublas.so.13" of .../libcublas.so.13.1.0.3."""
    return ".".join(os.path.basename(path).split(".")[:3])


@needs_cuda
@pytest.mark.parametrize("lib", ["cublas", "cufft"])
def test_ddpc_imported_first_leaves_torch_its_own_library(lib):
    """With ddpc imported first, torch still loads the copy it loads alone, and ddpc then uses it: importing
    ddpc maps none for torch to be bound to."""
    needs_torch()
    prefix = LIBRARIES[lib][0]
    torch_alone = ast.literal_eval(run_child(f"import torch\nprint(mapped({prefix!r}))").splitlines()[-1])
    out = run_child(f"""
        import ddpc
        import torch
        print(mapped({prefix!r}))
        print(os.path.realpath(ddpc._C.{lib}_library()))
        print(mapped({prefix!r}))
    """)
    lines = out.splitlines()[-3:]
    with_ddpc_first, ours, after = ast.literal_eval(lines[0]), lines[1], ast.literal_eval(lines[2])
    if not any(soname_major(p) == soname_major(ours) for p in torch_alone):
        pytest.skip(f"torch loads no {prefix} of the major version ddpc was built against ({soname_major(ours)}): "
                    f"{torch_alone}")
    assert with_ddpc_first == torch_alone and ours in torch_alone and after == torch_alone, (
        torch_alone, with_ddpc_first, ours, after)
