"""Lab session `core`: `deploykit lab up --profile serving`, then the tests of this package."""

from tests.lab.conftest import session_fixtures

lab, converged = session_fixtures("serving")
