"""The exception classes of ddpc's argument errors: each misuse in
error_cases.py raises an instance of the builtin class PyTorch raises for
it (RuntimeError for most op errors), and ddpc's classes are also the
ValueError, TypeError or IndexError a Python library raises, and pickle
(DataLoader workers send them to the parent)."""

import pickle

import pytest
from error_cases import CASES

import ddpc


@pytest.mark.filterwarnings("ignore:Using a target size")  # mse_shapes warns, as PyTorch does, before it fails
@pytest.mark.parametrize("name", sorted(CASES))
def test_raises_what_pytorch_raises(name):
    fn, expected = CASES[name]
    with pytest.raises(expected):
        fn(ddpc)


@pytest.mark.parametrize("cls, bases", [
    (ddpc.ArgumentError, (ValueError, RuntimeError)),
    (ddpc.IndexOutOfRangeError, (ddpc.ArgumentError, IndexError, ValueError, RuntimeError)),
    (ddpc.DtypeError, (TypeError, RuntimeError)),
])
def test_classes(cls, bases):
    assert all(issubclass(cls, b) for b in bases)
    again = pickle.loads(pickle.dumps(cls("why")))
    assert type(again) is cls and str(again) == "why"


def test_c_and_python_errors_use_the_classes():
    with pytest.raises(ddpc.ArgumentError, match="do not broadcast"):
        ddpc.ones(2, 3) + ddpc.ones(4, 5)
    with pytest.raises(ddpc.ArgumentError, match="negative dimension"):
        ddpc.zeros(-1)  # C: the buffer's shape
    with pytest.raises(ddpc.IndexOutOfRangeError, match="out of range"):
        ddpc.nn.functional.embedding(ddpc.tensor([3]), ddpc.ones(3, 2))  # C: the row gather
    with pytest.raises(ddpc.DtypeError):
        ddpc.mm(ddpc.ones(2, 2), ddpc.ones(2, 2, dtype=ddpc.float64))


def test_an_unknown_device_string_is_named_as_a_device():
    with pytest.raises(ddpc.ArgumentError, match="invalid device 'tpu'"):
        ddpc.ones(2).to("tpu")
    assert ddpc.ones(2).to("float64").dtype is ddpc.float64  # ddpc also takes dtype names
