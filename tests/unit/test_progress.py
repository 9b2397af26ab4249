"""Progress lines from ansible-runner's events: what a CI log shows during a converge."""

from deploy_kit.ansible.progress import diff_text, line, result_of


def _event(kind: str, **data: object) -> dict[str, object]:
    return {"event": kind, "event_data": data}


def test_each_task_result_is_one_line_naming_status_host_and_task() -> None:
    assert line(_event("playbook_on_play_start", play="Serving tier")) == "PLAY Serving tier"
    ok = _event("runner_on_ok", host="lab3", role="vllm", task="Write the unit",
                res={"changed": True})
    assert line(ok) == "changed     lab3 | vllm : Write the unit"
    assert result_of(_event("runner_on_ok", host="h", task="t", res={})) == ("ok", "h", "t")
    ignored = _event("runner_on_failed", host="h", task="t", ignore_errors=True, res={})
    assert result_of(ignored) == ("ignored", "h", "t")
    assert result_of(_event("runner_on_unreachable", host="h", task="t"))[0] == "unreachable"
    assert line(_event("playbook_on_task_start", task="t")) is None


def test_diff_text_is_ansibles_own_rendering_only_when_there_is_a_diff() -> None:
    with_diff = {**_event("runner_on_ok", res={"diff": [{"before": "a", "after": "b"}]}),
                 "stdout": "--- before\n+++ after\n-a\n+b"}
    assert diff_text(with_diff) == "--- before\n+++ after\n-a\n+b"
    assert diff_text({**_event("runner_on_ok", res={"diff": []}), "stdout": "ok: [h]"}) is None
