"""Findings as a rich table (grouped by area), JSON, and JUnit XML; the exit decision."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from deploy_kit.verify.model import CHECKS, Finding, Status

STYLE = {Status.PASS: "green", Status.FAIL: "red", Status.WARN: "yellow", Status.SKIP: "dim",
         Status.INFO: "cyan"}


def area(finding: Finding) -> str:
    check = CHECKS.get(finding.check)
    return check.tags[0] if check else finding.check.split("-")[0]


def failed(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.status == Status.FAIL]


def show(findings: list[Finding], console: Console, verbose: bool = False) -> None:
    groups: dict[str, list[Finding]] = defaultdict(list)
    for f in findings:
        groups[area(f)].append(f)
    for name in sorted(groups):
        table = Table(title=name.upper(), title_justify="left", show_lines=False)
        for col in ("status", "check", "target", "message"):
            table.add_column(col, overflow="fold")
        for f in groups[name]:
            if f.status in (Status.PASS, Status.INFO) and not verbose:
                continue
            msg = escape(f.message) + (f"\n[dim]→ {escape(f.hint)}[/]" if f.hint and
                                       f.status in (Status.FAIL, Status.WARN) else "")
            table.add_row(f"[{STYLE[f.status]}]{f.status.value}[/]", f.check,
                          escape(f.target), msg)
        if table.row_count:
            console.print(table)
    counts = {s: sum(1 for f in findings if f.status == s) for s in Status}
    console.print(" ".join(f"[{STYLE[s]}]{counts[s]} {s.value}[/]" for s in Status))


def to_json(findings: list[Finding], site: str) -> str:
    from deploy_kit.core.envelope import dumps

    return dumps("verify", 1, site, {"findings": [asdict(f) for f in findings],
                                     "failed": len(failed(findings))})


def write_junit(findings: list[Finding], path: Path) -> None:
    suite = ET.Element("testsuite", name="deploykit-verify", tests=str(len(findings)),
                       failures=str(len(failed(findings))),
                       skipped=str(sum(1 for f in findings if f.status == Status.SKIP)))
    for f in findings:
        case = ET.SubElement(suite, "testcase", classname=f"{area(f)}.{f.check}", name=f.target)
        if f.status == Status.FAIL:
            ET.SubElement(case, "failure", message=f.message).text = f.hint
        elif f.status == Status.SKIP:
            ET.SubElement(case, "skipped", message=f.message)
        else:
            ET.SubElement(case, "system-out").text = f"{f.status.value}: {f.message}"
    ET.ElementTree(suite).write(path, encoding="unicode", xml_declaration=True)
