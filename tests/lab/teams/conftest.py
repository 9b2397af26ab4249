"""Lab session `teams`: `deploykit lab up --profile teams` (two teams on one model, lab3
alpha's and lab4 beta's, KV encrypted at rest), then the tests of this package."""

from tests.lab.conftest import session_fixtures

lab, converged = session_fixtures("teams")
