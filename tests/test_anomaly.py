"""Anomaly detection: with it on, a NaN gradient or a failing backward names
its node and shows the forward line that made it; off, backward is as before."""

import math
import warnings

import pytest

import ddpc
from ddpc import autograd


def nan_backward():
    x = ddpc.zeros(2, dtype=ddpc.float64, requires_grad=True)
    y = x.sqrt()  # forward line the warning must point at
    (y * 0).sum().backward()  # sqrt's gradient at 0 times 0: 0 / 0
    return x


def test_nan_gradient_raises_naming_the_node_and_its_forward_line():
    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        mode = autograd.detect_anomaly()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with mode, pytest.raises(RuntimeError, match=r"Function 'SqrtBackward\w*' returned nan values in its 0th"):
            nan_backward()
    trace = [str(w.message) for w in caught if "Error detected in" in str(w.message)]
    assert len(trace) == 1 and trace[0].rstrip().endswith("y = x.sqrt()  # forward line the warning must point at")
    assert not ddpc.is_anomaly_enabled()
    assert math.isnan(nan_backward().grad[0].item())  # off again: no check


def test_check_nan_off_and_set_forms_restore_the_mode():
    with autograd.set_detect_anomaly(True, check_nan=False):
        assert ddpc.is_anomaly_enabled() and not ddpc.is_anomaly_check_nan_enabled()
        assert math.isnan(nan_backward().grad[0].item())
    assert not ddpc.is_anomaly_enabled() and ddpc.is_anomaly_check_nan_enabled()
    ddpc.set_anomaly_enabled(True)
    try:
        with pytest.raises(RuntimeError, match="returned nan"), pytest.warns(UserWarning, match="Error detected"):
            nan_backward()
    finally:
        ddpc.set_anomaly_enabled(False)
    assert not ddpc.is_anomaly_enabled()


def test_a_failing_custom_backward_shows_where_its_forward_ran():
    class Broken(autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            raise ValueError("broken backward")

    def run():
        x = ddpc.ones(3, requires_grad=True)
        Broken.apply(x).sum().backward()  # the call that made the node

    with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
        run = autograd.detect_anomaly()(run)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="broken backward"):
            run()
    trace = [str(w.message) for w in caught if "Error detected in" in str(w.message)]
    assert len(trace) == 1
    assert trace[0].rstrip().endswith("Broken.apply(x).sum().backward()  # the call that made the node")
