"""What the engine has, for SQLAlchemy's compliance suite: no schemas made by the suite, no
foreign keys, primary key/index/constraint reflection, sequences, RETURNING, temporary tables,
comments, savepoints or transactions (each statement commits)."""

from sqlalchemy.testing.requirements import SuiteRequirements
from sqlalchemy.testing import exclusions

class Requirements(SuiteRequirements):
    """The suite's requirements the engine does not meet are closed; the rest are SQLAlchemy's defaults."""

    @property
    def schemas(self): return exclusions.closed()
    @property
    def foreign_keys(self): return exclusions.closed()
    @property
    def primary_key_constraint_reflection(self): return exclusions.closed()
    @property
    def index_reflection(self): return exclusions.closed()
    @property
    def unique_constraint_reflection(self): return exclusions.closed()
    @property
    def sequences(self): return exclusions.closed()
    @property
    def returning(self): return exclusions.closed()
    @property
    def insert_returning(self): return exclusions.closed()
    @property
    def autoincrement_insert(self): return exclusions.closed()
    @property
    def temp_table_reflection(self): return exclusions.closed()
    @property
    def temporary_tables(self): return exclusions.closed()
    @property
    def comment_reflection(self): return exclusions.closed()
    @property
    def savepoints(self): return exclusions.closed()
    @property
    def two_phase_transactions(self): return exclusions.closed()
    @property
    def autocommit(self): return exclusions.open()
    @property
    def isolation_level(self): return exclusions.closed()
    @property
    def views(self): return exclusions.open()
    @property
    def check_constraint_reflection(self): return exclusions.closed()
    @property
    def unique_constraints_reflect_as_index(self): return exclusions.closed()
    @property
    def reflects_pk_names(self): return exclusions.closed()
    @property
    def self_referential_foreign_keys(self): return exclusions.closed()
    @property
    def foreign_key_constraint_reflection(self): return exclusions.closed()
    @property
    def table_ddl_if_exists(self): return exclusions.open()
