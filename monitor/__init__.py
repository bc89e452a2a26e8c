"""A monitoring session without the window and without Qt: each metric's worker, the controller (one worker
per metric, the transport) that the window and the headless mode share, and the headless mode itself
(`main_app.py --headless`), and command_run.py, the thread behind the window's "Run a command" box. No
module here imports Qt (tests/monitor/test_headless_without_qt.py)."""
