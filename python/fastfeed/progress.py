"""Progress of long work (build, run, push, sync, validate): live on a terminal, nothing
otherwise.

On a terminal, rich draws on stderr each stage of the work: a bar, the percentage, the amount
done of the total, the rate and the time left, with the stage's own counts beneath. When stderr
is not a terminal nothing is drawn, so that scripts and CI logs get only the summary each
command prints at its end; stdout, where `--json` writes, is never drawn on.

A command makes one `Progress` and hands it down; each stage opens a line with
`stage(progress, ...)` and uses it as a context manager. On leaving it the stage is drawn a last
time with its final counts (at 100% when the work is all done) and stays above what follows.
"""

from __future__ import annotations

import atexit
import sys
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Literal, TextIO

if TYPE_CHECKING:
    import rich.progress
    from rich.progress import TaskID

#: What a stage counts: its bar, amounts and rate are in these.
Unit = Literal["bytes", "records", "files"]
#: The width of a stage's name (`validate`, the longest), so that the bars of stages line up.
DESCRIPTION = 8


class Progress:
    """The live display of one command: its stages' lines, drawn while any is open."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self._stream = stream if stream is not None else sys.stderr
        self.enabled = self._stream.isatty()
        # A build on its thread and a push on the event loop (`fastfeed run`) draw at once.
        self._lock = threading.Lock()
        self._display: rich.progress.Progress | None = None
        self._open = 0

    def stage(self, description: str, total: float | None = None, *, unit: Unit = "bytes") -> Stage:
        """Opens a line for a stage of `total` units (None while unknown: the bar then pulses)."""
        if not self.enabled:
            return Stage(None, None, unit, total)
        with self._lock:
            if self._display is None:
                # Each run of stages gets a display of its own: a stopped one would redraw the
                # lines of the stages before, which are already on the screen.
                self._display = _display(self._stream)
                self._display.start()
                # Whatever ends the process meanwhile (Ctrl-C while a thread still builds),
                # the terminal gets its cursor back.
                atexit.register(self._stop)
            self._open += 1
            task_id = self._display.add_task(description, total=total, unit=unit, detail="")
        return Stage(self, task_id, unit, total)

    def _update(self, task_id: TaskID, completed: float, detail: str, total: float | None) -> None:
        display = self._display
        if display is not None:  # None once stopped at exit
            display.update(task_id, completed=completed, total=total, detail=detail)

    def _close(self, task_id: TaskID) -> None:
        with self._lock:
            if self._display is None:
                return
            self._display.stop_task(task_id)
            self._display.refresh()
            self._open -= 1
            if self._open == 0:
                self._stop_display()

    def _stop(self) -> None:
        with self._lock:
            if self._display is not None:
                self._stop_display()

    def _stop_display(self) -> None:
        assert self._display is not None
        # Stopping draws the lines a last time and leaves them on the screen.
        self._display.stop()
        self._display = None
        self._open = 0
        atexit.unregister(self._stop)


def stage(
    progress: Progress | None, description: str, total: float | None = None, *, unit: Unit = "bytes"
) -> Stage:
    """`progress.stage(...)`, or a line that shows nothing when there is no progress to show."""
    if progress is None:
        return Stage(None, None, unit, None)
    return progress.stage(description, total, unit=unit)


class Stage:
    """One stage's line. `update` is cheap (drawing happens at most every `INTERVAL` seconds),
    and does nothing when the line is not shown: test `live` before making costly details."""

    INTERVAL = 0.1

    def __init__(
        self, owner: Progress | None, task_id: TaskID | None, unit: Unit, total: float | None
    ) -> None:
        self._owner = owner
        self._id = task_id
        self.unit = unit
        self.live = owner is not None
        self._drawn = 0.0
        self._completed = 0.0
        self._total = total
        self._detail = ""

    def update(self, completed: float, detail: str = "", *, total: float | None = None) -> None:
        """Sets the amount done (and the total, once known) and the stage's counts."""
        if self._owner is None or self._id is None:
            return
        self._completed, self._detail = completed, detail
        if total is not None:
            self._total = total
        now = time.monotonic()
        if now - self._drawn >= self.INTERVAL:
            self._drawn = now
            self._owner._update(self._id, completed, detail, self._total)

    def close(self, *, done: bool = True) -> None:
        """Draws the last state given (when `done` and the total was never known, it is all
        there was: the bar is then full) and stops the line's clock."""
        owner, self._owner = self._owner, None
        if owner is None or self._id is None:
            return
        total = self._completed if done and self._total is None else self._total
        owner._update(self._id, self._completed, self._detail, total)
        owner._close(self._id)

    def __enter__(self) -> Stage:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc_info: object) -> None:
        self.close(done=exc_type is None)


