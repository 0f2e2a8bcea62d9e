"""The host's pip settings, handed to an image build without entering the image.

Behind a TLS-inspecting proxy (these machines; many corporate networks) pip inside a build fails with
CERTIFICATE_VERIFY_FAILED until it gets the same settings pip has on the host: the index and find-links it uses
(`PIP_*` variables, /etc/pip.conf, ~/.config/pip/pip.conf) and the CA bundle its `cert` names. They are written into
one pip.conf plus the CA file, which the build mounts as secrets for the install step only (docker/Dockerfile.j2);
local folders the settings name (find-links, file:// indexes) are mounted read-only at the same path. Nothing of it
may be left in a layer: `leak_markers` are the strings `bench images build` then looks for in the image.
"""
from __future__ import annotations

import configparser
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

CA_TARGET = "/run/bench-pip/ca.crt"  # where the build mounts the CA bundle (the Dockerfile's secret target)
# pip's own order of files, lowest precedence first (pip docs, "Configuration"); PIP_CONFIG_FILE and the
# environment come last. Site files (a venv's pip.conf) are not the host's settings.
GLOBAL_FILES = ("/etc/xdg/pip/pip.conf", "/etc/pip.conf")
USER_FILES = ("~/.pip/pip.conf", "~/.config/pip/pip.conf")
# Settings that are about this host's pip, not about reaching the index: the build's own ENV decides them.
NOT_PASSED = {"no-cache-dir", "cache-dir", "config-file", "disable-pip-version-check", "require-virtualenv",
              "target", "prefix", "user", "src"}
LOCATION_KEYS = ("find-links", "extra-index-url", "index-url")
FILE_KEYS = ("constraint", "requirement")  # files the settings name: their folder is mounted at the same path


@dataclass
class PipSettings:
    values: dict[str, str]  # pip option (long name without dashes) -> value, for the build's pip.conf
    ca_file: Path | None  # the CA bundle the host's `cert` names
    local_dirs: list[str] = field(default_factory=list)  # folders the settings name: mounted at the same path

    def conf_text(self) -> str:
        lines = ["[global]"] + [f"{k} = {v}" for k, v in sorted(self.values.items())]
        return "\n".join(lines) + "\n"

    def leak_markers(self) -> list[str]:
        """Strings that only the host's pip settings hold: none may appear in the image's history or files."""
        items = [item for k in LOCATION_KEYS + FILE_KEYS for item in self.values.get(k, "").split()]
        markers = set(items) | {re.sub(r"^file://", "", item) for item in items}
        return sorted(m for m in markers if len(m) > 6)


def _read_files(paths) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in paths:
        path = Path(p).expanduser()
        if not path.is_file():
            continue
        cfg = configparser.ConfigParser(interpolation=None)
        try:
            cfg.read(path)
        except configparser.Error:
            continue  # pip itself would refuse it; the build then runs with what the other sources say
        for section in ("global", "install", "download"):
            if cfg.has_section(section):
                out.update({k.replace("_", "-"): " ".join(v.split()) for k, v in cfg.items(section)})
    return out


def host_pip_settings(environ: dict[str, str] | None = None) -> PipSettings:
    """The effective settings: global files, user files, PIP_CONFIG_FILE, then PIP_* variables (pip's order)."""
    env = os.environ if environ is None else environ
    files = list(GLOBAL_FILES) + list(USER_FILES)
    if env.get("PIP_CONFIG_FILE") and env["PIP_CONFIG_FILE"] != os.devnull:
        files.append(env["PIP_CONFIG_FILE"])
    values = _read_files(files)
    for name, value in env.items():
        if name.startswith("PIP_") and name != "PIP_CONFIG_FILE":
            values[name[4:].lower().replace("_", "-")] = " ".join(value.split())
    values = {k: v for k, v in values.items() if k not in NOT_PASSED and v}
    ca = values.pop("cert", None)
    ca_file = Path(ca) if ca and Path(ca).is_file() else None
    if ca_file is not None:
        values["cert"] = CA_TARGET
    local = []
    for key in LOCATION_KEYS:
        for item in values.get(key, "").split():
            path = re.sub(r"^file://", "", item)
            if path.startswith("/"):
                folder = path if Path(path).is_dir() else str(Path(path).parent)
                if Path(folder).is_dir():
                    local.append(_top_folder(folder))
    for key in FILE_KEYS:
        for item in values.get(key, "").split():
            if item.startswith("/") and Path(item).is_file():
                local.append(str(Path(item).parent))
    return PipSettings(values, ca_file, sorted(set(local)))


def _top_folder(folder: str) -> str:
    """A file:// index's root (…/simple's parent holds the files it links to), else the folder itself."""
    p = Path(folder)
    return str(p.parent) if p.name == "simple" else str(p)


def write_settings(settings: PipSettings, into: Path) -> tuple[Path, Path | None]:
    """pip.conf and a copy of the CA bundle in `into` (a private temporary folder); their paths."""
    into.mkdir(parents=True, exist_ok=True)
    conf = into / "pip.conf"
    conf.write_text(settings.conf_text())
    ca = None
    if settings.ca_file is not None:
        ca = into / "ca.crt"
        shutil.copyfile(settings.ca_file, ca)
    return conf, ca
