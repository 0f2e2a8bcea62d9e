"""Secrets in the environment, the backend configuration and a worker's own output never leave bench unredacted:
not in the store (any table, any column, record_json included), the kept logs, the report, the exports, or what
`bench run` prints. Real cells, real launcher."""
import sqlite3
from pathlib import Path

import pytest

from bench.core.redact import REDACTED
from bench.planning.cell import cell_id
from bench.planning.matrix import load_matrix_text
from tests.conftest import TINY_WORKLOAD, bench_cli

ACCOUNT_KEY = "Zm9vYmFyc2VjcmV0a2V5" + "Q" * 64 + "AB=="  # 86 base64 characters + "==": an Azure storage key
SECRETS = {
    "account_key": ACCOUNT_KEY,
    "sas_sig": "sAsSiGnAtUrE0123456789abcdefXYZ%3D",
    "conn_key": "Q29ubmVjdGlvblN0cmluZ0tleVNlY3JldA1234",
    "client_secret": "cl1ent~SeCrEt.value_0987654321",
    "bearer": "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJiZW5jaC10ZXN0In0.c2lnbmF0dXJlLXNlY3JldA",
    "db_password": "hunter2-DB-passw0rd",
    "mysql_pwd": "my5ql-pwd-SECRET",
    "sas_token_env": "sv=2022-11-02&sr=c&sig=EnvSasSig0987654321zzz",
    "flag_key": "FlagKeyValue-123456789-secret",
    "url_password": "Url-Pa55word-in-userinfo",
}
# Variables whose names give them away, and ones whose names do not (the value must give itself away).
POISONED_ENV = {
    "AZURE_STORAGE_KEY": SECRETS["account_key"],
    "DATA_URL": f"https://acct.blob.core.windows.net/data?sv=2022-11-02&sp=rl&sig={SECRETS['sas_sig']}",
    "AZURE_STORAGE_CONNECTION_STRING": f"DefaultEndpointsProtocol=https;AccountName=acct;"
                                       f"AccountKey={SECRETS['conn_key']};EndpointSuffix=core.windows.net",
    "AZURE_CLIENT_SECRET": SECRETS["client_secret"],
    "HTTP_HEADERS": f"Authorization: Bearer {SECRETS['bearer']}",
    "DB_PASSWORD": SECRETS["db_password"],
    "MYSQL_PWD": SECRETS["mysql_pwd"],
    "AZURE_STORAGE_SAS_TOKEN": SECRETS["sas_token_env"],
    "TRAIN_EXTRA_ARGS": f"--storage-account-key {SECRETS['flag_key']}",
    "MIRROR": f"https://bench:{SECRETS['url_password']}@mirror.example.com/simple",
}
# A worker that prints its configuration: every shape in one log line each, as libraries really do.
SAY = "\n".join([
    f"storage key: {SECRETS['account_key']}",
    f"reading {POISONED_ENV['DATA_URL']}",
    f"connection: {POISONED_ENV['AZURE_STORAGE_CONNECTION_STRING']}",
    f"auth: client_secret={SECRETS['client_secret']}",
    POISONED_ENV["HTTP_HEADERS"],
    f"password: {SECRETS['db_password']}",
    f"MYSQL_PWD={SECRETS['mysql_pwd']}",
    f"AZURE_STORAGE_SAS_TOKEN={SECRETS['sas_token_env']}",
    f"exec train.py {POISONED_ENV['TRAIN_EXTRA_ARGS']}",
    f"pip index {POISONED_ENV['MIRROR']}",
])

MATRIX = f"""
name: secrets
{TINY_WORKLOAD}
  loader_workers: 1
axes:
  gpu: [cpu]
  mpi: [openmpi]
  gpus: [1]
  data: [synthetic, imagenet]
backend:
  # The backend configuration is poisoned too: a data set path carrying a SAS signature reaches the argv.
  imagenet_dir: "data/acct?sv=1&sig={SECRETS['sas_sig']}"
  imagenet_sample: {{classes: 2, per_class: 4}}
"""


def all_text_under(d: Path) -> dict[Path, str]:
    """Every file bench wrote (the data set the matrix asked for, under data/, is the user's own)."""
    import pandas as pd

    out = {}
    for p in d.rglob("*"):
        if not p.is_file() or p.name == "m.yaml" or p.relative_to(d).parts[0] == "data":
            continue
        out[p] = p.read_bytes().decode("utf-8", errors="replace")
        if p.suffix == ".parquet":  # compressed columns: read the values back
            out[p] += pd.read_parquet(p).to_csv()
    return out


