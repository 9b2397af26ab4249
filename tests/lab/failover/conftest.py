"""Lab session `failover`: `deploykit lab up --profile plain`, then the tests of this package."""

from tests.lab.conftest import session_fixtures

lab, converged = session_fixtures("plain")
