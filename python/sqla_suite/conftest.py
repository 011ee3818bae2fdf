"""SQLAlchemy's own dialect compliance suite (``sqlalchemy.testing.suite``) against the
``accelsql://`` dialect: run by ``run.py`` (the test command), which reports the counts."""

import pytest
from sqlalchemy.dialects import registry

registry.register("accelsql", "accelsql.sqlalchemy", "AccelsqlDialect")
pytest.register_assert_rewrite("sqlalchemy.testing.assertions")

from sqlalchemy.testing.plugin.pytestplugin import *  # noqa: E402,F401,F403
