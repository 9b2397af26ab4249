"""Lab session `secured`: `deploykit lab up --profile secured`, then the tests of this package."""

from tests.lab.conftest import session_fixtures

lab, converged = session_fixtures("secured")
