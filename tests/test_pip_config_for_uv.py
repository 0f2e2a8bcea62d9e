"""scripts/pip_config_for_uv.py: pip's package sources and limits handed to uv (scripts/install.sh installs the pinned
set with uv, which reads none of pip's configuration)."""
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "pip_config_for_uv.py"
spec = importlib.util.spec_from_file_location("pip_config_for_uv", SCRIPT)
helper = importlib.util.module_from_spec(spec)
spec.loader.exec_module(helper)

LISTING = """:env:.default-timeout='180'
:env:.find-links='/opt/wheels'
global.cert='/etc/ssl/certs/ca-certificates.crt'
global.constraint='/etc/pip/constraints.txt'
global.extra-index-url='file:///a/simple file:///b/simple'
global.find-links='/elsewhere'
install.index-url='https://mirror.example/simple'
global.index-url='https://ignored.example/simple'
"""


def test_every_source_and_limit_becomes_an_option_and_a_variable_wins_over_a_file():
    lines = helper.uv_lines(helper.settings(LISTING))
    assert sorted(lines[:2]) == ["SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt", "UV_HTTP_TIMEOUT=180"]
    pairs = list(zip(lines[2::2], lines[3::2]))
    assert pairs == [("--index-url", "https://mirror.example/simple"),  # install. over global.
                     ("--extra-index-url", "file:///a/simple"), ("--extra-index-url", "file:///b/simple"),
                     ("--find-links", "/opt/wheels"),  # the variable over the file
                     ("--constraint", "/etc/pip/constraints.txt")]


def test_no_configuration_hands_nothing_over():
    assert helper.uv_lines(helper.settings("")) == []


def test_it_reads_pips_own_listing(tmp_path):
    """The real `pip config list`, with a configuration file of the test's own and nothing else."""
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /some/wheels\nextra-index-url =\n    file:///x/simple\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=str(conf))
    out = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, check=True,
                         timeout=60).stdout.split()
    assert ("--find-links", "/some/wheels") in list(zip(out, out[1:]))
    assert ("--extra-index-url", "file:///x/simple") in list(zip(out, out[1:]))
