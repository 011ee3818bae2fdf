"""SQLAlchemy's dialect compliance suite, as published."""

from sqlalchemy.testing.suite import *  # noqa: F401,F403
