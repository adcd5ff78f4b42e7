"""One row per check: what was checked, PASS or FAIL, and the evidence in a few words."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field


@dataclass
class Check:
    name: str                  # "flags: 10_beyond"
    passed: bool
    detail: str                # one line: what holds, or what does not
    notes: list[str] = field(default_factory=list)   # printed under the table

    @property
    def result(self) -> str:
        return "PASS" if self.passed else "FAIL"


def failed(name: str, error: BaseException | str) -> Check:
    """A check that could not run counts as failed, with the reason."""
    return Check(name, False, f"could not run: {error}")


def table(checks: list[Check], width: int = 100) -> str:
    """The checks as a text table; long details wrap inside their column."""
    name_w = max(len("check"), *(len(c.name) for c in checks))
    detail_w = max(30, width - name_w - 10)
    lines = [f"{'check':<{name_w}}  result  detail", f"{'-' * name_w}  ------  {'-' * detail_w}"]
    for c in checks:
        wrapped = textwrap.wrap(c.detail, detail_w) or [""]
        lines.append(f"{c.name:<{name_w}}  {c.result:<6}  {wrapped[0]}")
        lines += [f"{'':<{name_w}}  {'':<6}  {more}" for more in wrapped[1:]]
    return "\n".join(lines)
