"""``ddpc.distributed.elastic.multiprocessing.errors.record``, torchelastic's
decorator for a worker's entry point: an exception that escapes it is
written, in torchelastic's JSON form, to the file that
TORCHELASTIC_ERROR_FILE names (ddpc-run gives each worker one and reports
the first recorded error as the failure's cause), then raised on."""

import functools
import json
import os
import time
import traceback


def _write_error_file(e):
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    data = {"message": {"message": f"{type(e).__name__}: {e}",
                        "extraInfo": {"py_callstack": traceback.format_exc(), "timestamp": str(int(time.time()))}}}
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except OSError:  # the report is a courtesy: the exception itself still propagates
        pass


def record(fn=None, error_handler=None):
    """Decorates ``fn`` (``@record`` or ``@record()``): an exception from it is
    recorded (by ``error_handler.record_exception(e)`` when given) and raised
    on; ``sys.exit`` passes through unrecorded, as in torchelastic."""
    def decorate(f):
        @functools.wraps(f)
        def wrapper(*args, **kwargs):
            try:
                return f(*args, **kwargs)
            except Exception as e:
                if error_handler is not None:
                    error_handler.record_exception(e)
                else:
                    _write_error_file(e)
                raise

        return wrapper

    return decorate(fn) if fn is not None else decorate


def read_error_file(path):
    """The message of a recorded error file, or None where there is none (or it cannot be read)."""
    try:
        with open(path) as f:
            return json.load(f)["message"]["message"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
