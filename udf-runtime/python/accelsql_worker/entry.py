"""The worker process's entry point: a fork server or a worker, by its arguments."""

import os
import sys

from .fork_server import FORK_SERVER_ARG, _serve_forks
from .runner import main


def _end_descendants():
    """Kills every process this worker started, before it exits: children that left its process
    group, and the orphans it adopted as their subreaper (a double fork), end with it."""
    import signal
    import time

    for _ in range(8):
        found = []
        todo = [os.getpid()]
        while todo and len(found) < 4096:
            pid = todo.pop()
            try:
                tasks = os.listdir("/proc/%d/task" % pid)
            except OSError:
                continue
            for tid in tasks:
                try:
                    with open("/proc/%d/task/%s/children" % (pid, tid)) as f:
                        kids = [int(k) for k in f.read().split()]
                except (OSError, ValueError):
                    continue
                for kid in kids:
                    if kid not in found:
                        found.append(kid)
                        todo.append(kid)
        if not found:
            return
        for kid in found:
            try:
                os.kill(kid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.005)


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
        _end_descendants()
        os._exit(70)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except Exception:
        pass
    _end_descendants()
    os._exit(0)

