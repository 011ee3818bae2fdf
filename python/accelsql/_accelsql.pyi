"""Type stubs of accelsql._accelsql, the native half of the package (public names are re-exported by accelsql)."""

from typing import Any, Callable, List, Optional, Tuple, final

import pyarrow as pa

__all__ = ["NativeConnection", "UdfContext", "AccelsqlError", "__version__"]

__version__: str

class AccelsqlError(Exception):
    """An error of the accelsql engine; str(e) is '[code] message'."""

    code: str
    """The stable code, e.g. '22069' (two GPU-required calls in one select), '42000' (SQL)."""
    message: str
    """The message, without the code."""

@final
class UdfContext:
    """The instance a registered callable runs on (its ``ctx`` keyword argument)."""

    instance_id: int
    """Instance number within the call, 0..instances."""
    node_id: int
    """Node number (iproc()); 0 on a single node."""
    statement_id: int
    """The statement's id."""
    num_rows: int
    """Rows in this batch: the length the result must have."""
    placement: str
    """'GPU' when the instance is pinned to a device, else 'CPU'."""
    device_index: Optional[int]
    """The pinned device's index, or None on the CPU."""
    device_uuid: Optional[str]
    """The pinned device's UUID, or None on the CPU."""
    device_name: Optional[str]
    """The pinned device's product name, or None on the CPU."""
    simulated: bool
    """Whether the pinned device is simulated (no CUDA behind it)."""
    cuda_visible_devices: str
    """What a script worker of this instance gets as CUDA_VISIBLE_DEVICES: the UUID (the index
    of a simulated device), or '' on the CPU."""

@final
class NativeConnection:
    """A session on the engine this process shares for (simulated_gpus, data_dir); wrapped by accelsql.Connection."""

    def __new__(
        cls, simulated_gpus: Optional[int] = None, data_dir: Optional[str] = None, user: Optional[str] = None
    ) -> "NativeConnection":
        """Opens a session on the shared engine (created on first use): SYS's, or catalog user ``user``'s
        (AccelsqlError 42704 when there is none, 42501 when it lacks CREATE SESSION)."""
    def query(self, sql: str, params: Optional[pa.RecordBatch] = None) -> Tuple[pa.Table, bool]:
        """Runs sql with the GIL released; the last statement's result and whether it is DML.
        params: a one-row batch with the values of the placeholders $1, $2, ..."""
    def cancel(self) -> None:
        """Cancels the statement running now on this connection (from another thread), if any:
        it stops with AccelsqlError 57014."""
    def import_arrow(self, data: Any, table: str) -> int:
        """Loads an Arrow stream into table (created when missing, else appended); rows loaded."""
    def register_udf(
        self,
        func: Callable[..., Any],
        name: str,
        inputs: List[Any],
        returns: Any,
        accelerator: str,
        vectorized: bool,
        instance_limit: Optional[int],
        pass_ctx: bool,
    ) -> None:
        """Registers func as a scalar UDF of this session."""
    def restrict(self) -> None:
        """Restricts the session for untrusted SQL, for good."""
    @property
    def restricted(self) -> bool:
        """Whether the session is restricted."""
    def close(self) -> None:
        """Ends the session."""
    @property
    def closed(self) -> bool:
        """Whether close() was called."""
    @property
    def gpu_count(self) -> int:
        """GPUs of the engine."""
