#!/usr/bin/env python3
"""The collector an instructor runs for a lab: every machine POSTs its metric batches to /data; each
batch is stored exactly once (SQLite file by default, PostgreSQL for several server processes), gaps
are tracked per (host, run, source), and / shows the lab's data. See docs/collector.md.

EXAMPLES:
    python server.py                                   # 127.0.0.1:5000, ./collector.db
    python server.py --host 0.0.0.0 --tokens-file lab-tokens.txt --log-file server_data.log
    python server.py --db postgresql://lab@dbhost/lab --port 5001
    python server.py --retention raw=48h,5m=30d --max-db-bytes 20GB  # keep less, and at most 20 GB
    python server.py --push-config push.json           # also push profiles to Pyroscope / OpenTelemetry
    python server.py db upgrade --db old-lab.db         # upgrade an older collector's database, then exit
"""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import queue
import sys

from sqlalchemy.exc import SQLAlchemyError

from collector import create_app, httpserver, migrate, retention
from collector import settings as settings_mod
from collector.push_targets import load_push_config
from collector.state import EXTENSION, PUSH_EXTENSION
from collector.store import make_engine
from collector.tokens import load_tokens, loose_permissions


def _console_log() -> logging.handlers.QueueListener:
    """Log lines go to stderr from a thread of their own; a request only queues its line. (A handler
    writes under a lock, and under load the request threads would queue on it, one per batch.)"""
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    lines: queue.SimpleQueue = queue.SimpleQueue()
    # what no line shows, not gathered for each (the logging HOWTO's "Optimization"): the caller's
    # file and line (a walk up the stack), thread and process names
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    logging.root.addHandler(logging.handlers.QueueHandler(lines))
    logging.root.setLevel(logging.INFO)
    listener = logging.handlers.QueueListener(lines, console)
    listener.start()
    return listener


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="server.py", description=__doc__.split("\n\n")[0],
                                     epilog="examples:" + __doc__.split("EXAMPLES:")[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument("--port", type=int, default=5000, help="port to listen on (default 5000)")
    parser.add_argument("--db", default=settings_mod.DEFAULT_DB,
                        help="database: an SQLite file path or URL (default ./collector.db), or postgresql://...")
    parser.add_argument("--log-file", help="also write one line per batch to this file")
    parser.add_argument("--token", help="require this upload token, named 'token' (visible in ps: prefer --tokens-file)")
    parser.add_argument("--tokens-file", help="require one of these tokens: lines 'name token', or JSON {name: token}")
    parser.add_argument("--read-tokens-file", help="tokens that may read (the pages, /api, /metrics) but not post;"
                        " once any token is configured, reading needs one")
    parser.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                        help="a name clients reach this collector by, besides its IP addresses and this machine's"
                             " names (repeatable)")
    parser.add_argument("--max-body", type=int, default=settings_mod.DEFAULT_MAX_BODY,
                        help="largest request body in bytes, before and after gunzip (default 8 MiB)")
    parser.add_argument("--max-streams", type=int, default=settings_mod.DEFAULT_MAX_STREAMS,
                        help="streams (host, run, metric) kept at most; a batch making one more gets 429 (default 10000)")
    parser.add_argument("--push-config", metavar="FILE",
                        help="push profiles on a schedule to Grafana Pyroscope or an OpenTelemetry Collector: a JSON"
                             " list of targets (docs/collector.md, 'Pushing profiles to fleet backends')")
    parser.add_argument("--threads", type=int, default=8, help="waitress worker threads (default 8)")
    parser.add_argument("--retention", default=retention.DEFAULT_POLICY,
                        help="how long records are kept: raw records for the first age, then stack records merged"
                             " into buckets of each tier's length until its age, nothing older; 'off' keeps"
                             f" everything (default {retention.DEFAULT_POLICY})")
    parser.add_argument("--max-db-bytes", metavar="SIZE",
                        help="delete the oldest records once the database nears this size (2GB, 500MB, bytes;"
                             " default: no bound)")
    parser.add_argument("--compact-every", type=float, default=settings_mod.DEFAULT_COMPACT_EVERY_S, metavar="S",
                        help="seconds between two retention passes (default 300; 0: none)")
    args = parser.parse_args(argv)
    if not 0 < args.port < 65536:
        parser.error("--port must be 1..65535")
    if args.max_body < 1024:
        parser.error("--max-body must be at least 1024")
    if args.max_streams < 1:
        parser.error("--max-streams must be at least 1")
    if args.threads < 1:
        parser.error("--threads must be at least 1")
    if args.compact_every < 0:
        parser.error("--compact-every must be 0 or more")
    try:
        retention.parse_policy(args.retention)
        args.max_db_bytes = None if args.max_db_bytes is None else retention.parse_bytes(args.max_db_bytes)
    except ValueError as e:
        parser.error(str(e))
    if args.max_db_bytes is not None and args.max_db_bytes < 2**20:
        parser.error("--max-db-bytes must be at least 1MB")
    try:
        args.tokens = load_tokens(args.token, args.tokens_file)
        args.read_tokens = load_tokens(None, args.read_tokens_file)
        args.push_targets = load_push_config(args.push_config) if args.push_config else ()
    except ValueError as e:
        parser.error(str(e))
    for path, what in ((args.tokens_file, "tokens file"), (args.read_tokens_file, "tokens file"),
                       (args.push_config, "push config")):  # a push target's headers may hold credentials
        warning = loose_permissions(path, what) if path else None
        if warning:
            print(f"server.py: warning: {warning}", file=sys.stderr)
    return args


