"""The accelsql Python UDF worker: one process per UDF instance (a package of small modules).

The engine starts it (embedded in the accelsql binary) with a socket as fd 0 and speaks the framed
protocol described in udf-runtime/src/script/wire.rs: INIT (script, metadata, body) -> READY, then
RUN (one batch of rows, or one SET group, as columns) -> RESULT (the output columns), and at the
end FINISH -> DONE. Errors travel back as ERROR frames. The user's script sees Exasol's UDF API
(run(ctx), cleanup(), ctx.<col>, ctx[i], next/reset/size/emit/get_dataframe, exa.meta) plus our
vectorized run_batch(ctx).

Only the standard library of CPython >= 3.8 is needed; pandas is imported for get_dataframe() and
emit(DataFrame), numpy (when importable) for run_batch() columns.

Modules: wire (framing and protocol constants), values (the columnar codec between wire bytes and
Python values), exa (exa, exa.meta and the names a script sees without import), context (the ctx
objects), ctx_base (what errors needs to know of ctx), errors (exception reports), chunks (a run's
rows and output in chunks), single_call (functions called once), runner (the INIT/RUN/FINISH
loop), fork_server (warm worker starts), state (what the modules share), entry (the process entry
point). The bootstrap runs `from accelsql_worker.entry import start; start()`.
"""
