"""The store's schema: the pinned migrations, applied forward under a write lock, and the records table's columns."""
from __future__ import annotations

import sqlite3

from bench.store.failures import StoreError

STORE_SCHEMA_VERSION = 15

# Each migration's SQL is a literal, written once and never edited: a store made by any earlier bench replays
# exactly what that bench ran. A new column (a new cell key, say) is a new migration that ALTERs the table;
# tests/test_store_migrations.py holds each text's hash, so editing an old one fails a test.
MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE runs (
        run_id TEXT PRIMARY KEY,
        started_unix REAL NOT NULL,
        finished_unix REAL,
        matrix_name TEXT,
        matrix_path TEXT,
        backend TEXT,
        host TEXT,
        bench_version TEXT,
        plan_json TEXT
    );
    CREATE TABLE records (
        run_id TEXT NOT NULL, cell_id TEXT NOT NULL, repeat INTEGER NOT NULL, status TEXT NOT NULL, error TEXT,
        gpu TEXT, framework TEXT, mpi TEXT, ib INTEGER, gpus INTEGER, model TEXT, data TEXT, batch_per_gpu INTEGER,
        image_size INTEGER, precision TEXT, warmup_steps INTEGER, steps INTEGER, repeats INTEGER,
        channels_last INTEGER, threads INTEGER, nodes INTEGER, images_per_sec REAL, images_per_sec_per_gpu REAL,
        samples INTEGER, window_s REAL, step_time_median_s REAL, slowest_rank INTEGER,
        slowest_rank_images_per_sec REAL, world_size INTEGER, start_unix REAL, end_unix REAL,
        requested_transport TEXT, effective_transport TEXT, workload_version TEXT,
        record_json TEXT NOT NULL, written_unix REAL NOT NULL,
        PRIMARY KEY (run_id, cell_id, repeat)
    );
    CREATE INDEX records_cell ON records (cell_id, status);
    """,
    # 2: job-level repeats (`jobs` per cell, `job` in the key), engine, data layout and loader workers, rank
    # spread, input wait. SQLite cannot add a column to a primary key, so the table is rebuilt and schema 1's
    # rows copied over.
    2: """
    CREATE TABLE records_v2 (
        run_id TEXT NOT NULL,
        cell_id TEXT NOT NULL,
        job INTEGER NOT NULL DEFAULT 0,
        repeat INTEGER NOT NULL,
        status TEXT NOT NULL,
        error TEXT,
        gpu TEXT, framework TEXT, mpi TEXT, ib INTEGER, gpus INTEGER, model TEXT, engine TEXT, data TEXT,
        data_layout TEXT, loader_workers INTEGER, batch_per_gpu INTEGER, image_size INTEGER, precision TEXT,
        warmup_steps INTEGER, steps INTEGER, repeats INTEGER, jobs INTEGER, channels_last INTEGER, threads INTEGER,
        nodes INTEGER, images_per_sec REAL, images_per_sec_per_gpu REAL, samples INTEGER, window_s REAL,
        step_time_median_s REAL, slowest_rank INTEGER, slowest_rank_images_per_sec REAL, world_size INTEGER,
        start_unix REAL, end_unix REAL, requested_transport TEXT, effective_transport TEXT, workload_version TEXT,
        rank_spread REAL, input_wait_s REAL,
        record_json TEXT NOT NULL,
        written_unix REAL NOT NULL,
        PRIMARY KEY (run_id, cell_id, job, repeat)
    );
    INSERT INTO records_v2 (
        run_id, cell_id, repeat, status, error, gpu, framework, mpi, ib, gpus, model, data, batch_per_gpu,
        image_size, precision, warmup_steps, steps, repeats, channels_last, threads, nodes, images_per_sec,
        images_per_sec_per_gpu, samples, window_s, step_time_median_s, slowest_rank, slowest_rank_images_per_sec,
        world_size, start_unix, end_unix, requested_transport, effective_transport, workload_version, record_json,
        written_unix, job, jobs)
    SELECT
        run_id, cell_id, repeat, status, error, gpu, framework, mpi, ib, gpus, model, data, batch_per_gpu,
        image_size, precision, warmup_steps, steps, repeats, channels_last, threads, nodes, images_per_sec,
        images_per_sec_per_gpu, samples, window_s, step_time_median_s, slowest_rank, slowest_rank_images_per_sec,
        world_size, start_unix, end_unix, requested_transport, effective_transport, workload_version, record_json,
        written_unix, 0, 1
    FROM records;
    DROP TABLE records;
    ALTER TABLE records_v2 RENAME TO records;
    CREATE INDEX records_cell ON records (cell_id, status);
    """,
    # 3: the transport verdict (requested vs effective) and the log line it rests on.
    3: """
    ALTER TABLE records ADD COLUMN transport_verdict TEXT;
    ALTER TABLE records ADD COLUMN transport_evidence TEXT;
    """,
    # 4: claims, so two runs on one store never measure a cell at the same time. A claim names its owner (run,
    # host, pid and the pid's start time, so a reused pid is not mistaken for it) and is kept alive by heartbeats;
    # a claim whose owner is gone (same host) or whose heartbeat is older than the lease may be taken over, and
    # the job token lets the new owner sweep the dead owner's processes.
    4: """
    CREATE TABLE claims (
        cell_id TEXT PRIMARY KEY,
        run_id TEXT NOT NULL,
        host TEXT NOT NULL,
        pid INTEGER NOT NULL,
        pid_started REAL,
        token TEXT,
        claimed_unix REAL NOT NULL,
        heartbeat_unix REAL NOT NULL
    )
    """,
    # 5: workers per node (a cell key; null = as many as the SKU's VM holds).
    5: """
    ALTER TABLE records ADD COLUMN workers_per_node INTEGER;
    """,
    # 6: collective cells (model: allreduce): the sweep's largest message (a cell key), and one row per message
    # size per repeat, beside the record that carries the same rows in its JSON. The stack's keys are copied in so
    # fitting latency and bandwidth per stack reads this table alone.
    6: """
    ALTER TABLE records ADD COLUMN max_message_bytes INTEGER;
    CREATE TABLE collectives (
        run_id TEXT NOT NULL, cell_id TEXT NOT NULL, job INTEGER NOT NULL, repeat INTEGER NOT NULL,
        op TEXT NOT NULL, bytes INTEGER NOT NULL, iterations INTEGER NOT NULL,
        time_median_s REAL NOT NULL, time_p10_s REAL, time_p90_s REAL, time_min_s REAL, time_max_s REAL,
        algbw_bytes_per_s REAL, busbw_bytes_per_s REAL,
        gpu TEXT, framework TEXT, mpi TEXT, ib INTEGER, engine TEXT, world_size INTEGER, nodes INTEGER,
        PRIMARY KEY (run_id, cell_id, job, repeat, op, bytes)
    );
    CREATE INDEX collectives_stack ON collectives (mpi, ib, engine, nodes)
    """,
    # 7: what a collective costs the CPU: the busiest rank's engine CPU seconds per iteration (the process's less the
    # waiting caller's), median (null for sweeps recorded before it was measured).
    7: """
    ALTER TABLE collectives ADD COLUMN cpu_time_median_s REAL;
    """,
    # 8: compute and collective on shared cores (CPU allreduce sweeps, at the largest size): the probe kernel's rate
    # while the engine idles and while the allreduce is in flight, as fractions of its rate alone, and the
    # allreduce's time under that load (null elsewhere and in older sweeps).
    8: """
    ALTER TABLE collectives ADD COLUMN idle_compute_ratio REAL;
    ALTER TABLE collectives ADD COLUMN contended_compute_ratio REAL;
    ALTER TABLE collectives ADD COLUMN contended_time_median_s REAL;
    """,
    # 9: the allreduce's stretch under the probe measured in pairs (alone, then beside the probe, seconds apart),
    # which drift between the sweep's timing and the contention measurement cannot move.
    9: """
    ALTER TABLE collectives ADD COLUMN contended_stretch REAL;
    """,
    # 10: the training step's settings (cell keys: the JPEG loader asked for, torch.compile's mode, SGD's kernel, CUDA
    # graphs), each defaulting to the value rows written before the keys ran with; and what ran of them, from the
    # record (null where the worker did not say: rows before this migration, other frameworks): the loader `auto`
    # resolved to, the SGD kernel the update ran, what the CUDA graphs captured (fwd+bwd | step).
    10: """
    ALTER TABLE records ADD COLUMN loader TEXT DEFAULT 'auto';
    ALTER TABLE records ADD COLUMN compile TEXT DEFAULT 'off';
    ALTER TABLE records ADD COLUMN optimizer_impl TEXT DEFAULT 'default';
    ALTER TABLE records ADD COLUMN cuda_graphs INTEGER DEFAULT 0;
    ALTER TABLE records ADD COLUMN effective_loader TEXT;
    ALTER TABLE records ADD COLUMN effective_optimizer_impl TEXT;
    ALTER TABLE records ADD COLUMN effective_cuda_graphs TEXT;
    """,
    # 11: the source a run ran (bench/core/source_revision.py): the checkout's commit and its uncommitted files under
    # bench/ and models/, as JSON; null for runs before it (and for a bench outside a git checkout: {"commit": null}).
    11: """
    ALTER TABLE runs ADD COLUMN source_json TEXT;
    """,
    # 12: compute beside a replay of a training step's gradient stream (CPU allreduce sweeps, the largest size's row;
    # models/workloads/collectives/contention.py replay): the probe's rate as a fraction of its rate alone, and the
    # stream's tail after the replayed backward pass (null elsewhere and in older sweeps).
    12: """
    ALTER TABLE collectives ADD COLUMN replay_compute_ratio REAL;
    ALTER TABLE collectives ADD COLUMN replay_tail_s REAL;
    """,
    # 13: the workload as an axis (issue 47). One generic rate, samples/s, where a sample is the workload's own unit
    # (an image; a transformer's sequence of seq_len tokens): the image-rate columns are renamed (their values were
    # always samples / window_s), and each row says what a sample is and how many of the unit users quote (img/s,
    # tokens/s) it holds, so quoted rate = samples_per_sec x units_per_sample. Rows before this migration are
    # ResNet-50's images (or collective sweeps, which have no rate). The transformer's cell keys, at the values that
    # reproduce earlier rows, and what it measured beside the rate: FLOPs per sample (docs/transformer.md) and the
    # largest rank's peak memory.
    13: """
    ALTER TABLE records RENAME COLUMN images_per_sec TO samples_per_sec;
    ALTER TABLE records RENAME COLUMN images_per_sec_per_gpu TO samples_per_sec_per_gpu;
    ALTER TABLE records RENAME COLUMN slowest_rank_images_per_sec TO slowest_rank_samples_per_sec;
    ALTER TABLE records ADD COLUMN sample_unit TEXT DEFAULT 'image';
    ALTER TABLE records ADD COLUMN rate_unit TEXT DEFAULT 'img/s';
    ALTER TABLE records ADD COLUMN units_per_sample INTEGER DEFAULT 1;
    UPDATE records SET sample_unit = NULL, rate_unit = NULL, units_per_sample = NULL
        WHERE model IN ('allreduce', 'allgather', 'broadcast');
    ALTER TABLE records ADD COLUMN seq_len INTEGER;
    ALTER TABLE records ADD COLUMN grad_accum INTEGER DEFAULT 1;
    ALTER TABLE records ADD COLUMN activation_checkpointing INTEGER DEFAULT 0;
    ALTER TABLE records ADD COLUMN flops_per_sample REAL;
    ALTER TABLE records ADD COLUMN peak_memory_bytes INTEGER;
    """,
    # 14: the parallel layout as a cell key (issue 66; docs/layouts.md): its text form, null for every earlier row
    # (the engine's own data parallelism).
    14: """
    ALTER TABLE records ADD COLUMN layout TEXT;
    """,
    # 15: a layout cell's tp group may cross nodes when the cell asks (docs/layouts.md): 0 for every earlier row
    # (refused, as before the key).
    15: """
    ALTER TABLE records ADD COLUMN tp_across_nodes INTEGER DEFAULT 0;
    """,
}


def statements(version: int) -> list[str]:
    """Migration `version`, statement by statement (sqlite3 executes one at a time)."""
    return [s for s in MIGRATIONS[version].split(";") if s.strip()]


def schema_version_of(conn: sqlite3.Connection) -> int:
    """The schema a store is at: 0 for an empty file (no schema_version table yet)."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone():
        return 0
    return conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0


