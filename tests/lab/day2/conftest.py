"""Lab session `day2`: `deploykit lab up --profile serving`, one converge, then what operators
do every week after that, each under load (tests/lab/load.py): status, removing and adding a
host, rotating secrets, a breaker that heals itself. `make test-lab` runs it."""

from tests.lab.conftest import session_fixtures

lab, converged = session_fixtures("serving")
