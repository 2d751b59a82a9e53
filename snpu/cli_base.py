"""What every ``snpu`` command shares: the command group, one-line errors, core-parameter
options, output checks and progress bars.

Every user error is printed as one line (``error: ...``) with exit status 1; usage errors
exit with status 2.  Anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import sys

import click

from .config import CoreConfig
from .errors import SnpuError


def _load_config(path: str | None, **overrides) -> CoreConfig:
    cfg = CoreConfig.load(path) if path else CoreConfig()
    changes = {k: v for k, v in overrides.items() if v is not None}
    return CoreConfig.from_dict({**cfg.to_dict(), **changes}) if changes else cfg


def _config_options(f):
    """Options that override single core parameters (``--lanes 16`` ...)."""
    for name in reversed(("lanes", "nbuf_bytes", "nidx_bytes", "wbuf_bytes", "widx_bytes",
                          "acc_words", "obuf_bytes", "param_rows", "vx_lanes", "queue_depth",
                          "token_depth", "icache_lines", "local_bytes", "axi_data_bits")):
        f = click.option(f"--{name.replace('_', '-')}", name, type=int, default=None,
                         help=f"Core parameter {name} (overrides --core).")(f)
    return click.option("--core", "core", type=click.Path(exists=True, dir_okay=False),
                        help="Core configuration JSON (default: the standard core).")(f)


def _force_option(f):
    return click.option("--force", is_flag=True,
                        help="Replace the output even if it is not a previous snpu output.")(f)


def _output(path, kind: str, option: str = "-o", *, inputs=(), force: bool = False):
    """Refuse an output path that would replace anything but a previous snpu output."""
    from .outputs import check_output

    return check_output(path, kind, option=option, inputs=inputs, force=force)


class _Group(click.Group):
    """The ``snpu`` group: every error, ours or a usage error found by click, is one line
    on stderr (``error: ...``); exit status 1 for errors, 2 for usage errors."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            rv = super().main(args, prog_name, complete_var, False, **extra)
        except click.exceptions.Abort:
            click.echo("error: aborted", err=True)
            sys.exit(1)
        except click.ClickException as e:
            where = f"{e.ctx.command_path}: " if getattr(e, "ctx", None) is not None else ""
            msg = " ".join(e.format_message().split())
            hint = " (see --help)" if isinstance(e, click.UsageError) else ""
            click.echo(f"error: {where}{msg}{hint}", err=True)
            sys.exit(e.exit_code)
        except SnpuError as e:
            click.echo(f"error: {' '.join(str(e).splitlines())}", err=True)
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="snpu")
def main() -> None:
    """snpu: sparse neural processing unit: assembler, golden model, RTL and compiler."""


# ------------------------------------------------------------------------------------------


class _progress:
    """A rich progress bar for long work, silent when stderr is not a terminal."""

    def __init__(self, what: str, total: int):
        self.what, self.total = what, total
        self._bar = None

    def __enter__(self):
        if sys.stderr.isatty() and self.total < 0:  # steps reported as (done, total, name)
            from rich.progress import Progress

            self._bar = Progress(transient=True)
            self._bar.start()
            task = self._bar.add_task(self.what, total=None)

            def tick(done, total, name=""):
                self._bar.update(task, completed=done, total=total,
                                 description=f"{self.what}: {name}" if name else self.what)
            return tick
        if sys.stderr.isatty() and self.total == 0:  # indeterminate: a spinner
            from rich.console import Console

            self._bar = Console(stderr=True).status(self.what + " ...")
            self._bar.start()
            return None
        if sys.stderr.isatty() and self.total > 0:
            from rich.progress import Progress

            self._bar = Progress(transient=True)
            self._bar.start()
            task = self._bar.add_task(self.what, total=self.total)
            return lambda done: self._bar.update(task, completed=done)
        return None

    def __exit__(self, *exc):
        if self._bar is not None:
            self._bar.stop()
        return False
