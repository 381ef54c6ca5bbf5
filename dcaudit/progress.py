"""Progress display for long downloads, usable from any layer (it needs only rich).

The bar writes to stderr and disappears when the download ends (``transient``), so logs keep only
the result lines.
"""

from __future__ import annotations

from rich.console import Console


class StderrConsole(Console):
    """A rich console on stderr that falls silent when stderr is a closed pipe (``dcaudit run … 2>&1 | head``):
    rich's default ends the process from inside the run, which recorded a good run as failed.

    Printed text is not highlighted (rich colours numbers, paths and the like by default): the messages
    carry their own markup, and the highlighter's first use compiles its patterns (~6 ms of every command)."""

    def __init__(self, **options: object) -> None:
        options.setdefault("highlight", False)
        super().__init__(stderr=True, **options)  # type: ignore[arg-type]

    def on_broken_pipe(self) -> None:
        self.quiet = True  # stop writing; the run goes on and is recorded as it ends


_console = StderrConsole()


class DownloadProgress:
    """A rich progress bar with the interface pooch's HTTPDownloader expects (total, update, reset, close)."""

    def __init__(self, name: str) -> None:
        # imported here: only a download shows a bar (rich.progress is ~5 ms of every command's start)
        from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

        self._progress = Progress(TextColumn(name), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                                  console=_console, transient=True)
        self._task = self._progress.add_task(name, total=None)
        self._progress.start()
        self.total: int | None = None

    def update(self, n: int) -> None:
        self._progress.update(self._task, advance=n, total=self.total)

    def reset(self) -> None:
        self._progress.reset(self._task, total=self.total)

    def close(self) -> None:
        self._progress.stop()