def _display(stream: TextIO) -> rich.progress.Progress:
    """rich's display, with amounts in fastfeed's own formats (`human_bytes`, separators)."""
    # rich costs a tenth of fastfeed's start-up: only loaded when something is drawn.
    from rich.console import Console, RenderableType
    from rich.progress import BarColumn, ProgressColumn, TaskProgressColumn, TextColumn
    from rich.progress import Progress as Display
    from rich.progress import Task as Line
    from rich.table import Column
    from rich.text import Text

    def amount(n: float, unit: str) -> str:
        return human_bytes(n) if unit == "bytes" else f"{n:,.0f}"

    def rate(line: Line) -> float | None:
        # A stopped line shows the rate over its whole time, not over its last seconds.
        if line.stop_time is not None:
            return line.completed / line.elapsed if line.elapsed else None
        return line.speed

    class Amount(ProgressColumn):
        def render(self, task: Line) -> Text:
            unit = task.fields["unit"]
            text = amount(task.completed, unit)
            if task.total is not None:
                text += "/" + amount(task.total, unit)
            return Text(text if unit == "bytes" else f"{text} {unit}", style="progress.download")

    class Rate(ProgressColumn):
        def render(self, task: Line) -> Text:
            speed, unit = rate(task), task.fields["unit"]
            if speed is None:
                return Text("")
            per = "/s" if unit == "bytes" else f" {unit}/s"
            return Text(amount(speed, unit) + per, style="progress.data.speed")

    class Time(ProgressColumn):
        """The time left while running; once stopped, the time it took."""

        def render(self, task: Line) -> Text:
            if task.stop_time is not None:
                seconds, style = task.elapsed or 0.0, "progress.elapsed"
            else:
                left = task.time_remaining
                if left is None:
                    return Text("")
                seconds, style = left, "progress.remaining"
            minutes, secs = divmod(int(seconds), 60)
            hours, minutes = divmod(minutes, 60)
            when = "in" if task.stop_time is not None else "ETA"
            return Text(f"{when} {hours}:{minutes:02d}:{secs:02d}", style=style)

    class Stages(Display):
        """Each stage as its bar's line, then its counts' line, cut to the terminal's width:
        on one line, 80 columns would cut the counts, which say the most."""

        def get_renderables(self) -> Iterable[RenderableType]:
            for line in self.tasks:
                yield self.make_tasks_table([line])
                yield Text(
                    f"{'':{DESCRIPTION}} {line.fields['detail']}", no_wrap=True, overflow="ellipsis"
                )

    def fixed(width: int | None = None) -> Column:
        return Column(no_wrap=True, width=width)

    return Stages(
        TextColumn(
            "{task.description}", markup=False, style="bold", table_column=fixed(DESCRIPTION)
        ),
        BarColumn(bar_width=24, table_column=fixed()),
        TaskProgressColumn(table_column=fixed()),
        Amount(table_column=fixed()),
        Rate(table_column=fixed()),
        Time(table_column=fixed()),
        console=Console(file=stream),
        # What is printed to stderr meanwhile (warnings) goes above the lines; stdout is
        # left alone, for --json.
        redirect_stdout=False,
        redirect_stderr=True,
        refresh_per_second=4,
        speed_estimate_period=15,
    )


def plural(n: int, noun: str, nouns: str | None = None) -> str:
    """`1 file`, `2 files`, `1,000 records`, `1 retry`: the numbers a summary shows (`nouns`
    for a plural not made with s)."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {nouns or noun + 's'}"


def human_bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError("unreachable")
