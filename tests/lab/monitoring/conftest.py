"""Lab session `monitoring`: `deploykit lab up --profile monitoring`, then the tests of this
package (the monitoring's proof: a real Prometheus on lab1 scrapes every job, fires alerts)."""

from tests.lab.conftest import session_fixtures

lab, converged = session_fixtures("monitoring")