def refuse_newer(conn: sqlite3.Connection, where: str) -> None:
    """A store from a newer bench is left untouched: this bench cannot know what its columns mean."""
    _refuse(schema_version_of(conn), where)


def migrate(conn: sqlite3.Connection, where: str) -> None:
    """Brings the store to STORE_SCHEMA_VERSION, one migration per transaction; another process migrating the same
    store meanwhile is fine (each version is applied once)."""
    conn.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
    current = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
    _refuse(current, where)
    for version in range(current + 1, STORE_SCHEMA_VERSION + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            again = conn.execute("SELECT MAX(version) FROM schema_version").fetchone()[0] or 0
            if again < version:  # another process may have migrated meanwhile
                for statement in statements(version):
                    conn.execute(statement)
                conn.execute("INSERT INTO schema_version (version) VALUES (?)", (version,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _refuse(current: int, where: str) -> None:
    if current > STORE_SCHEMA_VERSION:
        raise StoreError(f"store schema {current} is newer than this bench understands ({STORE_SCHEMA_VERSION}); "
                         f"upgrade bench", where)


def record_columns() -> dict[str, str]:
    """Column → declared type (upper case) of the records table at this bench's schema, read from a scratch
    in-memory store built by the migrations (what `bench import` checks a CSV's header and values against)."""
    conn = sqlite3.connect(":memory:")
    try:
        for version in range(1, STORE_SCHEMA_VERSION + 1):
            for statement in statements(version):
                conn.execute(statement)
        return {r[1]: r[2].upper() for r in conn.execute("PRAGMA table_info(records)")}
    finally:
        conn.close()
