"""The stub python/ddpc/_C.pyi against the extension it describes: the same
public names (less the NCCL-only ones in a build without NCCL), each class
with the same members of the same kinds, the same bases and final-ness, the
parameter names (and which have defaults) that each docstring opening with a
signature gives, positional-only parameters exactly where the C takes no
keywords, and the keys of the dicts it returns. The stub is read with `ast`,
so no type checker is needed."""

import ast
import keyword
import pathlib
import re
import sys

import numpy as np
import pytest

import ddpc
from ddpc import _C

STUB_PATH = pathlib.Path(ddpc.__file__).with_name("_C.pyi")
STUB = ast.parse(STUB_PATH.read_text())
PY_TPFLAGS_BASETYPE = 1 << 10
# Members every object has whose stub entry would say nothing: the repr and the pickling hook (which the
# handles tied to a process override only to refuse); constructors are compared on their own.
UNSTATED = {"__doc__", "__module__", "__weakref__", "__dict__", "__repr__", "__reduce__"}
CONSTRUCTORS = ("__init__", "__new__")
# PEP 688: types with the buffer protocol get these attributes from Python 3.12 on.
BUFFER_PROTOCOL = {"__buffer__", "__release_buffer__"}
# A keyword no C function parses.
PROBE = "stub_probe_keyword"


def nccl_only_names():
    """The names the stub's comment marks as present only in builds with NCCL."""
    marker = "only in builds with NCCL (DDPC_WITH_NCCL):"
    lines = [line for line in STUB_PATH.read_text().splitlines() if line.startswith("#") and marker in line]
    assert len(lines) == 1, f"the stub should have one comment line with {marker!r}, has {len(lines)}"
    return {name.strip() for name in lines[0].split(marker)[1].split(",")}


def stub_top():
    """The stub's public top-level definitions by name."""
    top = {}
    for node in STUB.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            top[node.name] = node
        elif isinstance(node, ast.AnnAssign):
            top[node.target.id] = node
        elif isinstance(node, ast.Assign):
            top.update((t.id, node) for t in node.targets)
    return {name: node for name, node in top.items() if not name.startswith("_")}


def stub_classes():
    return {name: node for name, node in stub_top().items() if isinstance(node, ast.ClassDef)}


def stub_members(cls):
    """A stub class's members by name (an overloaded one once)."""
    return {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef)}


def decorators(fn):
    return {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}


def stub_kind(fn):
    kinds = decorators(fn) & {"property", "classmethod"}
    return kinds.pop() if kinds else "method"


def real_kind(attr):
    kind = type(attr).__name__
    return {"getset_descriptor": "property", "member_descriptor": "property",
            "classmethod_descriptor": "classmethod"}.get(kind, "method")


