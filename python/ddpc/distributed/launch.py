"""ddpc.distributed.launch: torch.distributed.launch's command line (deprecated
there, as here) over ddpc-run. Unless ``--use-env`` is given, each worker's
arguments start with ``--local-rank=<its local rank>``, as that launcher
passed it; LOCAL_RANK is set either way. Use ddpc-run instead."""

import sys
import warnings

from ..run import get_args_parser, parse_args, run

__all__ = ["main", "parse_args"]


def main(args=None):
    warnings.warn("ddpc.distributed.launch is deprecated, as torch.distributed.launch is: use ddpc-run (or python -m "
                  "ddpc.distributed.run), which passes no --local-rank; read os.environ['LOCAL_RANK'] instead",
                  FutureWarning, stacklevel=2)
    parser = get_args_parser()
    parser.prog = "python -m ddpc.distributed.launch"
    parser.add_argument("--use-env", "--use_env", action="store_true",
                        help="don't pass --local-rank to the script (LOCAL_RANK is set either way)")
    a = parse_args(sys.argv[1:] if args is None else args, parser)
    if a.no_python and not a.use_env:
        parser.error("--no-python needs --use-env")
    a.pass_local_rank = not a.use_env
    return run(a)


if __name__ == "__main__":
    sys.exit(main())