def db_command(argv: list[str]) -> int:
    """`server.py db upgrade [--db URL]`: bring the database's schema up to date without serving (the
    collector also does it when it starts)."""
    parser = argparse.ArgumentParser(prog="server.py db", description=db_command.__doc__.split(":", 1)[1])
    parser.add_argument("action", choices=["upgrade"])
    parser.add_argument("--db", default=settings_mod.DEFAULT_DB, help="the database, as for the server")
    args = parser.parse_args(argv)
    try:
        engine = make_engine(settings_mod.normalise_db_url(args.db))
    except ValueError as e:
        parser.error(str(e))
    try:
        before, after = migrate.upgrade_engine(engine)
    except migrate.SchemaError as e:
        print(f"server.py: refusing the database: {e}", file=sys.stderr)
        return 1
    except (SQLAlchemyError, OSError) as e:
        print(f"server.py: cannot open the database: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    finally:
        engine.dispose()
    print(f"database schema already at {after}" if before == after else
          f"database schema upgraded from {before or 'nothing (a new database)'} to {after}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["db"]:
        return db_command(argv[1:])
    args = parse_args(argv)
    console = _console_log()
    try:
        return _serve(args)
    finally:
        console.stop()  # writes out the lines still queued


def _serve(args: argparse.Namespace) -> int:
    logging.getLogger("waitress.queue").setLevel(logging.ERROR)  # "task queue depth" chatter under load
    logging.getLogger("alembic").setLevel(logging.WARNING)  # migrate logs the one line that matters
    try:
        app = create_app({"db_url": args.db, "log_file": args.log_file, "tokens": args.tokens,
                          "read_tokens": args.read_tokens, "allowed_hosts": tuple(args.allowed_host),
                          "max_body": args.max_body, "max_streams": args.max_streams, "retention": args.retention,
                          "max_db_bytes": args.max_db_bytes, "compact_every_s": args.compact_every,
                          "push_targets": args.push_targets})
    except migrate.SchemaError as e:  # the URL may hold a password: not shown
        print(f"server.py: refusing the database: {e}", file=sys.stderr)
        return 1
    except (SQLAlchemyError, ValueError, OSError) as e:
        print(f"server.py: cannot open the database or log: {str(e).splitlines()[0]}", file=sys.stderr)
        return 1
    store, pusher = app.extensions[EXTENSION].store, app.extensions[PUSH_EXTENSION]
    try:
        server = httpserver.make_server(app, args.host, args.port, args.threads, args.max_body)
    except OSError as e:
        print(f"server.py: cannot listen on {args.host}:{args.port}: {e.strerror or e}", file=sys.stderr)
        if pusher:
            pusher.stop()
        store.close()
        return 1
    logging.getLogger("collector").info(
        "collector on http://%s:%d/ storing in %s%s%s", args.host, args.port, store.engine.url.render_as_string(),
        f", {len(args.tokens)} token(s) required" if args.tokens else " (no tokens: anyone may post)",
        f"; pushing profiles to {', '.join(t.name for t in args.push_targets)}" if args.push_targets else "")
    try:
        server.run()
    except KeyboardInterrupt:  # Ctrl-C is how an instructor stops it
        pass
    finally:
        if pusher:
            pusher.stop()
        store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
