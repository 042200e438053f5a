"""Split py-spy raw stacks of a host process into stages: the innermost frame matching a rule decides
(rules are (stage, substring of 'function (file')); stacks matching none go to 'other'."""

import collections
import sys

from spy import load, short, store_line_rules

ENTITY_RULES = [
    # innermost-first wins, so specific rules are listed as they nest (any order works: innermost frame decides)
    # the lines of journal/sqlite.py's _store that run SQLite, read from its source (they move with the file)
    *store_line_rules("journal write: sqlite INSERT (multi-row)", "journal write: sqlite INSERT tags",
                      "journal write: sqlite COMMIT (fsync, WAL)"),
    ("journal write: sqlite BEGIN IMMEDIATE", "_Connection.begin"),
    ("journal write: sqlite other", "SqliteJournal._store"),
    ("event encode: msgpack + ext hooks (serialize)", "serialize (journal/serialization.py"),
    ("event encode: msgpack + ext hooks (serialize)", "_Encoder._default"),
    # format 2 (issue 16): the Packer call is C inside encode_writes (counted as framing), its hook is Python
    ("event encode: msgpack + ext hooks (serialize)", "_default (journal/serialization.py"),
    ("event encode: record framing (flatten, crc, key_seed, rows)", "encode_writes"),
    ("journal write: api (write_messages)", "Journal.write_messages"),
    ("dedup bookkeeping (SeenIds.add)", "SeenIds.add"),
    (
        "batching: AppliedBatch + _Entry + queue (_journal_applied, _queue_write, _contribute)",
        "IdempotentReceiver._journal_applied",
    ),
    (
        "batching: AppliedBatch + _Entry + queue (_journal_applied, _queue_write, _contribute)",
        "PersistentActor._contribute",
    ),
    (
        "batching: AppliedBatch + _Entry + queue (_journal_applied, _queue_write, _contribute)",
        "_Applications.__init__",
    ),
    (
        "batching: AppliedBatch + _Entry + queue (_journal_applied, _queue_write, _contribute)",
        "PersistentActor._take_batch",
    ),
    (  # the fast path's queuing (one _OneWrite per entity and commit), called from persist_applied
        "batching: AppliedBatch + _Entry + queue (_journal_applied, _queue_write, _contribute)",
        "PersistentActor._queue_one",
    ),
    ("entity receive: Account.receive_command + persist_applied", "IdempotentReceiver.persist_applied"),
    ("entity receive: Account.receive_command + persist_applied", "Account.receive_command"),
    ("entity receive: Account.receive_command + persist_applied", "PersistentActor.receive"),
    ("handlers after commit: _on_write_results, user handler, applied count", "_on_write_results"),
    ("coordinator settle (group commit loop)", "PersistenceCoordinator.settle"),
    ("host dispatch: deliver/_invoke (routing to entity)", "Host.deliver"),
    ("host dispatch: deliver/_invoke (routing to entity)", "Host._invoke"),
    ("batch unpickle (actors.transport.unpack)", "unpack (actors/transport.py"),
    ("replies: outbox flush, pickle, send", "Outbox.flush"),
    ("host settle loop (hooks, frees after commit)", "Host.settle"),
    ("host on_batch (self)", "Host.on_batch"),
    ("Thespian transport (receive, select, send, acks)", "thespian/"),
]
IDLE = ("EpollSelector.select", "PollPass.select", "sitecustomize")  # (PollPass: Thespian's poll since §24)
FEED_RULES = [
    ("Row objects: RowChunk.items / _expand (a Row per row), Row.body (a dict per row)", "RowChunk.items"),
    (
        "Row objects: RowChunk.items / _expand (a Row per row), Row.body (a dict per row)",
        "_expand (actors/transport.py",
    ),
    ("Row objects: RowChunk.items / _expand (a Row per row), Row.body (a dict per row)", "Row.body"),
    ("confirms + follow-ups (cumulative Confirmed per host)", "_confirm"),
    ("confirms + follow-ups (cumulative Confirmed per host)", "_send_follow_ups"),
    ("confirms + follow-ups (cumulative Confirmed per host)", "destination.py:9"),
    ("handlers after commit: _on_write_results, user handler, applied count", "apply_row.<locals>.applied"),
    ("entity receive: apply_row (RowApplied, dedup check, persist_applied)", "FeedReceiver.apply_row"),
    ("entity receive: apply_row (RowApplied, dedup check, persist_applied)", "already_applied"),
    (
        "entity receive: apply_row (RowApplied, dedup check, persist_applied)",
        "DurableAccount.receive_command",
    ),
    ("entity receive: apply_row (RowApplied, dedup check, persist_applied)", "FeedReceiver.mixin_command"),
] + ENTITY_RULES

