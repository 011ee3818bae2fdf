"""What the worker's modules share at run time: the script's state and the protocol channel."""

import os
import sys

# The running script's state (set by runner.main() once INIT arrived).
STATE = None
# The protocol channel, for exa.import_script and exa.get_connection (set by runner.main()).
CHANNEL = None
# The current run (a chunks._Run: its row count and the output sent so far).
RUN = None


def worker_files():
    """The file names of the worker's own modules, whose frames tracebacks leave out."""
    files = set()
    for name, module in list(sys.modules.items()):
        if name == "accelsql_worker" or name.startswith("accelsql_worker."):
            f = getattr(module, "__file__", None)
            if f:
                files.add(f)
    return files


def forget_worker_dir():
    """The bootstrap put the directory holding the worker package first on sys.path to import it;
    the script's own imports must not see it."""
    here = globals().get("__file__")
    if here and os.path.isabs(here) and sys.path and sys.path[0] == os.path.dirname(os.path.dirname(here)):
        del sys.path[0]
