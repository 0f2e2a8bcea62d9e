"""The one stdout console of the verbs that print tables (plan, check, ab, status, history, model).

WIDTH columns whatever the terminal (a narrower terminal wraps the lines rather than rich cutting figures short), so
a pipe or a CI log reads the same wherever it ran; colours on a terminal only, no escape codes anywhere else
(whatever FORCE_COLOR says). A reader that goes away (`bench status | head -1`) is handed to bench.cli as a
BrokenPipeError, which ends every verb the same way (exit 141); rich's own answer is exit 1, which reads as "a cell
failed". Imported inside a verb's run(), never at a verb module's top: the parser is built without rich.
"""
from __future__ import annotations

import sys

from rich.console import Console

WIDTH = 120  # the most columns a table line takes, on a terminal or not


class TableConsole(Console):
    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError

    def print_table(self, table) -> None:
        """A rich table without the blanks rich pads every line with to the table's width: none in a pipe or a log."""
        self._print_trimmed(table)

    def say(self, text: str = "", wrap: bool = False) -> None:
        """Plain text as it is (no markup, no highlighting): one line, or (`wrap`) wrapped at the console's width
        with no blank left at the end of a wrapped line."""
        from rich.text import Text

        if wrap:
            self._print_trimmed(Text(text))
        else:
            self.print(Text(text), soft_wrap=True)

    def _print_trimmed(self, renderable) -> None:
        with self.capture() as captured:
            self.print(renderable)
        self.file.write("".join(line.rstrip() + "\n" for line in captured.get().splitlines()))
        self.file.flush()


def stdout_console(file=None) -> TableConsole:
    """The console on stdout (or `file`): colours and rich's terminal handling only where it is a terminal."""
    file = file or sys.stdout
    tty = file.isatty()
    return TableConsole(file=file, width=WIDTH, color_system="auto" if tty else None, force_terminal=tty,
                        highlight=False, emoji=False)