BRIDGE_RULES = [  # the Spark bridge's host (§14)
    ("redelivery scan (_redeliver_overdue)", "_redeliver_overdue"),
    ("fan-out of feed rows (_fan_out, deliver_many)", "SparkBridge._fan_out"),
    ("follow-ups in (_forward)", "SparkBridge._forward"),
    ("confirms in (_confirm_many)", "SparkBridge._confirm_many"),
    ("after commit: follow-up rows out, ForwardsAccepted, completed trees (_progressed)", "SparkBridge._progressed"),
    ("ingest (_ingest, _stored)", "SparkBridge._ingest"),
    ("ingest (_ingest, _stored)", "SparkBridge._stored"),
    ("flush: Progress event built (_flush)", "SparkBridge._flush"),
] + ENTITY_RULES


def _rules(stage, *patterns):
    return [(stage, p) for p in patterns]


# The demo's hosts in one set of stages, whichever kind of destination they run (FeedReceiver entities before §20,
# FeedTables after), so that a stage's µs per transaction compare across trees (§20).
DEMO_RULES = (
    _rules("Row objects (RowChunk.items, Row.body, Row.value)", "RowChunk.items", "_expand (actors/transport.py",
           "Row.body", "Row.value")
    + _rules("batch unpickle (transport.unpack)", "unpack (actors/transport.py")
    + _rules("dedup (SeenIds, mark_applied)", "SeenIds.", "mark_applied", "already_applied", "forget_up_to")
    + _rules("confirms in and out, follow-ups out", "_confirm (spark_bridge", "_confirm_rows", "_out (spark_bridge",
             "FeedTable.mixin_table_message", "_send_follow_ups", "_forward (spark_bridge", "_reconfirm",
             "FeedReceiver.mixin_command")
    + _rules("apply: handlers and apply_row per row", "apply_row", "command_handler", "receive_command",
             "event_handler", "receive_recover", "EntityTable._apply", "_add_follow_up", "_follow_ups (spark_bridge",
             "persist_applied", "EntityTable.apply_once")
    + _rules("journal batching and queueing (AppliedBatch, queues, a table's flush)", "_journal_applied",
             "PersistentActor._contribute", "_Applications.__init__", "PersistentActor._take_batch",
             "PersistentActor._queue_one", "EntityTable._flush", "persist_async", "_queue_write", "_table_commit_values")
    + _rules("event encode (msgpack, framing, tags)", "encode_writes", "marked", "_default (journal/serialization.py",
             "serialize (journal/serialization.py", "mixin_tags", "_row_applied_values")
    + [r for r in ENTITY_RULES if r[0].startswith("journal write")]
    + _rules("after commit: handlers, replies", "_on_write_results", "EntityTable._committed", "EntityTable._send",
             "apply_row.<locals>.applied", "_Committed.__call__")
    + _rules("coordinator settle (group commit loop)", "PersistenceCoordinator.settle")
    + _rules("host dispatch (on_batch, deliver, a table's batch)", "Host.deliver", "Host._invoke", "Host._table_batch",
             "Host._hand_to_table", "Host.on_batch", "PersistentActor.receive", "receive_entities",
             "PersistentActor.mixin_command", "EntityTable.mixin_command")
    + _rules("outbox: pickle and send", "Outbox.flush")
    + _rules("host settle loop", "Host.settle")
    + _rules("Thespian transport", "thespian/")
)


def classify(stacks, rules):
    out = collections.Counter()
    for frames, n in stacks:
        if any(i in frames[-1] for i in IDLE):
            continue  # py-spy's idle detection misses some select() waits here: not CPU
        stage = None
        for f in reversed(frames):
            fs = short(f) + " " + f
            for name, pat in rules:
                if pat in fs:
                    stage = name
                    break
            if stage:
                break
        out[stage or "other (idle poll, fork frames, unknown)"] += n
    return out


if __name__ == "__main__":
    stacks = load(sys.argv[1])
    us = float(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2] else None
    total = sum(n for _, n in stacks)
    kind = sys.argv[3] if len(sys.argv) > 3 else ""
    rules = {"feed": FEED_RULES, "bridge": BRIDGE_RULES, "demo": DEMO_RULES}.get(kind, ENTITY_RULES)
    c = classify(stacks, rules)
    total = sum(c.values())
    commit = "journal write: sqlite COMMIT (fsync, WAL)"
    busy = total - c[commit]
    # us: the CPU figure (arg 2) split over the samples that are not COMMIT (COMMIT is mostly fsync wait, off-CPU)
    for k, n in c.most_common():
        cpu_us = "" if k == commit else f"{us * n / busy:.2f}" if us else ""
        print(f"| {k} | {100 * n / total:.1f}% | {cpu_us} |")
    print(f"| total ({total} samples, idle select excluded) | 100% | {us or ''} |")
