"""ddpc.distributed.run: ddpc-run under torch.distributed.run's name, so that
``python -m ddpc.distributed.run ...`` and ``from ddpc.distributed.run import
main`` work as they do with torchrun's module (``main`` returns the exit
status instead of raising on a failure)."""

import sys

from ..run import get_args_parser, main, parse_args

__all__ = ["get_args_parser", "main", "parse_args"]

if __name__ == "__main__":
    sys.exit(main())
