"""A monitoring session without the window and without Qt: each metric's worker, the controller (one worker
per metric, the transport) that the window and the headless mode share, and the headless mode itself
(`main_app.py --headless`). command_run.py, the window's thread for the "Run a command" box, is the one
module here that uses Qt."""