def test_each_shape_is_redacted_in_text_and_ordinary_lines_are_left_alone():
    from bench.core.redact import redact_argv, redact_env, redact_text

    said = redact_text(SAY)
    assert [name for name, secret in SECRETS.items() if secret in said] == []
    assert said.count(REDACTED) >= len(SECRETS)
    env = redact_env(POISONED_ENV)
    assert [k for k, v in env.items() if any(secret in v for secret in SECRETS.values())] == []
    argv = redact_argv(["python", "train.py", "--storage-account-key", SECRETS["flag_key"], "--data", MATRIX])
    assert SECRETS["flag_key"] not in " ".join(argv) and SECRETS["sas_sig"] not in " ".join(argv)
    ordinary = ("mpirun -np 2 --bind-to none --map-by slot -x OMP_NUM_THREADS python w.py --cell-id 6bbe3e8f7077\n"
                "[vm:08149] mca: bml: Using vader btl for send to [[29490,1],1] on node vm\n"
                "bench worker: repeat 0: 9.5 img/s over 2 workers, window 1.68 s, slowest rank 1\n"
                "NCCL INFO NET/IB : No device found. tokenizer: bert, PWD=/work, keyboard layout us")
    assert redact_text(ordinary) == ordinary


@pytest.mark.e2e
def test_no_secret_reaches_the_store_logs_report_exports_or_messages(tmp_path):
    (tmp_path / "m.yaml").write_text(MATRIX, encoding="utf-8")
    ids = {c["data"]: cell_id(c) for c in load_matrix_text(MATRIX).cells()}
    # The synthetic cell prints every secret and carries on (ok records); the real-data cell raises an error
    # quoting them all (a failed record: error, log tail).
    env = {**POISONED_ENV, "BENCH_FAULT_SAY": SAY,
           "BENCH_FAULT": f"say:rank=0:step=2:cell={ids['synthetic']},raise:rank=0:step=2:cell={ids['imagenet']}"}
    run = bench_cli("run", "m.yaml", cwd=tmp_path, env=env, timeout=900)
    assert run.returncode == 1, run.stderr[-3000:]
    report = bench_cli("report", cwd=tmp_path, env=env)
    assert report.returncode == 0, report.stderr[-2000:]
    exports = [bench_cli("export", "--format", fmt, "-o", f"out/records.{fmt}", cwd=tmp_path, env=env)
               for fmt in ("csv", "json", "parquet")]
    assert [e.returncode for e in exports] == [0, 0, 0], [e.stderr for e in exports]

    db = tmp_path / "results" / "bench.db"
    with sqlite3.connect(db) as conn:
        statuses = dict(conn.execute("SELECT cell_id, GROUP_CONCAT(DISTINCT status) FROM records GROUP BY cell_id"))
        assert statuses == {ids["synthetic"]: "ok", ids["imagenet"]: "failed"}
        stored = []
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            for row in conn.execute(f"SELECT * FROM {table}"):
                stored += [str(v) for v in row if v is not None]
    stored_text = "\n".join(stored)
    # The secrets were really there to be leaked: the worker printed them, the argv carried one.
    # (the failed record's error names the raise; its log tail may have only the traceback's end)
    assert any(said in stored_text for said in ("bench fault: say at step 2", "bench fault: raise",
                                                "bench fault injection: raised at step 2: storage key: "))
    assert REDACTED in stored_text
    places = {"store": stored_text, "run stderr": run.stderr + run.stdout,
              "report/export output": report.stdout + report.stderr + "".join(e.stdout + e.stderr for e in exports)}
    places.update({str(p.relative_to(tmp_path)): text for p, text in all_text_under(tmp_path).items()})
    logs = [p for p in places if p.endswith("log.txt")]
    assert len(logs) == 2 and all(REDACTED in places[p] for p in logs), logs
    assert any(p.startswith("reports") for p in places) and any(p.startswith("out") for p in places)
    leaks = [(name, where) for where, text in places.items() for name, secret in SECRETS.items() if secret in text]
    assert not leaks, f"secrets leaked: {leaks}"
