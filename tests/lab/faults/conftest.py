"""Lab session `faults`: `deploykit lab up --profile serving`, then faults and maintenance a
site meets after its first converge (injected config, DNS and service faults repaired by `up`,
a stopped vLLM, a tripped LMCache breaker, an INI inventory, two overlapping `up`s, a roll of
every gateway under load). They ran in `tests/lab/core`; they prove Day-1 repairs that do
not need every landing, so `make test-lab` runs them, in the order they had there."""

from tests.lab.conftest import session_fixtures

lab, converged = session_fixtures("serving")