def stub_params(fn, bound):
    """(name, has a default, kind) for each parameter of a stub function, less
    self or cls when `bound`; kind is "positional-only", "positional" or
    "keyword-only" (a *args is "*name", of that last kind)."""
    a = fn.args
    positional = [(p.arg, "positional-only") for p in a.posonlyargs] + [(p.arg, "positional") for p in a.args]
    defaults = [False] * (len(positional) - len(a.defaults)) + [True] * len(a.defaults)
    params = [(name, default, kind) for (name, kind), default in zip(positional, defaults)]
    if a.vararg:
        params.append(("*" + a.vararg.arg, False, "keyword-only"))
    params += [(p.arg, d is not None, "keyword-only") for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    return params[1:] if bound else params


def as_written(params):
    """Parameters as a signature lists them: (name, has a default), with a '*'
    before the keyword-only ones unless a *args stands there."""
    written = []
    for name, default, kind in params:
        if kind == "keyword-only" and not any(w[0].startswith("*") for w in written):
            written.append(("*", False))
        if not name.startswith("*"):
            written.append((name, default))
    return written


def split_top_level(text):
    pieces, depth, piece = [], 0, ""
    for ch in text + ",":
        depth += (ch in "([{") - (ch in ")]}")
        if ch == "," and depth == 0:
            pieces.append(piece.strip())
            piece = ""
        else:
            piece += ch
    return [p for p in pieces if p]


def doc_params(name, doc):
    """(name, has a default) for each parameter of the signature `name(...)` that
    `doc` opens with, or None; a parameter named after a Python keyword is
    written with a trailing underscore in the stub (`in` as `in_`)."""
    if not doc or not doc.startswith(name + "("):
        return None
    depth = 0
    for end in range(len(name), len(doc)):
        depth += (doc[end] in "([{") - (doc[end] in ")]}")
        if depth == 0:
            break
    params = []
    for piece in split_top_level(doc[len(name) + 1:end]):
        head, eq, _ = piece.partition("=")
        param = head.split(":")[0].strip()
        params.append((param + "_" if keyword.iskeyword(param) else param, bool(eq)))
    return params


def test_the_stub_names_every_public_name_of_the_module():
    stub = set(stub_top())
    real = {name for name in dir(_C) if not name.startswith("_")}
    nccl_only = nccl_only_names()
    assert nccl_only <= stub, f"NCCL-only names missing from the stub: {sorted(nccl_only - stub)}"
    if _C.build_info()["nccl"]:
        assert nccl_only <= real, f"this build has NCCL but lacks {sorted(nccl_only - real)}"
        optional = set()
    else:
        assert not nccl_only & real, f"names marked NCCL-only are in a build without NCCL: {sorted(nccl_only & real)}"
        optional = nccl_only
    missing, extra = sorted(real - stub), sorted(stub - real - optional)
    assert not missing and not extra, f"in ddpc._C but not in the stub: {missing}; in the stub only: {extra}"


def test_each_class_has_the_members_bases_and_finality_of_the_type():
    problems = []
    for name, cls in stub_classes().items():
        if not hasattr(_C, name):
            continue  # an NCCL-only class in a build without NCCL
        t = getattr(_C, name)
        if not isinstance(t, type):
            problems.append(f"{name}: a class in the stub, a {type(t).__name__} in ddpc._C")
            continue
        members = stub_members(cls)
        real = {m for m in vars(t) if m not in UNSTATED and m not in CONSTRUCTORS}
        stated = set(members) - set(CONSTRUCTORS)
        if sys.version_info < (3, 12):
            stated -= BUFFER_PROTOCOL
        if stated != real:
            problems.append(f"{name}: members only in the stub {sorted(stated - real)}, "
                            f"only in the type {sorted(real - stated)}")
        for m in sorted(stated & real):
            if stub_kind(members[m]) != real_kind(vars(t)[m]):
                problems.append(f"{name}.{m}: a {stub_kind(members[m])} in the stub, "
                                f"a {real_kind(vars(t)[m])} in the type")
        constructor = next((c for c in CONSTRUCTORS if c in vars(t)), None)
        stub_constructors = [c for c in CONSTRUCTORS if c in members]
        if stub_constructors != ([constructor] if constructor else []):
            problems.append(f"{name}: the type is constructed by {constructor}, the stub declares {stub_constructors}")
        bases = [ast.unparse(b.value if isinstance(b, ast.Subscript) else b) for b in cls.bases] or ["object"]
        real_bases = [b.__name__ for b in t.__bases__]
        if bases != real_bases:
            problems.append(f"{name}: bases {bases} in the stub, {real_bases} in ddpc._C")
        final = "final" in decorators(cls)
        if final != (not t.__flags__ & PY_TPFLAGS_BASETYPE):
            problems.append(f"{name}: {'@final' if final else 'not @final'} in the stub, but the type "
                            f"{'allows' if final else 'refuses'} subclasses")
    assert not problems, "\n".join(problems)


def signatures():
    """(qualified name, stub function, whether bound, the real object) for each
    function, method and constructor the stub declares and this build has."""
    for name, node in stub_top().items():
        if not hasattr(_C, name):
            continue
        if isinstance(node, ast.FunctionDef):
            yield name, node, False, getattr(_C, name)
        elif isinstance(node, ast.ClassDef):
            t = getattr(_C, name)
            for member, fn in stub_members(node).items():
                if member in CONSTRUCTORS:
                    yield name, fn, True, t
                elif member in vars(t) and stub_kind(fn) != "property":
                    yield f"{name}.{member}", fn, True, vars(t)[member]


def test_the_parameters_are_those_the_docstrings_give():
    problems, checked = [], 0
    for qualname, fn, bound, real in signatures():
        doc_name = qualname.rsplit(".", 1)[-1]
        documented = doc_params(doc_name, real.__doc__)
        if documented is None:
            continue
        checked += 1
        stated = as_written(stub_params(fn, bound))
        if stated != documented:
            problems.append(f"{qualname}: the stub has {stated}, the docstring {documented}")
    assert checked, "no docstring opens with a signature"
    assert not problems, "\n".join(problems)


@pytest.fixture(scope="module")
def instances(tmp_path_factory):
    """One object of each class that can be made in one process without a GPU
    (a process group of one rank on a local store, and its work handle)."""
    path = tmp_path_factory.mktemp("stub") / "rows.npy"
    np.save(path, np.arange(6, dtype=np.float32).reshape(3, 2))
    store = _C.Store("127.0.0.1", 0, is_master=True, timeout=5.0)
    group = _C.ProcessGroup(store, "stub/", 0, 1, [0])
    source = _C.Buffer((4, 2))
    loader = _C.Loader([source], [False], np.arange(4), np.array([0, 2, 4]))
    made = {"Buffer": source, "Size": _C.Size((2, 3)), "NpyFile": _C.NpyFile(str(path)), "Loader": loader,
            "Store": store, "ProcessGroup": group, "Work": group.barrier(True)}
    yield made
    made["Work"].wait()
    loader.close()
    group.close()


def test_parameters_are_positional_only_where_the_c_takes_no_keywords(instances):
    """A call with a keyword no function parses is refused before any work:
    with "takes no keyword arguments" where the C takes none, by the C's own
    argument parser otherwise, which names the first required parameter when
    it takes that as a keyword too."""
    problems = []
    for qualname, fn, bound, real in signatures():
        cls, _, member = qualname.rpartition(".")
        if cls:  # a method: called bound to an object of its class
            if cls not in instances:
                continue  # NcclComm and NcclWork need a GPU, SharedBuffer a second rank on this host
            real = getattr(instances[cls], member)
        params = stub_params(fn, bound)
        takes_keywords = any(kind != "positional-only" for _, _, kind in params)
        try:
            real(**{PROBE: None})
        except TypeError as e:
            message = str(e)
        else:
            problems.append(f"{qualname}: accepted the keyword {PROBE}")
            continue
        refused = "takes no keyword arguments" in message
        if refused == takes_keywords:
            problems.append(f"{qualname}: the stub {'takes' if takes_keywords else 'takes no'} keywords, "
                            f"the C {'takes none' if refused else 'does'}")
        missing = re.search(r"missing required argument '(\w+)' \(pos (\d+)\)", message)
        if missing:
            name, pos = missing[1], int(missing[2])
            stated = params[pos - 1] if pos <= len(params) else None
            if stated != (name, False, "positional"):
                problems.append(f"{qualname}: the C's parameter {pos} is {name}, required and a keyword too; "
                                f"the stub's is {stated}")
    assert not problems, "\n".join(problems)


def test_the_dicts_returned_have_the_keys_the_stub_gives(instances):
    typed = {node.name: {item.target.id for item in node.body} for node in STUB.body
             if isinstance(node, ast.ClassDef) and any(ast.unparse(b) == "TypedDict" for b in node.bases)}
    producers = {"_BuildInfo": _C.build_info, "_LoaderStats": instances["Loader"].stats,
                 "_DeviceProperties": lambda: _C.cuda_properties(0), "_MemoryStats": lambda: _C.cuda_memory_stats(0)}
    assert set(producers) == set(typed), f"TypedDicts in the stub {sorted(typed)}, checked here {sorted(producers)}"
    for name, call in producers.items():
        if name in ("_DeviceProperties", "_MemoryStats") and _C.cuda_device_count() == 0:
            continue
        keys = set(call())
        assert keys == typed[name], f"{name}: keys only in the stub {sorted(typed[name] - keys)}, " \
                                    f"only returned {sorted(keys - typed[name])}"
