from pathlib import Path

from deploy_kit.ansible.command import RunRequest, playbook_argv
from deploy_kit.ansible.events import RunRecord, redact


def test_argv_carries_every_flag_and_vars_only_as_files() -> None:
    request = RunRequest(verb="up", playbook=Path("/p/site.yml"), inventory=Path("/i/lab"),
                         limit="rgw", tags=("coredns_configure", "ceph_rgw_service"),
                         skip_tags=("vllm_install",), check=True, diff=True,
                         extra_vars_files=(Path("/tmp/x.json"),),
                         vault_args=("--vault-id", "prod@/v/pw"), verbosity=2)
    assert playbook_argv(request) == [
        "ansible-playbook", "-i", "/i/lab", "/p/site.yml", "--limit", "rgw", "--tags",
        "coredns_configure,ceph_rgw_service", "--skip-tags", "vllm_install", "--check",
        "--diff", "-e", "@/tmp/x.json", "--vault-id", "prod@/v/pw", "-vv"]


def test_events_give_stats_failures_and_hide_secrets() -> None:
    record = RunRecord()
    record.consume({"event": "playbook_on_play_start", "event_data": {"play": "Storage"}})
    record.consume({"event": "runner_on_failed", "event_data": {
        "host": "lab1", "task": "Loop", "res": {"msg": "One or more items failed", "results": [
            {"failed": True, "msg": "secret_key=abcdefghijklmnop broke"}, {"failed": False}]}}})
    record.consume({"event": "runner_on_failed", "event_data": {
        "host": "lab2", "task": "Keys", "res": {"_ansible_no_log": True, "msg": "x"}}})
    record.consume({"event": "runner_on_ok", "event_data": {
        "host": "lab1", "task": "Write", "res": {"changed": True}}})
    record.consume({"event": "playbook_on_stats", "event_data": {
        "ok": {"lab1": 3}, "changed": {"lab1": 1}, "failures": {"lab1": 1, "lab2": 1},
        "dark": {}}})
    assert record.hosts["lab1"].changed == 1 and record.hosts["lab2"].failed == 1
    assert record.total_changed == 1 and record.changed_tasks == [("lab1", "Write")]
    first, second = record.failed
    assert "abcdefghijklmnop" not in first.message and "secret_key=********" in first.message
    assert "hidden" in second.message


def test_a_no_log_task_that_changed_is_still_named() -> None:
    """ansible-runner censors a no_log result whole, `changed` included: the line Ansible
    printed still says so (Consul's maintenance calls under ACLs are no_log)."""
    record = RunRecord()
    censored = {"censored": "the output has been hidden due to the fact that 'no_log: true' "
                            "was specified for this result"}
    record.consume({"event": "runner_on_ok", "stdout": "\x1b[0;33mchanged: [lab1]\x1b[0m",
                    "event_data": {"host": "lab1", "task": "Take this host out of DNS",
                                   "res": censored}})
    record.consume({"event": "runner_on_ok", "stdout": "ok: [lab2]",
                    "event_data": {"host": "lab2", "task": "Read a token", "res": censored}})
    assert record.changed_tasks == [("lab1", "Take this host out of DNS")]


def test_redact_masks_cephx_keys_and_known_values() -> None:
    text = "key = AQBq4W1nAAAAABAAyqjM5zGQ0d2d2wNbqL2c+Q== and token: TOPSECRET123"
    out = redact(text, ("TOPSECRET123",))
    assert "AQBq4W1n" not in out and "TOPSECRET123" not in out


def test_task_wall_time_is_summed_per_task_name() -> None:
    record = RunRecord()
    events = [("playbook_on_play_start", "00.0", {}),
              ("playbook_on_task_start", "01.0", {"task": "Write", "role": "coredns"}),
              ("playbook_on_task_start", "03.5", {"task": "Start"}),
              ("playbook_on_task_start", "04.0", {"task": "Write", "role": "coredns"}),
              ("playbook_on_stats", "05.0", {})]
    for kind, second, data in events:
        record.consume({"event": kind, "created": f"2026-12-03T07:00:{second}",
                        "event_data": data})
    assert record.task_seconds == {"coredns : Write": 3.5, "Start": 0.5}
    assert record.slowest(1) == [("coredns : Write", 3.5)]


def test_each_hosts_comparison_with_its_converge_record_is_kept() -> None:
    def ok(host: str, result: dict) -> dict:
        return {"event": "runner_on_ok", "event_data": {
            "host": host, "task_action": "deploykit.kvcache.deploykit_converged", "res": result}}

    record = RunRecord()
    record.consume(ok("lab1", {"state": "check", "converged": False, "changed": False,
                               "reasons": ["/etc/haproxy/haproxy.cfg changed"]}))
    record.consume(ok("lab2", {"state": "check", "converged": True, "reasons": []}))
    record.consume(ok("lab1", {"state": "record", "converged": True, "reasons": []}))
    assert record.converge_records == {"lab1": ["/etc/haproxy/haproxy.cfg changed"],
                                       "lab2": []}
    assert record.changed_tasks == []
