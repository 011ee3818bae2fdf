"""The worker process's entry point: a fork server or a worker, by its arguments."""

import os
import sys

from .fork_server import FORK_SERVER_ARG, _serve_forks
from .runner import main


def start():
    """Runs the fork server (argv[1] is '--accelsql-fork-server') or a worker; never returns."""
    if sys.argv[1:2] == [FORK_SERVER_ARG]:
        del sys.argv[1]
        try:
            _serve_forks()
        except BaseException:
            import traceback

            sys.stderr.write("accelsql fork server: internal error\n")
            traceback.print_exc()
            sys.stderr.flush()
            os._exit(70)
    try:
        main()
    except BaseException:  # a bug of this worker, not of the script: say so on stderr
        import traceback

        sys.stderr.write("accelsql worker: internal error\n")
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(70)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    os._exit(0)

